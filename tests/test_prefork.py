"""Issue 28, prefork: workers forked from a parent that touched tinyq (gunicorn --preload,
Celery's prefork pool, multiprocessing's fork context) see and run every job, once; and a
connection carried across fork() is refused with a clear error, never used."""
import collections
import os
import subprocess
import sys
import time

import pytest

from helpers import EXT, ROOT, open_handles

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402

PY = "/usr/bin/python3"


def run_prefork(db_path, log, kind, workers=8, jobs=600):
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([PY, os.path.join(ROOT, "tests", "support", "prefork.py"), db_path, log, kind,
                          str(workers), str(jobs)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_workers_forked_from_a_parent_that_used_tinyq_run_every_job_once(tmp_path, kind):
    db_path, log = str(tmp_path / "app.db"), str(tmp_path / "ran.log")
    out = run_prefork(db_path, log, kind)
    assert "done 600 of 600" in out, out
    with open(log) as f:
        ran = collections.Counter(line.split()[0] for line in f)
    assert sorted(ran) == sorted(str(n) for n in range(600))
    assert set(ran.values()) == {1}


def test_a_queue_that_goes_out_of_scope_closes_its_connection(db_path):
    tinyq.Queue(db_path, "emails").settings(concurrency=4)
    tinyq.Queue(db_path, "emails").add({"to": "ada"})
    assert open_handles(db_path) == []


def test_an_async_queue_that_goes_out_of_scope_closes_its_connection(db_path):
    import asyncio

    async def use():
        await tinyq.AsyncQueue(db_path, "emails").settings(concurrency=4)
    asyncio.run(use())
    # its thread lets go of the last reference right after answering: wait for that
    deadline = time.monotonic() + 30
    while open_handles(db_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert open_handles(db_path) == []


def test_an_idle_queue_is_closed_before_fork_and_reopened_in_each_process(db_path):
    queue = tinyq.Queue(db_path, "emails")
    queue.add({"n": 1})
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:    # the child: its own connection, and the parent's job is visible
        try:
            os.close(read)
            queue.add({"n": 2})
            os.write(write, str(len(queue.watch())).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        assert f.read() == "2"
    assert queue.get(queue.add({"n": 3}))["state"] == "waiting"   # the parent reopens too
    queue.close()


def test_a_connection_open_in_a_transaction_at_fork_is_refused_in_the_child(db_path):
    queue = tinyq.Queue(db_path, "emails")
    queue.conn.execute("BEGIN")       # busy at the fork: it cannot be closed then
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            try:
                queue.add({"n": 1})
                os.write(write, b"used")
            except RuntimeError as exc:
                os.write(write, str(exc).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        message = f.read()
    assert "fork" in message and str(os.getpid()) in message, message
    queue.conn.execute("ROLLBACK")
    queue.close()
