#!/usr/bin/python3
"""tinyq timeline benchmark: a job's story (`tinyq get`, the job page) as the event log grows.

One job is added first and finished last, with N other events logged in between (plain
inserts into the log, as a busy store's other jobs would leave them: setup, not timed), so
its timeline spans the whole log. Measured at N = 10,000 and 1,000,000 (--quick) or
10,000,000 (full), on fresh files under bench/work/ (WAL, synchronous=NORMAL):

  story    views.job_story(conn, id): what `tinyq get` and the dashboard's job page call
           (tq_get, tq_steps, tq_watch WHERE job = ?), in-process, median ms
  cli      `python3 -m tinyq get DB ID --json`, a whole process, median ms (startup included)

Several builds side by side with --ext name=path (each loaded from a private copy; the CLI
row loads each build through $TINYQ_EXT). Writes
bench/results/timeline.md.

    /usr/bin/python3 bench/timeline.py --quick
    /usr/bin/python3 bench/timeline.py --ext before=/tmp/old/tinyq.so --ext after=dist/tinyq.so
"""
import argparse
import datetime
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "work")
RESULTS = os.path.join(ROOT, "bench", "results", "timeline.md")
sys.path.insert(0, os.path.join(ROOT, "python"))
from scale import connect  # noqa: E402  (bench/ is the script's own folder)
from tinyq import views  # noqa: E402

NOW = 1_900_000_000_000


def build(ext, path, events):
    db = connect(ext, path)  # a fresh file, as scale.py's cases
    db.execute("SELECT tq_clock(?)", (NOW,)).fetchone()
    db.execute("SELECT tq_add('t', '{}', '{\"id\": \"me\"}')").fetchone()
    chunk = 1_000_000
    for first in range(0, events, chunk):
        db.execute("BEGIN IMMEDIATE")
        db.execute("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
                   "INSERT INTO tinyq_events (id, queue, state, attempt, at) "
                   "SELECT 'other-' || (i % 1000), 't', 'waiting', 0, ? FROM c", (min(chunk, events - first), NOW))
        db.execute("COMMIT")
    jid, attempt = db.execute("SELECT id, attempt FROM tq_claim('t', 'w', 1)").fetchone()
    db.execute("SELECT tq_progress(?, ?, '50%')", (jid, attempt)).fetchone()
    db.execute("SELECT tq_settle(?, ?, 'done')", (jid, attempt)).fetchone()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


def median_ms(call, calls, budget_s):
    times = []
    start = time.perf_counter()
    while len(times) < calls and time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), len(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k and 1M events (else 10k and 10M)")
    parser.add_argument("--ext", action="append", help="name=path of a tinyq.so (default: dist/tinyq.so)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    sizes = [10_000, 1_000_000 if args.quick else 10_000_000]
    builds = []
    for i, spec in enumerate(args.ext or ["tinyq=" + os.path.join(ROOT, "dist", "tinyq.so")]):
        name, path = spec.split("=", 1)
        private = os.path.join(WORK, "timeline-%d" % i)
        os.makedirs(private, exist_ok=True)
        shutil.copyfile(path, os.path.join(private, "tinyq.so"))
        builds.append((name, os.path.join(private, "tinyq")))
    out = []

    def emit(line=""):
        print(line, flush=True)
        out.append(line)

    emit("# tinyq timeline benchmark (%s run)" % ("quick" if args.quick else "full"))
    emit()
    emit("- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
    emit("- load average: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    emit("- sqlite: %s" % sqlite3.sqlite_version)
    emit()
    emit("A job added first and finished last, N other events logged in between. ms per call, median.")
    emit()
    emit("| build | what | " + " | ".join("%s events" % format(n, ",") for n in sizes) + " | largest/smallest |")
    emit("|---|---|" + "---|" * (len(sizes) + 1))
    for name, ext in builds:
        rows = {"story": [], "cli": []}
        for n in sizes:
            path = os.path.join(WORK, "timeline-%d.db" % n)
            db = build(ext, path, n)
            story, _ = median_ms(lambda: views.job_story(db, "me"), 200, 10.0)
            assert [e["state"] for e in views.job_story(db, "me")["timeline"]] == ["waiting", "running", "progress",
                                                                                    "done"]
            rows["story"].append(story)
            env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), TINYQ_EXT=ext)
            cli, _ = median_ms(lambda: subprocess.run([sys.executable, "-m", "tinyq", "get", path, "me", "--json"],
                                                      env=env, check=True, capture_output=True), 15, 30.0)
            rows["cli"].append(cli)
            db.close()
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
        for what, label in (("story", "views.job_story (the job page)"), ("cli", "`tinyq get --json` (a process)")):
            cells = ["%.3f" % v for v in rows[what]]
            emit("| %s | %s | %s | %.2fx |" % (name, label, " | ".join(cells), rows[what][-1] / rows[what][0]))
    emit()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
