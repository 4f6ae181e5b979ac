"""The names of a handler's waits and steps, in the Python helpers (threads Run, asyncio
AsyncRun), run in this process: a sleep or signal wait's name is once per job (its state
is kept in steps named after it), and a step whose answer cannot be kept fails the job
rather than run its function again. Node's twins are in node/test/."""
import asyncio
import datetime
import os
import sys
import threading
import time

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402

HELPERS = ("threads", "asyncio")
GIVE_UP_S = 120          # only a failing run waits this long
FINISHED = ("done", "failed")


def wait_until(predicate, what):
    deadline = time.monotonic() + GIVE_UP_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.02)


def work_until_finished(helper, queue, ids, handlers):
    """Work `queue` with handlers[helper] until every job of `ids` has finished (done or
    failed), then stop. Threads: Queue.work in a thread; asyncio: AsyncQueue.work."""
    def all_finished():
        return all((queue.get(i) or {}).get("state") in FINISHED for i in ids)
    if helper == "threads":
        worker = threading.Thread(target=queue.work, args=(handlers["threads"],), kwargs=dict(poll=0.05))
        worker.start()
        try:
            wait_until(all_finished, "the jobs to finish")
        finally:
            queue.stop()
            worker.join(GIVE_UP_S)
        return

    async def main():
        async with tinyq.AsyncQueue(queue.path, queue.name) as aq:
            working = asyncio.ensure_future(aq.work(handlers["asyncio"], poll=0.05))
            try:
                while not all_finished():     # a short read of the store, in the loop: fine here
                    await asyncio.sleep(0.02)
            finally:
                aq.stop()
                await working
    asyncio.run(asyncio.wait_for(main(), GIVE_UP_S))


@pytest.fixture
def queue(db_path):
    q = tinyq.Queue(db_path, "q")
    yield q
    q.close()


# -- a sleep or signal wait's name is once per job -------------------------------------------

@pytest.mark.parametrize("helper", HELPERS)
def test_a_second_sleep_or_signal_wait_of_one_name_raises_a_replay_does_not(queue, helper):
    """Before, the second sleep('poll') returned at once (the first one's wake time was
    kept: a polling loop spun), and a wait_signal('go') after one that timed out returned
    None at once (missing a later signal). Now the second use of a name in one run of the
    handler raises; the replays of `named` make the same calls again and are not refused."""
    for name in ("spins", "times-out", "named"):
        queue.add(name, id=name, attempts=1)
    runs = {"named": 0}

    def threads(payload, run):
        if payload == "spins":
            for _ in range(3):
                run.sleep("poll", 5)
            return "spun"
        if payload == "times-out":
            run.wait_signal("go", 5)
            return run.wait_signal("go")
        runs["named"] += 1
        for n in range(3):
            run.sleep("poll-%d" % n, 5)
        run.sleep("go-1", 5)                    # a sleep and a signal wait may share a name
        return [run.wait_signal("go-1", 5), run.wait_signal("go-2", 5)]

    async def asyncio_(payload, run):
        if payload == "spins":
            for _ in range(3):
                await run.sleep("poll", 5)
            return "spun"
        if payload == "times-out":
            await run.wait_signal("go", 5)
            return await run.wait_signal("go")
        runs["named"] += 1
        for n in range(3):
            await run.sleep("poll-%d" % n, 5)
        await run.sleep("go-1", 5)
        return [await run.wait_signal("go-1", 5), await run.wait_signal("go-2", 5)]

    work_until_finished(helper, queue, ["spins", "times-out", "named"], {"threads": threads, "asyncio": asyncio_})
    spins, times_out, named = (queue.get(i) for i in ("spins", "times-out", "named"))
    assert spins["state"] == "failed", spins
    assert spins["error"] == ("ValueError: run.sleep: the name 'poll' was used already by this job: "
                              "each sleep and signal wait needs a name of its own (e.g. f'poll-{n}')")
    assert times_out["state"] == "failed", times_out
    assert times_out["error"].startswith("ValueError: run.wait_signal: the name 'go' was used already by this job")
    assert (named["state"], named["result"]) == ("done", [None, None]), named
    assert runs["named"] >= 7, "each wait ended an attempt, the replays went through: %d runs" % runs["named"]


# -- a step whose answer cannot be kept ------------------------------------------------------

UNKEPT = {
    "datetime": lambda: datetime.datetime(2026, 1, 2, 3, 4, 5),
    "set": lambda: {1, 2},
    "bytes": lambda: b"receipt",
    "cycle": lambda: _cycle(),
}


def _cycle():
    receipt = {"id": 7}
    receipt["self"] = receipt
    return receipt


@pytest.mark.parametrize("helper", HELPERS)
def test_a_step_whose_answer_cannot_be_stored_fails_the_job_its_function_runs_once(queue, helper):
    """Before, json.dumps raised inside run.step after the function had run: the attempt
    ended in an error, and each retry (three tries, no backoff) ran the function, and its
    side effect (a charge), again. Now the job fails for good at once, the error naming the
    step and why, and nothing is kept."""
    queue.settings(backoff=0)                 # a retry would be due at once
    for kind in UNKEPT:
        queue.add(kind, id=kind, attempts=3)
    calls = {kind: 0 for kind in UNKEPT}

    def charge(kind):
        calls[kind] += 1                      # the side effect
        return UNKEPT[kind]()

    def threads(payload, run):
        run.step("charge", lambda: charge(payload))
        return "charged"

    async def asyncio_(payload, run):
        async def charging():
            return charge(payload)
        await run.step("charge", charging)
        return "charged"

    if helper == "threads":
        summary = queue.drain(threads)
    else:
        async def main():
            async with tinyq.AsyncQueue(queue.path, queue.name) as aq:
                return await aq.drain(asyncio_)
        summary = asyncio.run(asyncio.wait_for(main(), GIVE_UP_S))
    assert calls == {kind: 1 for kind in UNKEPT}
    assert summary == {"done": 0, "failed": 4, "retried": 0}
    for kind, why in (("datetime", "TypeError: Object of type datetime is not JSON serializable"),
                      ("set", "TypeError: Object of type set is not JSON serializable"),
                      ("bytes", "TypeError: Object of type bytes is not JSON serializable"),
                      ("cycle", "ValueError: Circular reference detected")):
        job = queue.get(kind)
        assert (job["state"], job["tries"]) == ("failed", 1), job
        assert job["error"].startswith("run.step 'charge': its answer cannot be stored as JSON (%s): the job fails "
                                       "rather than run the step again" % why), job["error"]
        assert queue.conn.execute("SELECT count(*) FROM tq_steps(?)", (kind,)).fetchone()[0] == 0


# -- a signal's name is once per job ---------------------------------------------------------

@pytest.mark.parametrize("helper", HELPERS)
def test_a_job_waits_once_per_signal_name_a_new_name_waits_again(queue, helper):
    """The payload of a signal is kept in the job's step `signal:<name>` by the first
    delivery: a second wait for the same name would read that payload again, not the next
    one. In the helpers a second wait of a name in one run raises (so a replay, which makes
    the first wait again and gets the kept payload, cannot reach it either); a wait again
    takes a new name, whose signal is its own."""
    queue.add("again", id="again", attempts=1)
    queue.add("renamed", id="renamed", attempts=1)
    queue.signal("approve", {"n": 1})          # kept for later waits (keep: 7 days)
    queue.signal("approve-2", {"n": 2})

    def threads(payload, run):
        first = run.wait_signal("approve")
        return [first, run.wait_signal("approve" if payload == "again" else "approve-2")]

    async def asyncio_(payload, run):
        first = await run.wait_signal("approve")
        return [first, await run.wait_signal("approve" if payload == "again" else "approve-2")]

    work_until_finished(helper, queue, ["again", "renamed"], {"threads": threads, "asyncio": asyncio_})
    again, renamed = queue.get("again"), queue.get("renamed")
    assert again["state"] == "failed", again
    assert again["error"].startswith("ValueError: run.wait_signal: the name 'approve' was used already by this job")
    assert (renamed["state"], renamed["result"]) == ("done", [{"n": 1}, {"n": 2}]), renamed
