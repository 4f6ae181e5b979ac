"""Two worker processes on one store share a queue whose concurrency limit is full (issue
46): a process that settles a job gives the freed place to whoever claims first, instead
of claiming it again in the same commit. Real processes of each helper (Python's threads
and asyncio, Node's); the split is counted once every job has finished (conditions, not
timing)."""
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from helpers import EXT, ROOT

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402

PY = "/usr/bin/python3"
SUPPORT = os.path.join(ROOT, "tests", "support")
GIVE_UP_S = 180          # only a failing run waits this long
JOBS, JOB_MS, LIMIT = 60, 50, 2


def start(helper, db_path, concurrency):
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python"))
    if helper == "node":
        argv = ["node", os.path.join(SUPPORT, "share_worker.js"), db_path, str(concurrency)]
    else:
        argv = [PY, os.path.join(SUPPORT, "share_worker.py"), helper, db_path, str(concurrency)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "working", proc.stderr.read()
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=GIVE_UP_S)
    assert "returned" in out, (out, err)


def split(helper, db_path, concurrency):
    """Runs per process: JOBS jobs of JOB_MS ms on a queue limited to LIMIT at once, worked
    by two processes of `helper`, each with `concurrency` places."""
    queue = tinyq.Queue(db_path, "q")
    try:
        queue.settings(concurrency=LIMIT)
        procs = [start(helper, db_path, concurrency) for _ in range(2)]
        try:
            time.sleep(0.5)                      # both asleep in their waiters (not required)
            ids = queue.add_many([{"ms": JOB_MS}] * JOBS, ids=["j%d" % n for n in range(JOBS)])
            deadline = time.monotonic() + GIVE_UP_S
            while queue.conn.execute("SELECT done FROM tq_stats('q')").fetchone()[0] < JOBS:
                assert time.monotonic() < deadline, "timed out waiting for the jobs"
                assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
                time.sleep(0.05)
        finally:
            for proc in procs:
                stop(proc)
        by = Counter(queue.get(i)["result"] for i in ids)
        return [by[proc.pid] for proc in procs]
    finally:
        queue.close()


@pytest.mark.parametrize("helper", ("threads", "asyncio", "node"))
@pytest.mark.parametrize("concurrency", (2, 4))
def test_two_processes_share_a_full_concurrency_limit(db_path, helper, concurrency):
    counts = split(helper, db_path, concurrency)
    print("%s, concurrency %d per process, limit %d: runs per process %s" % (helper, concurrency, LIMIT, counts))
    assert sum(counts) == JOBS
    assert min(counts) >= JOBS // 5, counts          # each at least 20%
