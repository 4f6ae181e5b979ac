#!/usr/bin/python3
"""synchronous=FULL against NORMAL at the helper layer (issue 17): what a power-safe commit costs.

The Python helper (tinyq.Queue) adds N jobs one per call, then `work()` (4 threads) drains
them, on a file in bench/work/ (a real disk: fsync matters), once with each setting, in
alternation, REPEAT times. Prints jobs/s for each and the ratio FULL/NORMAL; writes
bench/results/durability.md.

    /usr/bin/python3 bench/durability.py [--quick]
"""
import os
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("TINYQ_EXT", os.path.join(ROOT, "dist", "tinyq"))
import tinyq  # noqa: E402
import tinyq as _t  # noqa: E402

QUICK = "--quick" in sys.argv
N = 300 if QUICK else 1500
REPEAT = 2 if QUICK else 4
WORK = os.path.join(ROOT, "bench", "work", "durability")


def with_sync(setting):
    """The helper's own connection setup, with `synchronous` set to `setting`."""
    original = _t._configure

    def configure(conn, busy_timeout):
        original(conn, busy_timeout)
        _t._rows(conn, "PRAGMA synchronous=%s" % setting)
    return configure


def one_run(setting, path):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    _t._configure = with_sync(setting)
    q = tinyq.Queue(path, "bench")
    assert _t._one(q.conn, "PRAGMA synchronous") == {"FULL": 2, "NORMAL": 1}[setting]
    t0 = time.perf_counter()
    for i in range(N):
        q.add({"i": i})
    t_add = time.perf_counter() - t0
    done = []

    def handler(payload, run):
        done.append(1)
        if len(done) >= N:
            q.stop()
    t1 = time.perf_counter()
    q.work(handler, concurrency=4, poll=0.05)
    t_work = time.perf_counter() - t1
    q.close()
    return N / t_add, N / t_work


def main():
    os.makedirs(WORK, exist_ok=True)
    original = _t._configure
    results = {"FULL": [], "NORMAL": []}
    try:
        for r in range(REPEAT):
            for setting in ("NORMAL", "FULL") if r % 2 == 0 else ("FULL", "NORMAL"):
                results[setting].append(one_run(setting, os.path.join(WORK, "store.db")))
    finally:
        _t._configure = original
    lines = ["# synchronous=FULL vs NORMAL through the Python helper",
             "", f"{N} jobs added one per call, then drained by `Queue.work(concurrency=4)`; "
             f"{REPEAT} alternating runs each, medians; file on {os.path.relpath(WORK, ROOT)}/.", "",
             "| setting | adds/s | jobs worked/s |", "|---|---|---|"]
    med = {}
    for setting, runs in results.items():
        med[setting] = (statistics.median(a for a, _ in runs), statistics.median(w for _, w in runs))
        lines.append(f"| {setting} | {med[setting][0]:.0f} | {med[setting][1]:.0f} |")
    lines += ["", f"FULL/NORMAL: adds {med['FULL'][0] / med['NORMAL'][0]:.2f}x, "
              f"work {med['FULL'][1] / med['NORMAL'][1]:.2f}x"]
    text = "\n".join(lines) + "\n"
    print(text)
    if not QUICK:
        os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
        with open(os.path.join(ROOT, "bench", "results", "durability.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
