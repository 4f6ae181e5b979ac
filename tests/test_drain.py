"""Queue.drain and AsyncQueue.drain: work() until no job of the queue is running or due
now, then a summary {"done", "failed", "retried"} of the attempts it ran."""
import asyncio
import os
import sys
import time

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402


def mixed_jobs(q):
    """A job that fails once, a chain blocked on a done job, a job that adds two more, a job
    without tries left: what every drain below must run to the end."""
    q.settings(backoff=0)                       # a retry is due at once
    q.add("flaky", id="flaky")
    q.add("first", id="first")
    q.add("second", id="second", after=["first"])
    q.add("parent", id="parent")
    q.add("doomed", id="doomed", attempts=1)


def outcome(payload, run):
    """What the handler does with each job of mixed_jobs (the same for threads and asyncio);
    the handler adds the children of "parent" itself."""
    if payload == "flaky" and run.attempt == 1:
        raise TimeoutError("upstream timeout")
    if payload == "doomed":
        raise ValueError("bad input")
    return payload.upper()


CHILDREN = dict(payloads=["child", "child"], ids=["child:1", "child:2"])


MIXED_SUMMARY = {"done": 6, "failed": 1, "retried": 1}   # flaky, first, second, parent, 2 children


def check_mixed(q):
    for job_id in ("flaky", "first", "second", "parent", "child:1", "child:2"):
        assert q.get(job_id)["state"] == "done", job_id
    assert q.get("flaky")["attempt"] == 2
    assert q.get("doomed")["state"] == "failed"


def test_drain_runs_retries_dependents_and_added_jobs(db_path):
    q = tinyq.Queue(db_path, "mail")
    mixed_jobs(q)
    def handler(payload, run):
        if payload == "parent":
            tinyq.Queue(run.conn, "mail").add_many(**CHILDREN)
        return outcome(payload, run)

    summary = q.drain(handler, concurrency=2)
    assert summary == MIXED_SUMMARY
    check_mixed(q)
    assert q.drain(lambda payload, run: None) == {"done": 0, "failed": 0, "retried": 0}


def test_drain_asyncio_runs_retries_dependents_and_added_jobs(db_path):
    q = tinyq.Queue(db_path, "mail")
    mixed_jobs(q)

    async def main():
        aq = tinyq.AsyncQueue(db_path, "mail")

        async def handler(payload, run):
            if payload == "parent":
                await aq.add_many(**CHILDREN)
            return outcome(payload, run)

        try:
            first = await aq.drain(handler, concurrency=3)
            again = await aq.drain(handler)
        finally:
            await aq.close()
        return first, again

    first, again = asyncio.run(main())
    assert first == MIXED_SUMMARY
    assert again == {"done": 0, "failed": 0, "retried": 0}
    check_mixed(q)


def test_drain_counts_run_fail_and_retries_out_of_tries(db_path):
    q = tinyq.Queue(db_path, "mail")
    q.settings(backoff=0)
    q.add("give up", id="gives-up")
    q.add("always", id="always", attempts=3)

    def handler(payload, run):
        if payload == "give up":
            run.fail("not worth it")
        raise RuntimeError("still broken")

    assert q.drain(handler) == {"done": 0, "failed": 2, "retried": 2}
    assert q.get("always")["attempt"] == 3


def test_drain_does_not_wait_for_a_job_scheduled_later(db_path):
    """A retry whose backoff ends later, with nothing else running, and a job added with a
    delay: drain returns well before either is due, and they stay scheduled."""
    q = tinyq.Queue(db_path, "mail")
    q.settings(backoff="1h")
    q.add("later", id="later", delay="1h")
    q.add("fails", id="fails")

    def handler(payload, run):
        raise RuntimeError("down")

    started = time.monotonic()
    assert q.drain(handler) == {"done": 0, "failed": 0, "retried": 1}
    assert time.monotonic() - started < 600      # not the hour of either
    assert q.get("later")["state"] == "scheduled"
    assert q.get("fails")["state"] == "scheduled"


def test_drain_with_a_pinned_clock_runs_a_job_scheduled_later(db_path):
    """The documented recipe for tests: add with the adding connection's clock pinned back
    by the delay, and the job is due for the drain's workers (whose clock is the system's)."""
    q = tinyq.Queue(db_path, "mail")
    now_ms = int(time.time() * 1000)
    q.conn.execute("SELECT tq_clock(?)", (now_ms - 2 * 3600 * 1000,))
    q.add("reminder", id="remind", delay="1h")
    q.conn.execute("SELECT tq_clock(NULL)")
    assert q.drain(lambda payload, run: "sent") == {"done": 1, "failed": 0, "retried": 0}
    assert q.get("remind")["result"] == "sent"


def test_drain_on_an_empty_queue_returns_at_once(db_path):
    q = tinyq.Queue(db_path, "never-used")
    assert q.drain(lambda payload, run: None) == {"done": 0, "failed": 0, "retried": 0}


def test_drain_refuses_a_queue_already_working(db_path):
    q = tinyq.Queue(db_path, "mail")
    assert q._working.acquire(blocking=False)
    try:
        with pytest.raises(RuntimeError, match="already working"):
            q.drain(lambda payload, run: None)
    finally:
        q._working.release()
