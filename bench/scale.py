#!/usr/bin/python3
"""tinyq scale benchmark (COST-01): the cost of one call as the store grows.

Seven cases, each at 1,000 / 100,000 jobs (and 1,000,000 in the full run), each on a fresh
file under bench/work/ (WAL, synchronous=NORMAL, Python's sqlite3):

  full_group   claim(1)+settle of a free tenant while one tenant's N jobs sit in a full
               group (group_concurrency 1)
  many_groups  the same, with N/100 full groups of 100 jobs each
  rate_window  add+claim(1)+settle on a queue whose rate window ('N00/1d') holds N starts
  get_last     tq_get (its `ahead`) of the last of N waiting jobs
  get_middle   tq_get of the job in the middle of N waiting jobs (the most work `ahead` does)
  stats        tq_stats('q') over N waiting jobs
  plain        claim(1)+settle with N waiting (one job added, untimed, before each)

Each case reports the median milliseconds per call over a round (at most ROUND_S seconds
or CALLS calls) and its ratio to the same case at 1,000, and the VM steps per call of
tinyq's statements (tq_statements), which do not depend on the machine's load. Several builds can be compared
in one run (--ext name=path, e.g. the build before and after a change); each is loaded
from a private copy. Writes bench/results/scale.md and, when matplotlib is importable
(peers.py sets up bench/work/venv with it), bench/results/scale.png.

    /usr/bin/python3 bench/scale.py --quick        # 1k and 100k
    /usr/bin/python3 bench/scale.py                # 1k, 100k and 1M
    /usr/bin/python3 bench/scale.py --ext before=/tmp/old/tinyq.so --ext after=dist/tinyq.so
"""
import argparse
import datetime
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "work")
RESULTS = os.path.join(ROOT, "bench", "results")
VENV_PY = os.path.join(WORK, "venv", "bin", "python")
CALLS = 300
ROUND_S = 3.0
TARGET = 1.5  # COST-01: within 1.5x of the cost at 1,000


def connect(ext, path):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.enable_load_extension(True)
    db.load_extension(ext)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def fill(db, n, queue, options_sql="'{}'"):
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
        f"SELECT count(tq_add(?, json_object('n', i), {options_sql})) FROM c", (n, queue))
    db.execute("COMMIT")


def claim_settle(db, queue, add_options):
    """One call: (an add, when add_options is given) a claim of 1 and its settle."""
    def call():
        if add_options is not None:
            db.execute("SELECT tq_add(?, '{}', ?)", (queue, add_options)).fetchone()
        row = db.execute("SELECT id, attempt FROM tq_claim(?, 'w', 1)", (queue,)).fetchone()
        db.execute("SELECT tq_settle(?, ?, 'done')", row).fetchone()
    return call


def full_group(db, n):
    db.execute("SELECT tq_queue('q', '{\"group_concurrency\": 1}')").fetchone()
    fill(db, n, "q", "'{\"group\": \"big\"}'")
    db.execute("SELECT count(*) FROM tq_claim('q', 'w', 1, '{\"lease\": \"1d\"}')").fetchone()
    return claim_settle(db, "q", '{"group": "free"}'), None


def many_groups(db, n):
    db.execute("SELECT tq_queue('q', '{\"group_concurrency\": 1}')").fetchone()
    fill(db, n, "q", f"json_object('group', 'g' || (i % {n // 100}))")
    while db.execute("SELECT count(*) FROM tq_claim('q', 'w', 1000, '{\"lease\": \"1d\"}')").fetchone()[0]:
        pass
    return claim_settle(db, "q", '{"group": "free"}'), None


def rate_window(db, n):
    db.execute("SELECT tq_queue('r', json_object('rate', ? || '/1d'))", (n * 100,)).fetchone()
    fill(db, n, "r")
    while True:
        rows = db.execute("SELECT id, attempt FROM tq_claim('r', 'w', 1000)").fetchall()
        if not rows:
            break
        db.execute("BEGIN IMMEDIATE")
        for row in rows:
            db.execute("SELECT tq_settle(?, ?, 'done')", row).fetchone()
        db.execute("COMMIT")
    return claim_settle(db, "r", "{}"), None


def get_at(before, after, job_id):
    """tq_get of a job with before(n) waiting jobs ahead of it and after(n) behind it."""
    def case(db, n):
        fill(db, before(n), "g")
        db.execute("SELECT tq_add('g', '{}', json_object('id', ?))", (job_id,)).fetchone()
        if after(n):
            fill(db, after(n), "g")
        return (lambda: db.execute("SELECT tq_get(?)", (job_id,)).fetchone()), None
    return case


def stats(db, n):
    fill(db, n, "s")
    return (lambda: db.execute("SELECT * FROM tq_stats('s')").fetchall()), None


def plain(db, n):
    fill(db, n, "p")
    untimed = lambda: db.execute("SELECT tq_add('p', '{}')").fetchone()  # noqa: E731
    return claim_settle(db, "p", None), untimed


CASES = {"full_group": full_group, "many_groups": many_groups, "rate_window": rate_window,
         "get_last": get_at(lambda n: n, lambda n: 0, "last"),
         "get_middle": get_at(lambda n: n // 2, lambda n: n - n // 2, "middle"), "stats": stats, "plain": plain}


def measure(ext, case, n):
    path = os.path.join(WORK, f"scale-{case}-{n}.db")
    db = connect(ext, path)
    t0 = time.monotonic()
    call, before_each = CASES[case](db, n)
    setup_s = time.monotonic() - t0
    times = []
    steps = 0
    start = time.monotonic()
    while len(times) < CALLS and time.monotonic() - start < ROUND_S:
        if before_each:
            before_each()
        before = vm_steps(db)
        t = time.perf_counter()
        call()
        times.append((time.perf_counter() - t) * 1000)
        steps += vm_steps(db) - before
    db.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return statistics.median(times[len(times) // 10:] or times), setup_s, steps / len(times)


def vm_steps(db):
    """The VM steps tinyq's statements ran so far on db (tq_statements): the work, beside the time."""
    return db.execute("SELECT total(vm_steps) FROM tq_statements").fetchone()[0]


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.path.exists(VENV_PY) and os.path.realpath(sys.executable) != os.path.realpath(VENV_PY):
            os.execv(VENV_PY, [VENV_PY] + sys.argv)  # peers.py's venv has it: for the plot
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ext", action="append", help="name=path of a tinyq build (default: this one)")
    ap.add_argument("--sizes", help="comma-separated job counts (default 1000,100000[,1000000])")
    ap.add_argument("--cases", help="comma-separated cases (default: all seven)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "scale.md"))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else \
        ([1_000, 100_000] if args.quick else [1_000, 100_000, 1_000_000])
    os.makedirs(WORK, exist_ok=True)
    builds = []
    for spec in args.ext or [f"this build={os.path.join(ROOT, 'dist', 'tinyq.so')}"]:
        name, path = spec.split("=", 1)
        private = os.path.join(WORK, f"scale-{len(builds)}", "tinyq.so")  # the entry point follows the name
        os.makedirs(os.path.dirname(private), exist_ok=True)
        shutil.copyfile(path, private)
        builds.append((name, private[:-3]))
    if args.cases:
        for case in [c for c in CASES if c not in args.cases.split(",")]:
            del CASES[case]
    results, work = {}, {}
    started = time.monotonic()
    for name, ext in builds:
        for case in CASES:
            for n in sizes:
                ms, setup_s, steps = measure(ext, case, n)
                results[(name, case, n)] = ms
                work[(name, case, n)] = steps
                print(f"{name:>12} {case:>12} {n:>9}: {ms:8.3f} ms/call, {steps:7.0f} VM steps/call"
                      f" (store built in {setup_s:.1f}s)", flush=True)
    report(builds, sizes, results, work, args.out, time.monotonic() - started)
    plot(builds, sizes, results, os.path.splitext(args.out)[0] + ".png")


def report(builds, sizes, results, work, out, took_s):
    lines = [f"# tinyq scale benchmark ({datetime.date.today()}, bench/scale.py)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, SQLite {sqlite3.sqlite_version}, "
             f"Python {platform.python_version()}; run took {took_s / 60:.1f} min.",
             "Median ms per call; in brackets, the ratio to the same case at 1,000 "
             f"(COST-01 asks for at most {TARGET}x).", ""]
    header = "| build | case | " + " | ".join(f"{n:,}" for n in sizes) + " |"
    lines += [header, "|" + "---|" * (2 + len(sizes))]
    for name, _ in builds:
        for case in CASES:
            base = results[(name, case, sizes[0])]
            cells = [f"{results[(name, case, n)]:.3f} ({results[(name, case, n)] / base:.2f}x)" for n in sizes]
            lines.append(f"| {name} | {case} | " + " | ".join(cells) + " |")
    lines += ["", "VM steps per call (tinyq's statements, tq_statements: the work, whatever the machine's load); "
              "in brackets, the ratio to the same case at 1,000.", "", header, "|" + "---|" * (2 + len(sizes))]
    for name, _ in builds:
        for case in CASES:
            base = work[(name, case, sizes[0])] or 1
            cells = [f"{work[(name, case, n)]:.0f} ({work[(name, case, n)] / base:.2f}x)" for n in sizes]
            lines.append(f"| {name} | {case} | " + " | ".join(cells) + " |")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def plot(builds, sizes, results, out):
    try:
        import matplotlib
    except ImportError:
        if os.path.exists(VENV_PY) and sys.executable != VENV_PY:
            print(f"(plot: matplotlib is in {VENV_PY}; run the benchmark with it for a plot)")
        else:
            print("(plot skipped: no matplotlib; bench/peers.py sets up bench/work/venv with it)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(builds), figsize=(6 * len(builds), 4.5), squeeze=False, sharey=True)
    for ax, (name, _) in zip(axes[0], builds):
        for case in CASES:
            ax.plot(sizes, [results[(name, case, n)] for n in sizes], marker="o", label=case)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"tinyq {name}: ms per call")
        ax.set_xlabel("jobs in the store")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
