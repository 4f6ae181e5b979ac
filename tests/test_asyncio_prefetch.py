"""AsyncQueue.work's prefetch (issue 25): jobs claimed ahead of the running handlers hold
leases, so they are renewed while they wait, and a stop puts them back in line without
using up a try; a place that frees starts the next one; every job runs once, in order."""
import asyncio
import os
import sys

import pytest

from helpers import ROOT, connect, get, one, setq

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402


async def until(check):
    while not check():
        await asyncio.sleep(0.01)


def test_jobs_claimed_ahead_are_renewed_while_they_wait_and_go_back_on_stop(db_path):
    conn = connect(db_path)
    setq(conn, "q", lease="1s")
    ids = ["j%d" % i for i in range(5)]

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        for i in ids:
            await q.add({}, id=i)
        started, gate = [], asyncio.Event()

        async def handler(payload, run):
            started.append(run.id)
            await gate.wait()
        working = asyncio.ensure_future(q.work(handler, prefetch=2, poll=0.05))
        await until(lambda: started)
        await until(lambda: all(get(conn, i)["state"] == "running" for i in ids[1:3]))
        leased = {i: get(conn, i)["lease_until"] for i in ids[1:3]}
        # the two claimed ahead are renewed while they wait (a wait for it, not for a time)
        await until(lambda: all(get(conn, i)["lease_until"] > leased[i] for i in ids[1:3]))
        states = [get(conn, i)["state"] for i in ids]
        q.stop()
        gate.set()
        handled = await working
        await q.close()
        return started, states, handled
    started, states, handled = asyncio.run(asyncio.wait_for(main(), 60))
    assert started == ["j0"] and handled == 1
    assert states == ["running", "running", "running", "waiting", "waiting"]
    assert [get(conn, i)["state"] for i in ids] == ["done", "waiting", "waiting", "waiting", "waiting"]
    assert [(get(conn, i)["attempt"], get(conn, i)["tries"]) for i in ids] == [
        (1, 1), (1, 0), (1, 0), (0, 0), (0, 0)]


@pytest.mark.parametrize("prefetch", ["auto", 0, 3])
def test_every_job_runs_once_in_claim_order_within_the_places_and_prefetch(db_path, prefetch):
    conn = connect(db_path)
    n, concurrency = 40, 4

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        ids = await q.add_many([{"i": i} for i in range(n)], ids=["j%02d" % i for i in range(n)])
        started, most = [], [0]

        async def handler(payload, run):
            started.append(run.id)
            most[0] = max(most[0], one(conn, "SELECT leases FROM tq_stats('q')"))
            await asyncio.sleep(0.005)
            if len(started) == n:
                q.stop()
        await q.work(handler, concurrency=concurrency, prefetch=prefetch, poll=0.05)
        await q.close()
        return ids, started, most[0]
    ids, started, most = asyncio.run(asyncio.wait_for(main(), 60))
    assert started == ids
    assert all(get(conn, i)["state"] == "done" and get(conn, i)["attempt"] == 1 for i in ids)
    # "auto" claims ahead at most as many as there are places
    bound = {"auto": 2 * concurrency, 0: concurrency, 3: concurrency + 3}[prefetch]
    assert most <= bound, "%d leased at once with prefetch %r" % (most, prefetch)


def test_a_job_cancelled_while_claimed_ahead_never_starts(db_path):
    conn = connect(db_path)
    setq(conn, "q", lease="1s")

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.add({}, id="first")
        await q.add({}, id="second")
        await q.add({}, id="third")
        started, gate = [], asyncio.Event()

        async def handler(payload, run):
            started.append(run.id)
            if run.id == "first":
                await gate.wait()
            elif run.id == "third":
                q.stop()
        working = asyncio.ensure_future(q.work(handler, prefetch=2, poll=0.05))
        await until(lambda: get(conn, "third")["state"] == "running")
        assert await q.cancel("second")
        # the next renewal (one statement for both jobs claimed ahead) tells the worker; wait
        # until the worker has heard it, not only until the store shows the renewal (its
        # answer may reach the loop after the gate opens)
        work = q._work.works[0]
        await until(lambda: all(run.cancelled for run in work.ahead if run.id == "second"))
        gate.set()
        await working
        await q.close()
        return started
    started = asyncio.run(asyncio.wait_for(main(), 60))
    assert started == ["first", "third"]
    assert get(conn, "second") is None     # a cancelled job is gone (CAN-01)
    assert [get(conn, i)["state"] for i in ("first", "third")] == ["done", "done"]


def test_a_bad_prefetch_is_an_error_naming_it_and_its_value(db_path):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")

        async def handler(payload, run):
            pass
        for bad in (-1, 1.5, "AUTO", True):
            with pytest.raises(ValueError, match="prefetch must be 'auto' or a whole number >= 0, not %r" % (bad,)):
                await q.work(handler, prefetch=bad)
        await q.close()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_handlers_that_started_together_get_their_next_jobs_claimed_while_they_run(db_path):
    """'auto' predicts the ends of handlers that average under a second: a second wave of
    handlers that started together, held open here, gets the jobs of the third claimed
    ahead while it still runs (with prefetch 0 none would be: the wait below would fail)."""
    conn = connect(db_path)
    concurrency = 4
    ids = ["j%02d" % i for i in range(3 * concurrency)]

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.add_many([{"i": i} for i in range(len(ids))], ids=ids)
        gate, started = asyncio.Event(), []

        async def handler(payload, run):
            started.append(run.id)
            if payload["i"] < concurrency:
                await asyncio.sleep(0.2)        # the first wave: the average handler's time
            elif payload["i"] < 2 * concurrency:
                await gate.wait()               # the second: held until the third is claimed
        working = asyncio.ensure_future(q.work(handler, concurrency=concurrency, poll=0.05))
        second, third = ids[concurrency:2 * concurrency], ids[2 * concurrency:]
        try:
            await until(lambda: set(second) <= set(started))
            # the third wave claimed (running, leased), not started: waited for, however long
            await until(lambda: all(get(conn, i)["state"] == "running" for i in third))
            waiting = [i for i in third if i in started]
        finally:   # a timeout above must not leave handlers that the stop waits for forever
            gate.set()
        await until(lambda: all(get(conn, i)["state"] == "done" for i in ids))
        q.stop()
        await working
        await q.close()
        return started, waiting
    started, waiting = asyncio.run(asyncio.wait_for(main(), 60))
    assert waiting == []
    assert started == ids


def test_a_backlog_of_fast_jobs_is_settled_while_it_drains_not_at_its_end(db_path):
    """Handlers that end as fast as their jobs are claimed, 200 at once, over a backlog:
    their places free as soon as they are taken, so there are always jobs to claim. The
    settles still go with every other claim at least: halfway through the backlog the jobs
    that ended show done, but for a few commits' worth, and every job runs once (an ended
    job's lease is renewed no more: a settle that waited for the backlog's end would let it
    run out, and the job would run again)."""
    conn = connect(db_path)
    n, concurrency = 6000, 200

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.add_many([{"i": i} for i in range(n)])
        handled, midway = [0], []

        async def handler(payload, run):
            handled[0] += 1
            if handled[0] == n // 2:
                midway.append(one(conn, "SELECT done FROM tq_stats('q')"))
            if handled[0] == n:
                q.stop()
        await q.work(handler, concurrency=concurrency, poll=0.05)
        await q.close()
        return midway[0]
    done_midway = asyncio.run(asyncio.wait_for(main(), 120))
    assert done_midway >= n // 2 - 4 * concurrency, "%d of %d ended jobs settled" % (done_midway, n // 2)
    assert one(conn, "SELECT done FROM tq_stats('q')") == n
    assert one(conn, "SELECT count(*) FROM tq_watch(0) WHERE state = 'running' AND attempt > 1") == 0
