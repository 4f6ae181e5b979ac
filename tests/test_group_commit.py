"""Group commit in the helpers (docs/design.md, "Group commit"): the writes that concurrent
handlers make go to the store in one transaction, each in a savepoint of its own. One call
that fails, or a stale attempt's step, changes nothing for the others of its group; and a
step that returned to its handler is on disk, even when the worker is SIGKILLed."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import ROOT, connect, get, one

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402
import tinyq._aio_thread  # noqa: E402
from tinyq._group import Write, commit_group  # noqa: E402

PY = "/usr/bin/python3"


def claim(conn, queue, n=1, lease_ms=None):
    args = (queue, "test", n) + (() if lease_ms is None else (json.dumps({"lease": lease_ms}),))
    marks = ", ".join("?" * len(args))
    return [dict(id=row[0], attempt=row[1]) for row in
            conn.execute("SELECT id, attempt FROM tq_claim(%s)" % marks, args).fetchall()]


def added(conn, queue, n):
    return [one(conn, "SELECT tq_add(?, ?)", queue, json.dumps({"n": i})) for i in range(n)]


def kept(conn, job_id, name="answer"):
    return one(conn, "SELECT tq_step_get(?, ?)", job_id, name)


def until(predicate, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.01)


# -- the group itself, on a real connection ---------------------------------------------------


def test_JOB_06_one_failing_call_in_a_group_leaves_the_others_kept(db_path):
    conn = tinyq.open(db_path)
    added(conn, "q", 3)
    a, b, c = claim(conn, "q", 3)
    group = [Write.call("tq_step_put", a["id"], a["attempt"], "answer", '"a"'),
             Write.call("tq_step_put", b["id"], "x", "answer", '"b"'),           # bad attempt
             Write.call("tq_step_put", c["id"], c["attempt"], "answer", '"c"'),
             Write.call("tq_progress", c["id"], c["attempt"], '{"half": true}')]
    commit_group(conn, group)
    assert [w.value for w in group] == ['"a"', None, '"c"', 1]
    assert str(group[1].error).startswith("tq_step_put: attempt must be an integer, not 'x'")
    assert [w.error for w in (group[0], group[2], group[3])] == [None, None, None]
    assert not conn.in_transaction
    other = connect(db_path)     # committed: another connection sees them
    assert [kept(other, j["id"]) for j in (a, b, c)] == ['"a"', None, '"c"']
    assert get(other, c["id"])["progress"] == {"half": True}


def test_JOB_05_a_stale_attempt_in_a_group_keeps_nothing_and_gets_null(db_path):
    conn = tinyq.open(db_path)
    added(conn, "q", 2)
    [fresh] = claim(conn, "q", 1)
    [stale] = claim(conn, "q", 1, lease_ms=1)
    until(lambda: claim(conn, "q", 1) != [], "the 1 ms lease to run out and the job to be claimed again")
    assert get(conn, stale["id"])["attempt"] == 2
    group = [Write.call("tq_step_put", stale["id"], 2, "answer", '"attempt 2"'),
             Write.call("tq_step_put", stale["id"], 1, "answer", '"attempt 1"'),
             Write.call("tq_step_put", fresh["id"], fresh["attempt"], "answer", '"fresh"'),
             Write.call("tq_progress", stale["id"], 1, '"stale progress"')]
    commit_group(conn, group)
    assert [w.value for w in group] == ['"attempt 2"', None, '"fresh"', 0]
    assert [w.error for w in group] == [None] * 4
    other = connect(db_path)
    assert kept(other, stale["id"]) == '"attempt 2"' and kept(other, fresh["id"]) == '"fresh"'
    assert get(other, stale["id"])["progress"] is None


def test_a_group_whose_transaction_fails_answers_every_caller_with_the_error(db_path):
    conn = tinyq.open(db_path)
    added(conn, "q", 1)
    [job] = claim(conn, "q")
    blocker = connect(db_path, busy_ms=0)
    blocker.execute("BEGIN IMMEDIATE")           # the write lock, held by another connection
    conn.execute("PRAGMA busy_timeout=0")
    group = [Write.call("tq_step_put", job["id"], job["attempt"], "answer", '"a"'),
             Write.call("tq_progress", job["id"], job["attempt"], '"p"')]
    commit_group(conn, group)
    assert all(w.done and "locked" in str(w.error) for w in group)
    blocker.execute("ROLLBACK")
    assert kept(blocker, job["id"]) is None


# -- through AsyncQueue.work ------------------------------------------------------------------


def recording_groups(monkeypatch):
    """The size of every group the asyncio helper commits (its writes), in order."""
    sizes = []
    real = tinyq._aio_thread.commit_group

    def commit_group(conn, writes):
        sizes.append(len(writes))
        return real(conn, writes)
    monkeypatch.setattr(tinyq._aio_thread, "commit_group", commit_group)
    return sizes


def work_together(db_path, n, body, settled, opening=None):
    """AsyncQueue.work over the queue's n jobs: every handler waits until all n have started
    (and `await opening(q)` has run), so that their writes are asked for in the same turn,
    then returns `await body(run, payload)`. Stops once `await settled(q)` is true."""
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        gate = asyncio.Event()
        arrived = []

        async def handler(payload, run):
            arrived.append(run.id)
            if len(arrived) == n:
                if opening is not None:
                    await opening(q)
                gate.set()
            await gate.wait()
            return await body(run, payload)

        async def stop_when_settled():
            while not await settled(q):
                await asyncio.sleep(0.02)
            q.stop()
        stopper = asyncio.ensure_future(stop_when_settled())
        await q.work(handler, concurrency=n, poll=0.05)
        await stopper
        await q.close()
    asyncio.run(asyncio.wait_for(main(), 120))


def test_asyncio_handlers_steps_share_commits_and_a_failing_one_fails_alone(db_path, monkeypatch):
    sizes = recording_groups(monkeypatch)
    n = 40
    conn = connect(db_path)
    ids = added(conn, "q", n)
    bad = ids[7]
    outcomes = {}

    async def body(run, payload):
        try:
            if run.id == bad:      # text SQLite cannot take: this call fails
                await run.progress("\ud800")
            outcomes[run.id] = await run.step("answer", lambda: {"for": run.id})
        except UnicodeEncodeError as exc:
            outcomes[run.id] = exc

    async def settled(q):
        return len(outcomes) == n and [(await q.get(i))["state"] for i in ids] == ["done"] * n
    work_together(db_path, n, body, settled)
    assert isinstance(outcomes.pop(bad), UnicodeEncodeError)
    assert outcomes == {i: {"for": i} for i in ids if i != bad}
    assert [json.loads(kept(conn, i)) for i in ids if i != bad] == [{"for": i} for i in ids if i != bad]
    assert kept(conn, bad) is None
    # 39 steps and a failed progress in n handlers: far fewer commits than writes
    assert max(sizes) >= n - 1, sizes


def test_asyncio_step_puts_commit_alone_at_most_200_a_commit(db_path, monkeypatch):
    """A wave of 300 puts asked for at once, while the settles and claims of the handlers
    that end wait for nobody: the first commit holds 200 puts, and no commit holds a put
    beside any other write (a claim or settles would hold the puts' handlers)."""
    groups = []
    real = tinyq._aio_thread.commit_group

    def commit_group(conn, writes):
        groups.append([w.function or "other" for w in writes])
        return real(conn, writes)
    monkeypatch.setattr(tinyq._aio_thread, "commit_group", commit_group)
    n = 300
    conn = connect(db_path)
    ids = added(conn, "q", n)
    kept_by = {}

    async def body(run, payload):
        kept_by[run.id] = await run.step("answer", lambda: {"for": run.id})

    async def settled(q):
        return len(kept_by) == n and [(await q.get(i))["state"] for i in ids] == ["done"] * n
    work_together(db_path, n, body, settled)
    assert [json.loads(kept(conn, i)) for i in ids] == [{"for": i} for i in ids]
    with_puts = [g for g in groups if "tq_step_put" in g]
    assert sum(g.count("tq_step_put") for g in with_puts) == n
    assert all(g.count("tq_step_put") <= 200 for g in groups), [len(g) for g in groups]
    first = with_puts[0]
    assert first == ["tq_step_put"] * 200, first[:3] + ["..."] + first[-3:]
    assert all(set(g) == {"tq_step_put"} for g in with_puts), [sorted(set(g)) for g in with_puts]
    # the settles of the wave's handlers committed too, in groups of their own
    assert any(set(g) == {"other"} for g in groups[groups.index(with_puts[0]) + 1:]), groups


def test_asyncio_other_writes_wait_behind_puts_four_turns_at_most():
    """The helper's order within its SQL thread's turns: 1,000 step puts asked for beside a
    settle-and-claim and a renewal, and 150 more puts every turn after. Puts commit alone,
    200 at most; the other two wait 4 turns of puts, not for ever, and then commit alone;
    every write goes once, the puts in the order they were asked for."""
    db = tinyq._aio_thread._DbThread(lambda: None, "test")
    asked = []

    def put():
        asked.append((Write.call("tq_step_put", len(asked)), False, None))
        return asked[-1]
    others = [(Write(lambda conn: None, ()), False, None) for _ in range(2)]
    pending = [others[0]] + [put() for _ in range(1000)] + [others[1]]
    turns = []
    while pending and len(turns) < 12:
        turn, pending = db._next_group(pending)
        turns.append(turn)
        pending += [put() for _ in range(150)] if len(turns) < 8 else []
    kinds = [{w.function for w, _, _ in turn} for turn in turns]
    assert all(k in ({"tq_step_put"}, {None}) for k in kinds), kinds
    assert [len(turn) for turn in turns[:4]] == [200] * 4
    assert turns[4] == others
    committed_puts = [w.args[1] for turn in turns for w, _, _ in turn if w.function]
    left = [w.args[1] for w, _, _ in pending]
    assert committed_puts + left == list(range(len(asked)))


def test_asyncio_a_cancelled_attempt_in_a_group_is_cancelled_alone(db_path):
    n = 10
    conn = connect(db_path)
    ids = added(conn, "q", n)
    lost = ids[3]
    seen = {}

    async def body(run, payload):
        try:
            seen[run.id] = await run.step("answer", lambda: run.id)
        except tinyq.Cancelled:
            seen[run.id] = "cancelled"

    async def settled(q):
        return len(seen) == n and [(await q.get(i))["state"] for i in ids if i != lost] == ["done"] * (n - 1)
    work_together(db_path, n, body, settled, opening=lambda q: q.cancel(lost))   # lost: no longer its job's
    assert seen == {i: ("cancelled" if i == lost else i) for i in ids}
    assert kept(conn, lost) is None
    assert (get(conn, lost) or {}).get("state") in (None, "cancelled")   # a cancelled job may be gone


def test_asyncio_a_refused_settle_among_many_leaves_the_others_settled(db_path):
    n = 20
    conn = connect(db_path)
    ids = added(conn, "q", n)
    bad = ids[5]

    async def body(run, payload):       # every handler ends in the same turn: one settle batch
        if run.id == bad:
            run.snooze("not a delay")   # tq_settle refuses it: recorded as an error instead
        return {"n": payload["n"]}

    async def settled(q):
        return [(await q.get(i))["state"] for i in ids if i != bad] == ["done"] * (n - 1) and \
            bool((await q.get(bad)).get("error"))
    work_together(db_path, n, body, settled)
    jobs = {i: get(conn, i) for i in ids}
    assert [(jobs[i]["state"], jobs[i]["result"]) for i in ids if i != bad] == [
        ("done", {"n": k}) for k in range(n) if ids[k] != bad]
    assert jobs[bad]["state"] != "done" and "tq_settle: outcome 'snooze'" in jobs[bad]["error"], jobs[bad]


# -- SIGKILL: a step that returned is on disk ----------------------------------------------------

WORKER = textwrap.dedent(r"""
    import asyncio, os, sys
    sys.path.insert(0, sys.argv[3])
    import tinyq
    path, log_path, shape = sys.argv[1], sys.argv[2], sys.argv[4]
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    async def main():
        q = tinyq.AsyncQueue(path, "q")

        async def model(n):
            # "mixed": calls of 0-6 ms; "waves": 0.1 s each, a thousand at once, so that the
            # jobs of the next wave are claimed ahead and the puts are cut in parts
            await asyncio.sleep(0.001 * (n % 7) if shape == "mixed" else 0.1)
            return {"answer": n}

        async def handler(payload, run):
            await run.step("answer", lambda: model(payload["n"]))
            os.write(log, (run.id + "\n").encode())   # the step returned: recorded, synced
            os.fsync(log)
            if shape == "mixed":
                await asyncio.sleep(0.05 * (payload["n"] % 3))

        await q.work(handler, concurrency=200 if shape == "mixed" else 1000, poll=0.05)
    asyncio.run(main())
""")


@pytest.mark.parametrize("shape", ["mixed", "waves"])
def test_DUR_01_asyncio_steps_that_returned_survive_sigkill(db_path, tmp_path, shape):
    conn = connect(db_path)
    ids = added(conn, "q", 3000 if shape == "mixed" else 6000)
    log_path = str(tmp_path / "returned.log")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = subprocess.Popen([PY, str(script), db_path, log_path, os.path.join(ROOT, "python"), shape],
                            stderr=subprocess.PIPE)

    def returned():
        try:
            with open(log_path) as f:
                return [line for line in f.read().splitlines() if line]
        except FileNotFoundError:
            return []
    try:
        least = 500 if shape == "mixed" else 1500   # "waves": into the second wave at least
        until(lambda: len(returned()) >= least or proc.poll() is not None, "%d steps to return" % least)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    done = returned()
    assert least <= len(done) < len(ids)    # killed mid-run
    assert [i for i in done if kept(conn, i) is None] == []
