"""Issue 29, in the Python helpers: run.progress from code a handler started, once the job
is settled, is a clear False (not a cancellation); asyncio says when a renewal comes late
because a handler blocks the loop; stop(timeout=...) takes seconds and bounds a cancelled
asyncio work() too. (stop()'s grace in real processes: tests/helper_scenarios.json.)"""
import asyncio
import logging
import os
import sys
import threading
import time

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402


def settled_warning(caplog, job_id):
    return [r.getMessage() for r in caplog.records
            if "run.progress for job %s" % job_id in r.getMessage() and "settled" in r.getMessage()]


def test_threads_progress_after_the_job_settled_is_false_not_cancelled(db_path, caplog):
    q = tinyq.Queue(db_path, "q")
    job_id = q.add({})
    runs, go, answers = [], threading.Event(), []

    def later(run):
        go.wait()
        answers.append(run.progress({"late": True}))

    def handler(payload, run):
        runs.append(run)
        threading.Thread(target=later, args=(run,)).start()
        q.stop()
        return "ok"
    with caplog.at_level(logging.WARNING, logger="tinyq"):
        assert q.work(handler, poll=0.05) == 1
        go.set()
        while not answers:
            time.sleep(0.01)
    assert answers == [False] and runs[0].cancelled is False
    assert q.get(job_id)["state"] == "done" and q.get(job_id).get("progress") is None
    assert settled_warning(caplog, job_id)


def test_asyncio_progress_after_work_returned_is_false_not_an_error(db_path, caplog):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        job_id = await q.add({})
        runs, go = [], asyncio.Event()

        async def later(run):
            await go.wait()
            return await run.progress({"late": True})

        async def handler(payload, run):
            runs.append((run, asyncio.ensure_future(later(run))))
            q.stop()
            return "ok"
        assert await q.work(handler, poll=0.05) == 1
        go.set()
        run, task = runs[0]
        assert await task is False and run.cancelled is False
        job = await q.get(job_id)
        assert job["state"] == "done" and job.get("progress") is None
        return job_id
    with caplog.at_level(logging.WARNING, logger="tinyq"):
        job_id = asyncio.run(main())
    assert settled_warning(caplog, job_id)


def test_asyncio_warns_when_a_handler_blocking_the_loop_delays_a_renewal(db_path, caplog):
    """Lease 1 s: the renewal is due at half of it; the handler blocks the loop for 0.9 s, so
    the heartbeat runs at least 0.4 s late (the warning starts past a quarter lease)."""
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.settings(lease="1s")
        job_id = await q.add({})

        async def handler(payload, run):
            time.sleep(0.9)          # blocks the event loop, and with it the heartbeat
            await asyncio.sleep(0.05)  # the overdue heartbeat runs first, while the job still runs
            q.stop()
        await q.work(handler, poll=0.05)
        return job_id
    with caplog.at_level(logging.WARNING, logger="tinyq"):
        job_id = asyncio.run(main())
    late = [r.getMessage() for r in caplog.records if "renewal of job %s" % job_id in r.getMessage()]
    assert late and "late" in late[0] and "blocking the event loop" in late[0], caplog.text


def test_asyncio_a_fast_handler_gets_no_lateness_warning(db_path, caplog):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.settings(lease="1s")
        await q.add({})

        async def handler(payload, run):
            await asyncio.sleep(1.2)     # renewed on time, at least once
            q.stop()
        await q.work(handler, poll=0.05)
    with caplog.at_level(logging.WARNING, logger="tinyq"):
        asyncio.run(main())
    assert "blocking the event loop" not in caplog.text


def test_asyncio_cancelled_work_returns_after_the_grace(db_path, caplog):
    """Cancelling the task that awaits work() waits for the handlers as stop() does, and a
    stop(timeout=...) bounds that wait: the hung handler is abandoned, its job not settled."""
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        job_id = await q.add({})
        started = asyncio.Event()

        async def handler(payload, run):
            started.set()
            await asyncio.Event().wait()     # never returns (until cancelled)
        work = asyncio.ensure_future(q.work(handler, poll=0.05))
        await started.wait()
        work.cancel()
        q.stop(timeout=0.2)
        with pytest.raises(asyncio.CancelledError):
            await work
        assert (await q.get(job_id))["state"] == "running"
        return job_id
    with caplog.at_level(logging.WARNING, logger="tinyq"):
        job_id = asyncio.run(asyncio.wait_for(main(), 120))
    assert "stop(): job %s (attempt 1) still running when the grace ended" % job_id in caplog.text


@pytest.mark.parametrize("bad", [-1, "5s", True, float("nan"), float("inf")])
def test_stop_timeout_is_seconds_or_refused_by_name(db_path, bad):
    for q in (tinyq.Queue(db_path, "q"), tinyq.AsyncQueue(db_path, "q")):
        with pytest.raises(ValueError, match=r"^stop\(timeout\): timeout must be a number of seconds"):
            q.stop(timeout=bad)
