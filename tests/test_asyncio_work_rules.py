"""AsyncQueue.work's own rules (issue 29): a plain def handler is refused up front, and a
task running work() that is cancelled twice still finishes and settles its jobs."""
import asyncio
import os
import sys

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402


def test_a_plain_def_handler_is_refused_before_anything_runs(db_path):
    ran = []

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.add({"n": 1})
        with pytest.raises(TypeError, match="async handler"):
            await q.work(lambda payload, run: ran.append(payload))
        job = (await q.watch())[-1]
        await q.close()
        return job
    assert asyncio.run(asyncio.wait_for(main(), 60))["state"] == "waiting"
    assert ran == []


def test_a_task_cancelled_twice_still_settles_its_jobs_and_frees_the_queue(db_path):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        job = await q.add({"n": 1})
        started, release = asyncio.Event(), asyncio.Event()

        async def handler(payload, run):
            started.set()
            await release.wait()
            return "ok"
        task = asyncio.ensure_future(q.work(handler))
        await started.wait()
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()            # a wait_for timeout, then a shutdown
        await asyncio.sleep(0)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        state = (await q.get(job))["state"]

        async def quick(payload, run):
            q.stop()
        await q.add({"n": 2})
        again = await q.work(quick)     # not "already working"
        await q.close()
        return state, again
    assert asyncio.run(asyncio.wait_for(main(), 60)) == ("done", 1)
