#!/usr/bin/python3
"""Instructions per job in batches of 100, by piece: where tinyq's batch time goes.

Wall time on a shared machine moves by 2x from run to run; instruction counts do not.
This runs the lifecycle's batch workload (add 100 in one transaction, claim 100, settle
100 in one transaction) under valgrind's callgrind, twice per system (100 jobs and
100 + N), and reports the difference per job, split by step (add only; add + claim;
all three). Systems: the floor of bench/lifecycle.py (whole, and without its event log
and counts), and tinyq with pieces of its schema taken out one at a time on a scratch
store (triggers dropped or re-created: the result breaks rules and is a measurement
only). The whole process is counted, the Python driver included, the same for all.

    /usr/bin/python3 bench/pieces.py [--ext dist/tinyq.so] [--jobs 900]

N stays under 1,024 jobs so that the one-off step of a line cut into buckets does not
land in the add-only run. Needs valgrind. Takes a few minutes.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(HERE, "work")
sys.path.insert(0, HERE)
import lifecycle as L  # noqa: E402

STORE = open(os.path.join(ROOT, "sql", "store.sql")).read()


def trigger(name):
    return re.search(r"CREATE TRIGGER %s .*?\nEND;\n" % name, STORE, re.S).group(0)


def without(name, statement_start, statement_end):
    """The trigger `name` re-created without its statement from statement_start to the
    first statement_end after it."""
    body = trigger(name)
    start = body.index(statement_start)
    end = body.index(statement_end, start) + len(statement_end)
    return "DROP TRIGGER %s;\n%s" % (name, body[:start] + body[end:])


def events_out():
    return (without("tinyq_jobs_added", "INSERT INTO tinyq_events", "NEW.note);\n")
            + without("tinyq_jobs_changed", "INSERT INTO tinyq_events", "OLD.last_event);\n"))


GROUPS_OUT = "DROP TRIGGER tinyq_jobs_grouped;\n"
LINED_OUT = "DROP TRIGGER tinyq_jobs_lined;\n"
SPILL_OUT = "DROP TRIGGER tinyq_counts_spilled;\n"
# The queue's row made first (as any add after the first finds it).
QUEUE_MADE = "INSERT INTO tinyq_queues (name) VALUES ('%s');\n" % L.QUEUE
VARIANTS = [
    ("tinyq as built", lambda: ""),
    ("without the group trigger's frame (tinyq_jobs_grouped)", lambda: GROUPS_OUT),
    ("without the line's trigger (tinyq_jobs_lined; its frame fires on every claim)", lambda: LINED_OUT),
    ("without the add's UPDATE for a line cut into buckets",
     lambda: without("tinyq_jobs_added", "  -- A line cut into buckets", "next_seq)) END\n  WHERE queue = NEW.queue AND NEW.status = 'queued' AND (spill IS NOT NULL OR queued > 1024);\n")),
    ("without the event rows (WAT-01)", lambda: QUEUE_MADE + events_out()),
    ("without any trigger on tinyq_jobs (no events, no counts)",
     lambda: GROUPS_OUT + LINED_OUT + SPILL_OUT + "DROP TRIGGER tinyq_jobs_added; DROP TRIGGER tinyq_jobs_changed;\n"),
]
FLOORS = [("floor", ()), ("floor without the counts", ("counts",)), ("floor without the event log", ("events",)),
          ("floor without both", ("counts", "events")),
          ("floor with tinyq's 35 columns", ("wide",)),
          ("floor with tinyq's 35 columns and its indexes", ("wide", "indexes")),
          ("floor without both, with tinyq's columns and indexes", ("counts", "events", "wide", "indexes"))]


def child(args):
    """One run, in the process callgrind counts: `steps` steps of `jobs` jobs."""
    path = os.path.join(WORK, "pieces-%d.db" % os.getpid())
    L.remove_db(path)
    if args.system == "floor":
        system = L.Floor(path, None, tuple(x for x in args.without.split(",") if x))
    else:
        system = L.Tinyq(path, args.system)
        system.conn.execute("SELECT tq_add('other', 1)")  # the store, before the patch
        system.conn.executescript(open(args.patch).read())
    conn = system.conn
    for b in range(args.jobs // 100):
        conn.execute("BEGIN IMMEDIATE")
        for i in range(100):
            system.add(L.QUEUE, L.PAYLOAD % (b * 100 + i))
        conn.execute("COMMIT")
        if args.steps >= 2:
            rows = system.claim(L.QUEUE, L.WORKER, 100)
        if args.steps >= 3:
            conn.execute("BEGIN IMMEDIATE")
            for job_id, attempt, _payload in rows:
                system.settle(job_id, attempt)
            conn.execute("COMMIT")
    conn.close()
    L.remove_db(path)


def instructions(argv):
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          sys.executable, os.path.abspath(__file__), "--child"] + argv,
                         capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def per_job(argv, jobs):
    """Instructions per job: add, claim, settle."""
    total = []
    for steps in (1, 2, 3):
        small = instructions(argv + ["--steps", str(steps), "--jobs", "100"])
        big = instructions(argv + ["--steps", str(steps), "--jobs", str(100 + jobs)])
        total.append((big - small) / jobs)
    return total[0], total[1] - total[0], total[2] - total[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ext", default=os.path.join(ROOT, "dist", "tinyq.so"), help="the tinyq build")
    ap.add_argument("--jobs", type=int, default=900)
    ap.add_argument("--only", choices=("floor", "tinyq"), help="only the floor's rows, or only tinyq's")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--system", help=argparse.SUPPRESS)
    ap.add_argument("--without", default="", help=argparse.SUPPRESS)
    ap.add_argument("--patch", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    os.makedirs(WORK, exist_ok=True)
    ext = os.path.join(WORK, "pieces", "tinyq")
    os.makedirs(os.path.dirname(ext), exist_ok=True)
    shutil.copyfile(args.ext, ext + ".so")
    print("| system | add | claim | settle | total | floor/this |")
    print("|---|---|---|---|---|---|")
    floor_total = None
    rows = [] if args.only == "tinyq" else [
        (label, ["--system", "floor", "--without", ",".join(w)]) for label, w in FLOORS]
    for label, patch in [] if args.only == "floor" else VARIANTS:
        patch_path = os.path.join(WORK, "pieces-%d-patch-%d.sql" % (os.getpid(), len(rows)))
        with open(patch_path, "w") as f:
            f.write(patch())
        rows.append((label, ["--system", ext, "--patch", patch_path]))
    for label, argv in rows:
        add, claim, settle = per_job(argv, args.jobs)
        total = add + claim + settle
        floor_total = floor_total or total
        print("| %s | %.1fk | %.1fk | %.1fk | %.1fk | %s |" % (
            label, add / 1e3, claim / 1e3, settle / 1e3, total / 1e3,
            "-" if args.only == "tinyq" else "%.2f" % (floor_total / total)), flush=True)


if __name__ == "__main__":
    main()
