"""AsyncQueue.work's own rules (issue 29): a plain def handler is refused up front, a task
running work() that is cancelled twice still finishes and settles its jobs, and the app's
own loop signal handlers are kept and put back."""
import asyncio
import os
import subprocess
import sys

import pytest

from helpers import EXT, ROOT

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


APP_SIGNALS = r"""
import asyncio, os, signal, sys
import tinyq

async def main(db):
    loop = asyncio.get_running_loop()
    seen = []
    loop.add_signal_handler(signal.SIGTERM, seen.append, "app")   # as aiohttp's run_app does
    q = tinyq.AsyncQueue(db, "q")
    await q.add({"n": 1})

    async def handler(payload, run):
        os.kill(os.getpid(), signal.SIGTERM)
    handled = await q.work(handler)
    os.kill(os.getpid(), signal.SIGTERM)       # after work(): the app's handler, not death
    for _ in range(500):
        if len(seen) == 2:
            break
        await asyncio.sleep(0.01)
    print(handled, seen, (await q.watch())[-1]["state"])
    await q.close()

asyncio.run(main(sys.argv[1]))
"""


def test_work_keeps_the_apps_own_loop_signal_handler_and_puts_it_back(db_path):
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run(["/usr/bin/python3", "-c", APP_SIGNALS, db_path], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.stdout.split("\n")[0] == "1 ['app', 'app'] done", (out.returncode, out.stdout, out.stderr)
