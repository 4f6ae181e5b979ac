"""The watch log (WAT-01, tq_watch): every change once, in commit order, with its attempt and
detail, from any process.

Time is pinned with tq_clock wherever it matters.
"""
import json
import os
import subprocess
import time

import pytest

from helpers import (EXT, ROOT, T0, add, cancel, claim, claim_ids, connect, get, one, pin, progress, retry,
                     run_python, settle, settle_all, sweep_all, watch)
from helpers import DAY as D, HOUR as H, MIN as M, SEC as S


# --------------------------------------------------------------------------- helpers

def _contains(obj, target):
    if obj == target and type(obj) is type(target):
        return True
    if isinstance(obj, str) and isinstance(target, str) and target in obj:
        return True
    if isinstance(obj, dict):
        return any(_contains(v, target) for v in obj.values())
    if isinstance(obj, list):
        return any(_contains(v, target) for v in obj)
    return False


def mentions(detail, *targets):
    """Does a watch `detail` carry one of the targets (as text, or anywhere in its JSON)?"""
    if detail is None:
        return False
    for target in targets:
        if isinstance(detail, str) and isinstance(target, str) and target in detail:
            return True
        if detail == target:
            return True
        try:
            parsed = json.loads(detail) if isinstance(detail, str) else detail
        except ValueError:
            continue
        if _contains(parsed, target):
            return True
    return False


# --------------------------------------------------------------------------- WAT-01 watch

def _normalise(events):
    """Drop a `waiting` that only says a scheduled job became due (one stored state told
    apart by the clock may or may not log it); everything else must match exactly."""
    last = {}
    out = []
    for e in events:
        if e["state"] == "waiting" and last.get(e["id"]) == "scheduled":
            last[e["id"]] = "waiting*"
            continue
        last[e["id"]] = e["state"]
        out.append(e)
    return out


def test_WAT_01_every_change_once_in_commit_order_with_attempt_and_detail(db, db_path):
    expected = []   # (id, state, attempt or None for "not claimed yet", at, detail targets)

    def expect(job_id, state, attempt, at, *detail):
        expected.append((job_id, state, attempt, at, detail))

    pin(db, T0)
    add(db, "w", json.dumps({"n": 1}), id="a")
    expect("a", "waiting", None, T0)
    add(db, "w", "{}", id="b", delay="1h")
    expect("b", "scheduled", None, T0)
    assert claim_ids(db, "w") == [("a", 1)]
    expect("a", "running", 1, T0)
    assert progress(db, "a", 1, json.dumps({"pct": 50})) == 1
    expect("a", "progress", 1, T0, {"pct": 50}, '{"pct":50}', '{"pct": 50}')
    pin(db, T0 + S)
    assert settle(db, "a", 1, "error", "boom: upstream 502") == 1
    expect("a", "scheduled", 1, T0 + S, "boom: upstream 502")
    assert cancel(db, "b") == 1
    expect("b", "cancelled", None, T0 + S)

    pin(db, T0 + M)
    assert claim_ids(db, "w") == [("a", 2)]
    expect("a", "running", 2, T0 + M)
    assert settle(db, "a", 2, "retry", "5s") == 1
    expect("a", "scheduled", 2, T0 + M, 5000, "5s")
    pin(db, T0 + 2 * M)
    assert claim_ids(db, "w") == [("a", 3)]
    expect("a", "running", 3, T0 + 2 * M)
    assert settle(db, "a", 3, "snooze", "7s") == 1
    expect("a", "scheduled", 3, T0 + 2 * M, 7000, "7s")
    pin(db, T0 + 3 * M)
    assert claim_ids(db, "w") == [("a", 4)]
    expect("a", "running", 4, T0 + 3 * M)
    assert settle(db, "a", 4, "fail", "no such user") == 1
    expect("a", "failed", 4, T0 + 3 * M, "no such user")
    pin(db, T0 + 4 * M)
    assert retry(db, "a") == 1
    expect("a", "waiting", 4, T0 + 4 * M)
    assert claim_ids(db, "w") == [("a", 5)]
    expect("a", "running", 5, T0 + 4 * M)
    assert progress(db, "a", 5, "almost") == 1
    expect("a", "progress", 5, T0 + 4 * M, "almost")
    assert settle(db, "a", 5, "done", json.dumps({"sent": True})) == 1
    expect("a", "done", 5, T0 + 4 * M)
    # calls that change nothing log nothing
    assert settle(db, "a", 5, "done") == 0
    assert progress(db, "a", 4, "stale") == 0
    assert cancel(db, "b") == 0

    events = watch(db, 0)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    got = _normalise(events)
    assert [(e["id"], e["state"]) for e in got] == [(x[0], x[1]) for x in expected]
    for e, (job_id, state, attempt, at, detail) in zip(got, expected):
        assert e["queue"] == "w"
        if attempt is None:
            assert e["attempt"] in (0, None), e
        else:
            assert e["attempt"] == attempt, e
        assert e["at"] == at, e
        if detail:
            assert mentions(e["detail"], *detail), e

    # another process reads the same log
    proc = run_python(
        "import json, sys\n"
        "from helpers import connect\n"
        "conn = connect(sys.argv[1])\n"
        "cur = conn.execute('SELECT seq, id, queue, state, attempt, at, detail FROM tq_watch(0)')\n"
        "print(json.dumps(cur.fetchall()))\n", db_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [list(e.values()) for e in events]


def test_WAT_01_since_and_queue_filters(db):
    pin(db, T0)
    for i in range(3):
        add(db, "one", "{}", id=f"one-{i}")
        add(db, "two", "{}", id=f"two-{i}")
    claim(db, "one", "w1", 3)
    everything = watch(db, 0)
    assert len(everything) == 9
    seqs = [e["seq"] for e in everything]
    # since: only seq > since, oldest first
    for cut in seqs:
        assert [e["seq"] for e in watch(db, cut)] == [s for s in seqs if s > cut]
    assert watch(db, seqs[-1]) == []
    assert watch(db, seqs[-1] + 1000) == []
    # queue filter
    ones = watch(db, 0, "one")
    assert [e["id"] for e in ones] == ["one-0", "one-1", "one-2"] * 2
    assert [e["state"] for e in ones] == ["waiting"] * 3 + ["running"] * 3
    assert {e["queue"] for e in ones} == {"one"}
    twos = watch(db, seqs[1], "two")         # since and queue together
    assert [e["id"] for e in twos] == ["two-1", "two-2"]
    assert watch(db, 0, "three") == []


def test_WAT_01_a_rolled_back_transaction_leaves_no_event(db):
    pin(db, T0)
    add(db, "w", "{}", id="x")
    before = watch(db, 0)

    db.execute("BEGIN IMMEDIATE")
    add(db, "w", "{}", id="y")
    db.execute("ROLLBACK")
    assert watch(db, 0) == before
    assert get(db, "y") is None

    assert claim_ids(db, "w") == [("x", 1)]
    after_claim = watch(db, 0)
    db.execute("BEGIN IMMEDIATE")
    assert progress(db, "x", 1, "50%") == 1
    assert settle(db, "x", 1, "done", "ok") == 1
    db.execute("ROLLBACK")
    assert watch(db, 0) == after_claim
    job = get(db, "x")
    assert job["state"] == "running" and job["progress"] is None

    # a claim rolled back leaves no `running`
    add(db, "w", "{}", id="z")
    with_z = watch(db, 0)
    db.execute("BEGIN IMMEDIATE")
    assert claim_ids(db, "w") == [("z", 1)]
    db.execute("ROLLBACK")
    assert watch(db, 0) == with_z

    assert settle(db, "x", 1, "done", "ok") == 1
    done = [e for e in watch(db, 0) if e["id"] == "x" and e["state"] == "done"]
    assert len(done) == 1
    assert not [e for e in watch(db, 0) if e["state"] == "progress"]


def test_WAT_01_a_watcher_sees_new_events_after_old_ones_were_swept(db):
    """A long-running watcher keeps the last seq it saw. Sweeping old events (a short `keep`
    in one queue, the default in another) must never make a later event reuse a seq the
    watcher has already passed."""
    pin(db, T0)
    one(db, "SELECT tq_queue('brief', ?)", json.dumps({"keep": "1m", "dedupe": "1m"}))
    add(db, "lasting", "{}", id="l1")                  # default keep: its event stays
    for i in range(3):
        add(db, "brief", "{}", id=f"b{i}")
    settle_all(db, claim_ids(db, "brief", 3), "done")
    last = watch(db, 0)[-1]["seq"]
    # quiet for a while; what of `brief` is past its windows is swept
    pin(db, T0 + H)
    assert sweep_all(db) >= 3
    # new work: the watcher, asking for what is after `last`, sees all of it
    add(db, "brief", "{}", id="b-new")
    add(db, "lasting", "{}", id="l-new")
    new = watch(db, last)
    assert [(e["id"], e["state"]) for e in new] == [("b-new", "waiting"), ("l-new", "waiting")], \
        (last, watch(db, 0))
    # and once every event of the store is past its window, too
    pin(db, T0 + 30 * D)
    last = watch(db, 0)[-1]["seq"]
    sweep_all(db)
    add(db, "brief", "{}", id="b-later")
    assert [e["id"] for e in watch(db, last)] == ["b-later"], (last, watch(db, 0))


WRITER = r"""
import json, sys
from helpers import connect, one, claim
conn = connect(sys.argv[1])
prefix, n = sys.argv[2], int(sys.argv[3])
for i in range(n):
    one(conn, "SELECT tq_add('wq', '{}', json_object('id', ?))", f"{prefix}-{i}")
    while True:                       # the other writer may have taken it: take the next one
        got = claim(conn, "wq", prefix, 1)
        if not got:
            break
        (job,) = got
        one(conn, "SELECT tq_progress(?, ?, ?)", job["id"], job["attempt"], json.dumps({"by": prefix}))
        assert one(conn, "SELECT tq_settle(?, ?, 'done')", job["id"], job["attempt"]) == 1
print("ok")
"""


@pytest.mark.parametrize("n_writers", [1, 2])
def test_WAT_01_a_watcher_in_another_process_sees_each_event_once(db, db_path, tmp_path,
                                                                   n_writers):
    """One or two writer processes work 100 jobs each, at the same time, while this process
    tails tq_watch(since, queue): every event once, in seq order, none missed."""
    n = 100
    add(db, "other", "{}", id="store-exists")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "tests"))
    writers = [subprocess.Popen(["/usr/bin/python3", str(script), db_path, prefix, str(n)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for prefix in ("A", "B")[:n_writers]]
    seen = []
    last = 0
    polls = 0
    try:
        deadline = time.monotonic() + 120
        while True:
            finished = all(w.poll() is not None for w in writers)
            batch = watch(db, last, "wq")
            polls += 1
            if batch:
                seen.extend(batch)
                last = batch[-1]["seq"]
            if finished:
                break
            assert time.monotonic() < deadline, "writers did not finish"
            time.sleep(0.002)
        outputs = [w.communicate(timeout=30) for w in writers]
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait()
    for w, (out, err) in zip(writers, outputs):
        assert w.returncode == 0, err
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "an event was seen twice"
    fresh = connect(db_path)
    try:
        assert seen == watch(fresh, 0, "wq"), "the tail missed events or saw them out of order"
    finally:
        fresh.close()
    per_job = {}
    for e in seen:
        per_job.setdefault(e["id"], []).append((e["state"], e["attempt"]))
    assert len(per_job) == n_writers * n
    for job_id, changes in per_job.items():
        assert changes == [("waiting", changes[0][1]), ("running", 1), ("progress", 1),
                           ("done", 1)], (job_id, changes)
    print(f"\nWAT-01 tail: {len(seen)} events from {n_writers} writer process(es) "
          f"over {polls} polls")


@pytest.mark.parametrize("seed", range(3))
def test_WAT_01_a_jobs_timeline_is_its_events_through_every_path(tmp_path, seed):
    """`tq_watch WHERE job = ?` reads a job's own events (schema 7 chains them): after adds
    (scheduled, grouped, bounded, replaced, debounced, after other jobs), claims of one and of
    several, progress, every outcome, waits for jobs and for signals (woken, sent before,
    timed out), dependents unblocked, failed or cancelled by their dependencies, leases that
    run out, expiries, cancels, retries and sweeps, each job's timeline is exactly the log's
    events of that id, in seq order, from any `since`."""
    import random
    rnd = random.Random(seed)
    db = connect(str(tmp_path / "t.db"))
    now = T0
    pin(db, now)
    one(db, "SELECT tq_queue('g', '{\"group_concurrency\": 1, \"keep\": \"10s\", \"dedupe\": \"5s\"}')")
    chosen = iter(range(10**6))
    sent = ["s-first"]  # signal names a wait may take again: those sent (it returns at once)

    def some_ids(waiter=None):
        # A wait names no job that waits (it might wait for the waiter: refused as a cycle).
        return [r[0] for r in db.execute("SELECT id FROM tq_jobs WHERE id LIKE 'k%' AND id IS NOT ?1"
                                         " AND (?1 IS NULL OR state <> 'blocked') ORDER BY random() LIMIT ?2",
                                         (waiter, rnd.randint(1, 3)))]
    for _ in range(1500):
        op, q = rnd.random(), rnd.choice(["q", "g"])
        if op < 0.3:
            opts = {"priority": rnd.randint(0, 2)}
            if rnd.random() < 0.3:
                opts["id"] = "k%d" % next(chosen)
            if rnd.random() < 0.2:
                opts["delay"] = rnd.choice([500, 3000])
            if rnd.random() < 0.3:
                opts["group"] = rnd.choice("ab")
            if rnd.random() < 0.2:
                opts["expires"] = "4s"
            if rnd.random() < 0.2 and (after := some_ids()):
                opts["after"] = after
                opts["after_failed"] = rnd.choice(["fail", "run", "cancel"])
            one(db, "SELECT tq_add(?, '{}', ?)", q, json.dumps(opts))
        elif op < 0.35:
            row = db.execute("SELECT id, queue FROM tq_jobs WHERE id LIKE 'k%' AND state IN ('waiting', 'scheduled')"
                             " ORDER BY random() LIMIT 1").fetchone()
            if row:
                one(db, "SELECT tq_add(?, '{\"again\": 1}', ?)", row[1], json.dumps(
                    {"id": row[0], "on_conflict": rnd.choice(["replace", "debounce"]), "delay": rnd.choice([0, 800]),
                     "priority": rnd.randint(0, 2)}))
        elif op < 0.55:
            db.execute("SELECT * FROM tq_claim(?, 'w', ?, '{\"lease\": \"1s\"}')", (q, rnd.randint(1, 5))).fetchall()
        elif op < 0.75:
            row = db.execute("SELECT id, attempt FROM tq_jobs WHERE state = 'running' ORDER BY random() LIMIT 1").fetchone()
            if row:
                if rnd.random() < 0.3:
                    one(db, "SELECT tq_progress(?, ?, '1')", *row)
                outcome, value = rnd.choice([("done", None), ("error", "x"), ("retry", "0ms"), ("snooze", "1s"),
                                             ("fail", "no"), ("wait", None)])
                if outcome == "wait":
                    name = rnd.choice(["s%d" % next(chosen), rnd.choice(sent)])
                    value = rnd.choice([{"signal": name}, {"signal": name, "timeout": rnd.choice(["1s", "3s"])},
                                        {"after": some_ids(waiter=row[0])}])
                    value = json.dumps(value if value.get("after") != [] else {"signal": name})
                one(db, "SELECT tq_settle(?, ?, ?, ?)", *row, outcome, value)
        elif op < 0.79:
            name = one(db, "SELECT signal FROM tinyq_jobs WHERE signal IS NOT NULL ORDER BY random() LIMIT 1")
            if name is None or rnd.random() < 0.3:
                name = "s%d" % next(chosen)
            sent.append(name)
            one(db, "SELECT tq_signal(?, '{\"ok\": 1}')", name)
        elif op < 0.84:
            row = db.execute("SELECT id FROM tq_jobs WHERE state IN ('waiting', 'running', 'scheduled', 'blocked')"
                             " ORDER BY random() LIMIT 1").fetchone()
            if row:
                one(db, "SELECT tq_cancel(?)", row[0])
        elif op < 0.89:
            row = db.execute("SELECT id FROM tq_jobs WHERE state = 'failed' ORDER BY random() LIMIT 1").fetchone()
            if row:
                one(db, "SELECT tq_retry(?)", row[0])
        else:
            now += rnd.choice([300, 1000, 2500])
            pin(db, now)

    def check():
        ids = [r[0] for r in db.execute("SELECT DISTINCT id FROM tq_watch(0)")]
        for jid in ids:
            log = db.execute("SELECT seq, state, attempt, detail FROM tq_watch(0) WHERE id = ? ORDER BY seq",
                             (jid,)).fetchall()
            for since in (0, log[0][0], log[len(log) // 2][0]):
                assert db.execute("SELECT seq, state, attempt, detail FROM tq_watch WHERE job = ? AND since = ?",
                                  (jid, since)).fetchall() == [e for e in log if e[0] > since], (seed, jid, since)
        return len(ids)

    assert check() > 100
    # The workflow paths were taken: waits, jobs woken by a signal or its timeout, dependents
    # failed by their dependencies.
    paths = {(state, str(detail)[:10]) for state, detail in db.execute("SELECT state, detail FROM tq_watch(0)")}
    assert {("blocked", '{"after":1'), ("blocked", '{"signal":'), ("waiting", '{"signal":'),
            ("waiting", '{"timeout"'), ("failed", "dependency")} <= paths
    # The oldest events swept (past every queue's keep): the timelines keep what is kept.
    one(db, "SELECT tq_queue('q', '{\"keep\": \"10s\", \"dedupe\": \"5s\"}')")
    pin(db, now + 12_000)
    for q in ("q", "g"):
        claim(db, q, "w", 50)
    one(db, "SELECT tq_sweep()")
    assert one(db, "SELECT min(seq) FROM tq_watch(0)") > 1
    assert check() > 1
    db.close()


def test_WAT_01_a_job_added_again_has_its_own_timeline_and_a_gone_one_keeps_its_events(tmp_path):
    """An id cancelled and added again: the job now present shows its own events from its add;
    while it is gone, its page shows the events of the id that are kept."""
    db = connect(str(tmp_path / "t.db"))
    pin(db, T0)
    add(db, "q", id="again")
    [job] = claim(db, "q", "w", 1)
    one(db, "SELECT tq_cancel('again')")
    assert [r[0] for r in db.execute("SELECT state FROM tq_watch WHERE job = 'again'")] == ["waiting", "running",
                                                                                            "cancelled"]
    add(db, "q", id="again", delay=1000)
    assert [r[0] for r in db.execute("SELECT state FROM tq_watch WHERE job = 'again'")] == ["scheduled"]
    db.close()
