"""tinyq.AsyncQueue: coroutine methods, `await q.work(async_handler)`, and what it promises
(never blocking the event loop, context per job, shutdown with jobs in flight in a real
process)."""
import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from helpers import EXT, ROOT, SIGNAL_TAKEN, open_handles, read_until

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402

PY = "/usr/bin/python3"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def until(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out waiting for %s" % predicate)


async def states(q, ids):
    return [(await q.get(i) or {}).get("state") for i in ids]


def test_methods_are_coroutines_over_the_queue(db_path):
    async def main():
        async with tinyq.AsyncQueue(db_path, "q") as q:
            assert (await q.settings(attempts=1))["attempts"] == 1
            assert await q.add({"n": 1}, id="a", meta={"correlation_id": "c1"}) == "a"
            assert await q.add({"n": 2}, id="a") == "a"                  # dedupe
            job = await q.get("a")
            assert job["payload"] == {"n": 1} and job["meta"] == {"correlation_id": "c1"}
            assert await q.cancel("a") is True and await q.cancel("a") is False
            assert await q.get("a") is None
            assert [e["state"] for e in await q.watch()] == ["waiting", "cancelled"]
            assert await q.retry("nope") is False
    run(main())


@pytest.mark.parametrize("stop_after", [0.0, 0.05])
def test_once_work_returned_nothing_of_the_worker_holds_the_file(db_path, stop_after):
    async def main():
        async with tinyq.AsyncQueue(db_path, "q") as q:
            await q.add({})

            async def handler(payload, run):
                pass
            # An idle poll of an hour: work() returns after stop() without waiting it out
            # (else run()'s deadline fails the test).
            working = asyncio.ensure_future(q.work(handler, poll=3600.0))
            await asyncio.sleep(stop_after)
            q.stop()
            await working
    run(main())
    assert open_handles(db_path) == []


def test_work_settles_every_outcome_and_keeps_steps(db_path):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        for name in ("done", "awaitable-step", "error", "class", "retry", "snooze", "fail"):
            await q.add(name, id=name, attempts=1)
        calls = []

        async def slow_answer():
            await asyncio.sleep(0.01)
            return {"text": "hi"}

        async def handler(payload, run):
            assert isinstance(run, tinyq.AsyncRun)
            if payload == "done":
                assert await run.progress({"pct": 50}) is True
                return {"sync": await run.step("s", lambda: calls.append(1) or 41)}
            if payload == "awaitable-step":
                return await run.step("answer", slow_answer)
            if payload in ("error", "class"):
                raise KeyError("secret-%s" % payload)
            getattr(run, payload)("1h" if payload != "fail" else "no such customer")

        worker = asyncio.ensure_future(q.work(handler, concurrency=4, poll=0.2))
        await until(lambda: _none_left(q))
        q.stop()
        assert await worker == 7
        jobs = {i: await q.get(i) for i in ("done", "awaitable-step", "error", "retry", "snooze", "fail")}
        assert jobs["done"]["result"] == {"sync": 41} and jobs["done"]["progress"] == {"pct": 50}
        assert jobs["awaitable-step"]["result"] == {"text": "hi"}
        assert jobs["error"]["state"] == "failed" and jobs["error"]["error"] == "KeyError: 'secret-error'"
        assert jobs["retry"]["state"] == "failed"                    # retry counts: budget 1
        assert jobs["snooze"]["state"] == "scheduled"                # snooze does not
        assert jobs["fail"]["error"] == "no such customer"
        await q.close()
    run(main())


async def _none_left(q):
    return all(s in ("done", "failed", "scheduled")
               for s in await states(q, ("done", "awaitable-step", "error", "class", "retry", "snooze", "fail")))


def test_errors_class_and_log_context_per_task(db_path, caplog):
    caplog.handler.addFilter(tinyq.JobContextFilter())
    logger = logging.getLogger("test_aio_ctx")

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        for i in range(4):
            await q.add({"i": i}, id="j%d" % i, attempts=1, meta={"correlation_id": "req-%d" % i})
        await q.add({"i": 9}, id="secret", attempts=1)

        async def handler(payload, run):
            await asyncio.sleep(0.05 * (4 - payload["i"] % 5))   # interleave the tasks
            logger.warning("job %s", payload["i"])
            assert tinyq.current_run.get() is run and run.meta.get("correlation_id") == run.correlation_id
            if payload["i"] == 9:
                raise RuntimeError("token abc in the provider's message")

        worker = asyncio.ensure_future(q.work(handler, concurrency=5, poll=0.2, errors="class"))
        await until(lambda: _all(q, ["j0", "j1", "j2", "j3", "secret"], ("done", "failed")))
        q.stop()
        await worker
        assert (await q.get("secret"))["error"] == "RuntimeError"
        await q.close()

    with caplog.at_level(logging.WARNING, logger="test_aio_ctx"):
        run(main())
    tagged = {(r.getMessage(), r.job_id, r.correlation_id) for r in caplog.records if r.name == "test_aio_ctx"}
    assert tagged == {("job %d" % i, "j%d" % i, "req-%d" % i) for i in range(4)} | {("job 9", "secret", None)}


async def _all(q, ids, wanted):
    return all(s in wanted for s in await states(q, ids))


def test_work_never_blocks_the_event_loop(db_path, monkeypatch):
    """An idle worker sleeps in tq_wait (a poll of an hour) on a thread of its own, and claims
    and settles off the loop: the loop keeps beating while the worker is idle (blocked in
    tq_wait it could not, for an hour), and no statement of the worker or the queue runs on
    the loop's thread (each connection's trace callback notes the thread of every statement).
    And an add wakes the idle worker: else nothing would be done for an hour."""
    ran = []                                # (thread ident, statement) of every statement
    connect = tinyq._aio.open_conn

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(lambda sql: ran.append((threading.get_ident(), sql)))
        return conn
    monkeypatch.setattr(tinyq._aio, "open_conn", traced)
    beats = [0]

    async def loop_ticker():
        while True:
            beats[0] += 1
            await asyncio.sleep(0.01)

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")

        async def handler(payload, run):
            await asyncio.sleep(0.01)

        tick = asyncio.ensure_future(loop_ticker())
        worker = asyncio.ensure_future(q.work(handler, concurrency=50, poll=3600.0))

        async def asleep_in_tq_wait():
            return any("tq_wait" in sql for _, sql in ran)
        await until(asleep_in_tq_wait)
        idle_from = beats[0]

        async def idle_a_while():           # 100 beats of the loop while the worker is idle
            return beats[0] >= idle_from + 100
        await until(idle_a_while)
        ids = [await q.add({"i": i}) for i in range(200)]
        await until(lambda: _all(q, ids, ("done",)))
        q.stop()
        await worker
        tick.cancel()
        await q.close()
        return threading.get_ident()

    loop_thread = run(main())
    assert any("tq_claim" in sql for _, sql in ran) and any("tq_settle" in sql for _, sql in ran)
    on_loop = [sql for ident, sql in ran if ident == loop_thread]
    assert not on_loop, "statements run on the event loop's thread: %r" % on_loop[:5]


def test_JOB_06_a_first_attempt_keeps_its_steps_without_reading_them_first(db_path, monkeypatch):
    """As the threads' (test_python_helper.py): attempt 1 keeps its step without a read
    (tq_step_get) and answers a name it kept from what it kept; attempt 2 reads it once."""
    ran = []                                # every statement of the worker's connections
    connect = tinyq._aio.open_conn

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(ran.append)
        return conn
    monkeypatch.setattr(tinyq._aio, "open_conn", traced)
    answers = {}

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.add({}, id="a")

        async def handler(payload, run):
            async def model():
                return "from attempt %d" % run.attempt
            first = await run.step("answer", model)
            answers[run.attempt] = (first, await run.step("answer", lambda: "called again"))
            if run.attempt == 1:
                run.snooze(0)
            return first

        worker = asyncio.ensure_future(q.work(handler, poll=0.2))
        await until(lambda: _all(q, ["a"], ("done",)))
        q.stop()
        await worker
        job = await q.get("a")
        await q.close()
        return job

    job = run(main())
    assert answers == {1: ("from attempt 1", "from attempt 1"), 2: ("from attempt 1", "from attempt 1")}
    assert job["result"] == "from attempt 1"
    assert sum("tq_step_get" in sql for sql in ran) == 1, [sql for sql in ran if "tq_step" in sql]
    assert sum("tq_step_put" in sql for sql in ran) == 1, [sql for sql in ran if "tq_step" in sql]


def test_cancel_reaches_the_run_and_nothing_is_settled(db_path):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.settings(lease="1s")
        await q.add({}, id="c")
        seen = []

        async def handler(payload, run):
            deadline = time.monotonic() + 60
            while not run.cancelled and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            seen.append(run.cancelled)
            return "must not be recorded"

        worker = asyncio.ensure_future(q.work(handler, poll=0.2))
        await until(lambda: _all(q, ["c"], ("running",)))
        assert await q.cancel("c") is True
        await until(lambda: _true(seen))
        q.stop()
        await worker
        assert seen == [True]
        assert "done" not in [e["state"] for e in await q.watch()]
        await q.close()
    run(main())


async def _true(seen):
    return bool(seen)


def test_renewals_keep_long_handlers_leases(db_path):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.settings(lease="5s")            # renewed at half of it: 2.5 s to spare
        ids = [await q.add({}) for _ in range(3)]

        async def handler(payload, run):
            first_lease_ends = run.lease_until
            while time.time() * 1000 < first_lease_ends + 500:     # outlive the first lease
                await asyncio.sleep(0.05)
            return "still mine"

        worker = asyncio.ensure_future(q.work(handler, concurrency=3, poll=0.2))
        await until(lambda: _all(q, ids, ("done",)))
        q.stop()
        await worker
        assert [(await q.get(i))["attempt"] for i in ids] == [1, 1, 1]
        await q.close()
    run(main())


def test_sigterm_with_jobs_in_flight_settles_them_all_and_claims_nothing_more(db_path):
    """A real process: 20 jobs, concurrency 5, SIGTERM once 5 are running. The 5 finish and
    settle before the process exits 0; the other 15 were never claimed."""
    async def fill():
        async with tinyq.AsyncQueue(db_path, "q") as q:
            return [await q.add({"i": i}, id="j%02d" % i, priority=100 - i) for i in range(20)]
    ids = run(fill())
    code = textwrap.dedent("""
        import asyncio, logging, os, sys, tinyq
        logging.basicConfig(level=logging.INFO)     # tinyq says on stderr when a signal came
        async def main():
            q = tinyq.AsyncQueue(sys.argv[1], "q")
            async def handler(payload, run):
                await run.progress("started")
                while not os.path.exists(sys.argv[1] + ".signalled"):   # in flight until then
                    await asyncio.sleep(0.01)
                return "finished"
            print("handled", await q.work(handler, concurrency=5, poll=0.2), flush=True)
            await q.close()
        asyncio.run(main())
    """)
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.Popen([PY, "-c", code, db_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        async def started():
            async with tinyq.AsyncQueue(db_path, "q") as q:
                await until(lambda: _progress(q, ids[:5]))
        run(started())
        proc.send_signal(signal.SIGTERM)
        # The jobs end only once the worker took the signal in: a loaded machine may run the
        # loop on before the loop reads a signal, and the jobs would end as if none came.
        seen = read_until(proc.stderr, SIGNAL_TAKEN)
        open(db_path + ".signalled", "w").close()
        out, err = proc.communicate(timeout=60)
        err = "".join(seen) + err
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "handled 5" in out

    async def check():
        async with tinyq.AsyncQueue(db_path, "q") as q:
            return [await q.get(i) for i in ids]
    jobs = run(check())
    assert [(j["state"], j["result"]) for j in jobs[:5]] == [("done", "finished")] * 5
    assert [(j["state"], j["attempt"]) for j in jobs[5:]] == [("waiting", 0)] * 15


async def _progress(q, ids):
    return all([(await q.get(i))["progress"] == "started" for i in ids])


def test_bad_arguments_are_refused(db_path):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        with pytest.raises(ValueError, match="concurrency"):
            await q.work(None, concurrency=0)
        with pytest.raises(ValueError, match="errors"):
            await q.work(None, errors="all")
        await q.close()
    run(main())
