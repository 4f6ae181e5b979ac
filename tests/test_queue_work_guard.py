"""Issue 29 (Lows): one rule for the three helpers, a second work() on a Queue that is
already working is refused (AsyncQueue and Node already refused it); sys.exit() in a handler
ends work() instead of being recorded as the job's error."""
import asyncio
import os
import signal
import subprocess
import sys
import threading

import pytest

from helpers import ROOT, SIGNAL_TAKEN, read_until

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402


def test_a_second_work_on_a_working_queue_is_refused(db_path):
    q = tinyq.Queue(db_path, "q")
    q.add({"n": 1})
    running = threading.Event()

    def handler(payload, run):
        running.set()
        with pytest.raises(RuntimeError, match="already working"):
            q.work(lambda payload, run: None)
        q.stop()
    thread = threading.Thread(target=lambda: q.work(handler, poll=0.05), daemon=True)
    thread.start()
    thread.join(60)
    assert running.is_set() and not thread.is_alive()
    assert q.watch()[-1]["state"] == "done"
    q.close()


def test_sys_exit_in_a_handler_ends_work_and_is_no_job_error(db_path):
    q = tinyq.Queue(db_path, "q")
    job = q.add({"n": 1})
    raised = []

    def work():
        try:
            q.work(lambda payload, run: sys.exit(3), poll=0.05)
        except SystemExit as exc:
            raised.append(exc.code)
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(60)
    q.stop()
    assert raised == [3]
    got = q.get(job)
    assert got["state"] == "running" and not got.get("error"), got   # its lease runs out: again
    q.close()


def test_sys_exit_in_an_async_handler_ends_work_and_is_no_job_error(db_path):
    import asyncio

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        job = await q.add({"n": 1})

        async def handler(payload, run):
            sys.exit(3)
        with pytest.raises(SystemExit):
            await asyncio.wait_for(q.work(handler, poll=0.05), 30)
        return job
    job = None
    try:
        job = asyncio.run(main())
    except SystemExit:
        pass
    q = tinyq.Queue(db_path, "q")
    # An error settled would show as the job scheduled again, with the error as its detail.
    states = [(e["state"], e["detail"]) for e in q.watch()]
    assert [s for s, _ in states] == ["waiting", "running"], states
    q.close()


def test_a_stop_before_work_is_not_lost_in_both_helpers(db_path):
    """One rule with Node's: a stop() asked before work() makes that work() claim nothing and
    return 0 (a stop from another thread that came first is not lost); the next one works."""
    import asyncio
    q = tinyq.Queue(db_path, "q")
    first, second = q.add({"n": 1}), q.add({"n": 2})
    q.stop()
    assert q.work(lambda payload, run: None, poll=0.05) == 0
    assert q.get(first)["state"] == "waiting"

    def handler(payload, run):
        q.stop()
    assert q.work(handler, poll=0.05) == 1 and q.get(first)["state"] == "done"

    async def main():
        aq = tinyq.AsyncQueue(db_path, "q")
        aq.stop()
        handled = [await asyncio.wait_for(aq.work(nothing, poll=0.05), 30)]

        async def stopping(payload, run):
            aq.stop()
        handled.append(await asyncio.wait_for(aq.work(stopping, poll=0.05), 30))
        await aq.close()
        return handled

    async def nothing(payload, run):
        return None
    assert asyncio.run(main()) == [0, 1]
    assert q.get(second)["state"] == "done"
    q.close()


def test_a_cancelled_async_handler_is_no_job_error_and_its_job_runs_again(db_path):
    """A CancelledError out of a handler is not the job's error (it was not counted as a
    failure and retried as one): the job is left to its lease, then runs again."""
    import asyncio

    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        await q.settings(lease="1s")
        job = await q.add({"n": 1})

        async def handler(payload, run):
            if run.attempt == 1:
                raise asyncio.CancelledError()
            q.stop()
            return "second"
        assert await asyncio.wait_for(q.work(handler, poll=0.05), 60) == 2
        got = await q.get(job)
        await q.close()
        return got
    got = asyncio.run(main())
    assert (got["state"], got["attempt"], got["result"]) == ("done", 2, "second")
    q = tinyq.Queue(db_path, "q")
    # An error settled would show as the job scheduled again, with "CancelledError" as its detail.
    assert [e["state"] for e in q.watch()] == ["waiting", "running", "waiting", "running", "done"], q.watch()
    q.close()


HUNG_DRAIN = r"""
import asyncio, logging, signal, sys, threading, time
import tinyq
logging.basicConfig(level=logging.INFO)         # tinyq says on stderr when a signal came
# As in a terminal: a shell's background jobs (and so, maybe, this test) start with SIGINT
# ignored, which Python then keeps.
signal.signal(signal.SIGINT, signal.default_int_handler)
db, kind = sys.argv[1], sys.argv[2]
if kind == "threads":
    q = tinyq.Queue(db, "q")
    q.add({"n": 1})
    def handler(payload, run):
        print("started", flush=True)
        threading.Event().wait()                 # hangs: the drain never ends by itself
    q.work(handler, poll=0.05)
else:
    async def main():
        q = tinyq.AsyncQueue(db, "q")
        await q.add({"n": 1})
        async def handler(payload, run):
            print("started", flush=True)
            await asyncio.Event().wait()
        await q.work(handler, poll=0.05)
    asyncio.run(main())
print("work returned", flush=True)
"""


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_ends_a_drain_that_hangs(db_path, kind, sig):
    """The first signal asks work() to finish the job in flight; its handler never returns,
    so the second signal acts as it would without tinyq: SIGINT raises KeyboardInterrupt,
    SIGTERM ends the process (the job runs again once its lease has run out)."""
    env = dict(os.environ, TINYQ_EXT=os.path.join(ROOT, "dist", "tinyq"),
               PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.Popen([sys.executable, "-c", HUNG_DRAIN, db_path, kind], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline() == "started\n"
        proc.send_signal(sig)
        read_until(proc.stderr, SIGNAL_TAKEN)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "work returned" not in out
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in err and proc.returncode != 0, (proc.returncode, err)
    else:
        assert proc.returncode == -signal.SIGTERM, (proc.returncode, err)


@pytest.mark.parametrize("queues, error", [
    ({}, "queues must be a non-empty dict"),
    (["emails"], "queues must be a non-empty dict"),
    ({"emails": (print, {"concurency": 2})}, "queue 'emails': unknown option 'concurency'"),
    ({"emails": (print, {"concurrency": 0})}, "concurrency must be at least 1"),
    ({"emails": "send"}, "queue 'emails': expected a handler or (handler, options dict)"),
])
def test_a_worker_refuses_bad_queues_naming_them(db_path, queues, error):
    """tinyq.Worker / AsyncWorker: a bad map of queues is an error before anything runs."""
    async def handler(payload, run):
        return None
    async_queues = ({k: (handler, v[1]) if isinstance(v, tuple) else v for k, v in queues.items()}
                    if isinstance(queues, dict) else queues)
    for make in (lambda: tinyq.Worker(db_path, queues).work(),
                 lambda: asyncio.run(tinyq.AsyncWorker(db_path, async_queues).work())):
        with pytest.raises((ValueError, TypeError), match=error.replace("(", r"\(").replace(")", r"\)")):
            make()


def test_a_second_work_on_a_working_worker_is_refused(db_path):
    worker = None

    def handler(payload, run):
        with pytest.raises(RuntimeError, match="already working"):
            worker.work()
        worker.stop()
    worker = tinyq.Worker(db_path, {"a": handler, "b": handler})
    tinyq.Queue(db_path, "b").add({"n": 1})
    assert worker.work() == {"a": 0, "b": 1}
