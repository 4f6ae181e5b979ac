"""Everything a job's owner sees: progress and results (tq_progress, tq_get), cancel and
retry (CAN-01, tq_retry), the watch log (WAT-01), `ahead`, tq_jobs, tq_stats, and how long
settled jobs are kept (RET-01, tq_sweep).

Time is pinned with tq_clock wherever it matters, so nothing sleeps for a lease or a window.
Figures (ahead at 100k, tq_jobs filter vs scan, pages after sweeping) are printed: run
with `-s` to see them.
"""
import json
import os
import statistics
import subprocess
import time

import pytest

from conftest import EXT, LEASE, ROOT, T0, add, claim, connect, get, one, pin, run_python, settle
from conftest import DAY as D, HOUR as H, MIN as M, SEC as S


# --------------------------------------------------------------------------- helpers


def progress(conn, job_id, attempt, value):
    return one(conn, "SELECT tq_progress(?, ?, ?)", job_id, attempt, value)


def cancel(conn, job_id):
    return one(conn, "SELECT tq_cancel(?)", job_id)


def retry(conn, job_id):
    return one(conn, "SELECT tq_retry(?)", job_id)


def sweep(conn, limit=None):
    if limit is None:
        return one(conn, "SELECT tq_sweep()")
    return one(conn, "SELECT tq_sweep(?)", limit)


def rows(conn, sql, *args):
    cur = conn.execute(sql, args)
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def watch(conn, since=0, queue=None):
    cols = "seq, id, queue, state, attempt, at, detail"
    if queue is None:
        return rows(conn, f"SELECT {cols} FROM tq_watch(?)", since)
    return rows(conn, f"SELECT {cols} FROM tq_watch(?, ?)", since, queue)


def jobs(conn, where="", *args):
    return rows(conn, f"SELECT id, queue, state FROM tq_jobs {where}", *args)


def job_count(conn):
    return one(conn, "SELECT count(*) FROM tq_jobs")


def event_count(conn):
    return len(watch(conn, 0))


def claim_ids(conn, queue, n=1, worker="w1", options=None):
    return [(r["id"], r["attempt"]) for r in claim(conn, queue, worker, n, options)]


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


RECURSE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) "


def bulk_add(conn, queue, n, id_prefix=None, payload_bytes=0, priority=None):
    """Add n jobs in one transaction (ids id_prefix1..n when given); returns seconds taken."""
    opts = []
    if id_prefix is not None:
        opts.append(f"'id', '{id_prefix}' || x")
    if priority is not None:
        opts.append(f"'priority', {int(priority)}")
    payload = f"json_object('n', x, 'pad', printf('%.{payload_bytes}c', 'x'))" if payload_bytes \
        else "json_object('n', x)"
    call = f"tq_add(?, {payload}, json_object({', '.join(opts)}))" if opts \
        else f"tq_add(?, {payload})"
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    try:
        assert one(conn, RECURSE + f"SELECT count({call}) FROM c", n, queue) == n
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return time.perf_counter() - started


def settle_all(conn, claimed, outcome="done", value=None):
    conn.execute("BEGIN IMMEDIATE")
    try:
        for job_id, attempt in claimed:
            assert settle(conn, job_id, attempt, outcome, value) == 1
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def sweep_all(conn, limit=None):
    total = 0
    for _ in range(100_000):
        n = sweep(conn, limit)
        total += n
        if n == 0:
            return total
    raise AssertionError("tq_sweep never reached 0")


def best_of(k, fn):
    times = []
    result = None
    for _ in range(k):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times), result


# --------------------------------------------------------------------------- progress and results

def test_progress_latest_is_what_tq_get_shows(db, db_path):
    pin(db, T0)
    add(db, "summaries", json.dumps({"pages": 40}), id="sum:1")
    assert claim_ids(db, "summaries") == [("sum:1", 1)]
    assert get(db, "sum:1")["progress"] is None
    assert progress(db, "sum:1", 1, json.dumps({"page": 10, "of": 40})) == 1
    assert get(db, "sum:1")["progress"] == {"page": 10, "of": 40}
    assert progress(db, "sum:1", 1, json.dumps({"page": 30, "of": 40})) == 1
    # the owner polls from another connection and sees the latest report
    owner = connect(db_path)
    try:
        job = get(owner, "sum:1")
        assert job["state"] == "running"
        assert job["progress"] == {"page": 30, "of": 40}
    finally:
        owner.close()
    # plain text progress is shown as a JSON string
    assert progress(db, "sum:1", 1, "almost there") == 1
    assert get(db, "sum:1")["progress"] == "almost there"
    # a stale attempt reports nothing
    pin(db, T0 + LEASE + S)
    assert claim_ids(db, "summaries") == [("sum:1", 2)]
    assert progress(db, "sum:1", 1, json.dumps({"page": 39})) == 0
    assert get(db, "sum:1")["progress"] != {"page": 39}
    assert progress(db, "sum:1", 2, json.dumps({"page": 1, "of": 40})) == 1
    assert get(db, "sum:1")["progress"] == {"page": 1, "of": 40}
    # progress of nothing
    assert progress(db, "nope", 1, "x") == 0


def test_get_shows_the_done_result_and_the_fields_an_owner_reads(db):
    pin(db, T0)
    add(db, "summaries", json.dumps({"pages": 40}), id="sum:2", group="acme", priority=3)
    job = get(db, "sum:2")
    for key in ("id", "queue", "state", "group", "priority", "attempt", "run_at", "lease_until",
                "worker", "payload", "result", "error", "progress"):
        assert key in job, f"tq_get has no {key!r}: {sorted(job)}"
    created = [k for k in job if k.startswith("created")]
    assert len(created) == 1 and job[created[0]] == T0, job
    assert job["id"] == "sum:2" and job["queue"] == "summaries"
    assert job["state"] == "waiting" and job["ahead"] == 0
    assert job["group"] == "acme" and job["priority"] == 3
    assert job["payload"] == {"pages": 40}
    assert job["attempt"] == 0 and job["run_at"] == T0
    assert job["worker"] is None and job["result"] is None and job["error"] is None

    assert claim_ids(db, "summaries", worker="worker-7") == [("sum:2", 1)]
    job = get(db, "sum:2")
    assert job["state"] == "running" and job["attempt"] == 1
    assert job["worker"] == "worker-7"
    assert job["lease_until"] == T0 + LEASE
    assert job.get("ahead") is None, "ahead is only reported while waiting"

    pin(db, T0 + 5 * S)
    assert settle(db, "sum:2", 1, "done", json.dumps({"summary": "short", "words": 12})) == 1
    job = get(db, "sum:2")
    assert job["state"] == "done"
    assert job["result"] == {"summary": "short", "words": 12}
    assert job["error"] is None
    settled = [k for k in job if k.startswith("settled") or k.startswith("finished")]
    assert settled and job[settled[0]] == T0 + 5 * S, job
    assert job.get("ahead") is None

    # a text result is shown as a JSON string, no result as null
    add(db, "summaries", "{}", id="sum:3")
    add(db, "summaries", "{}", id="sum:4")
    claim(db, "summaries", "w1", 2)
    assert settle(db, "sum:3", 1, "done", "plain text") == 1
    assert settle(db, "sum:4", 1, "done") == 1
    assert get(db, "sum:3")["result"] == "plain text"
    assert get(db, "sum:4")["result"] is None
    assert get(db, "sum:4")["state"] == "done"
    assert get(db, "no-such-job") is None


def test_get_shows_the_error_of_a_failed_job(db):
    pin(db, T0)
    add(db, "summaries", "{}", id="sum:5")
    claim(db, "summaries")
    assert settle(db, "sum:5", 1, "fail", "the PDF is encrypted") == 1
    job = get(db, "sum:5")
    assert job["state"] == "failed"
    assert job["error"] == "the PDF is encrypted"
    assert job["result"] is None


# --------------------------------------------------------------------------- CAN-01 cancel, tq_retry

def _assert_gone(conn, job_id, queue):
    assert get(conn, job_id) is None
    assert all(j["id"] != job_id for j in jobs(conn))
    cancelled = [e for e in watch(conn) if e["id"] == job_id and e["state"] == "cancelled"]
    assert len(cancelled) == 1, watch(conn)
    assert cancelled[0]["queue"] == queue
    # never claimed again, even long after any lease or delay would have passed
    for later in (0, 2 * H, 10 * D):
        pin(conn, T0 + later)
        assert claim_ids(conn, queue, 10) == []


def test_CAN_01_cancel_a_scheduled_job(db):
    pin(db, T0)
    add(db, "mail", "{}", id="later", delay="1h")
    assert get(db, "later")["state"] == "scheduled"
    assert cancel(db, "later") == 1
    _assert_gone(db, "later", "mail")


def test_CAN_01_cancel_a_waiting_job(db):
    pin(db, T0)
    add(db, "mail", "{}", id="now")
    assert get(db, "now")["state"] == "waiting"
    assert cancel(db, "now") == 1
    _assert_gone(db, "now", "mail")


def test_CAN_01_cancel_a_running_job_its_worker_learns_it(db, db_path):
    pin(db, T0)
    add(db, "mail", "{}", id="run")
    worker = connect(db_path)
    try:
        pin(worker, T0)
        assert claim_ids(worker, "mail") == [("run", 1)]
        assert one(worker, "SELECT tq_renew('run', 1)") == T0 + LEASE
        assert one(worker, "SELECT tq_step_put('run', 1, 'answer', 'kept')") == "kept"
        assert progress(worker, "run", 1, "half") == 1

        assert cancel(db, "run") == 1                   # the owner cancels, at once
        assert get(db, "run") is None
        before = event_count(db)
        # the worker learns it from every call it makes, and changes nothing
        assert one(worker, "SELECT tq_renew('run', 1)") is None
        assert one(worker, "SELECT tq_renew('run', 1, '10m')") is None
        assert progress(worker, "run", 1, "still going") == 0
        assert one(worker, "SELECT tq_step_put('run', 1, 'more', 'x')") is None
        assert one(worker, "SELECT tq_step_get('run', 'answer')") is None
        assert settle(worker, "run", 1, "done", "sent") == 0
        assert settle(worker, "run", 1, "error", "boom") == 0
        assert get(db, "run") is None
        assert event_count(db) == before
    finally:
        worker.close()
    _assert_gone(db, "run", "mail")


def test_CAN_01_cancel_of_nothing_returns_0(db):
    pin(db, T0)
    assert cancel(db, "never-added") == 0
    add(db, "mail", "{}", id="twice")
    assert cancel(db, "twice") == 1
    assert cancel(db, "twice") == 0
    # done and failed jobs are not cancellable: nothing happens to them
    add(db, "mail", "{}", id="done")
    add(db, "mail", "{}", id="failed")
    claim(db, "mail", "w1", 2)
    settle(db, "done", 1, "done", "ok")
    settle(db, "failed", 1, "fail", "no")
    before = event_count(db)
    assert cancel(db, "done") == 0
    assert cancel(db, "failed") == 0
    assert get(db, "done")["state"] == "done"
    assert get(db, "failed")["state"] == "failed"
    assert event_count(db) == before


def test_CAN_01_a_cancelled_id_can_be_added_again(db):
    pin(db, T0)
    add(db, "mail", json.dumps({"v": 1}), id="again")
    assert cancel(db, "again") == 1
    assert add(db, "mail", json.dumps({"v": 2}), id="again") == "again"
    job = get(db, "again")
    assert job["state"] == "waiting" and job["payload"] == {"v": 2} and job["attempt"] == 0
    assert claim_ids(db, "mail") == [("again", 1)]


def test_CAN_01_cancel_inside_a_rolled_back_transaction_keeps_the_job(db):
    pin(db, T0)
    add(db, "mail", "{}", id="kept")
    db.execute("BEGIN IMMEDIATE")
    assert cancel(db, "kept") == 1
    db.execute("ROLLBACK")
    assert get(db, "kept")["state"] == "waiting"
    assert not [e for e in watch(db) if e["state"] == "cancelled"]
    assert claim_ids(db, "mail") == [("kept", 1)]


def test_retry_brings_a_failed_job_back_with_a_fresh_budget(db):
    pin(db, T0)
    add(db, "mail", "{}", id="f", attempts=2)
    assert claim_ids(db, "mail") == [("f", 1)]
    assert settle(db, "f", 1, "error", "e1") == 1
    assert get(db, "f")["state"] == "scheduled"
    pin(db, T0 + M)
    assert claim_ids(db, "mail") == [("f", 2)]
    assert settle(db, "f", 2, "error", "e2") == 1
    job = get(db, "f")
    assert job["state"] == "failed" and job["error"] == "e2"
    assert claim_ids(db, "mail") == []

    assert retry(db, "f") == 1
    job = get(db, "f")
    assert job["state"] == "waiting"
    assert job["ahead"] == 0
    # two more attempts, numbered on (attempt numbers are never reused)
    assert claim_ids(db, "mail") == [("f", 3)]
    assert settle(db, "f", 3, "error", "e3") == 1
    assert get(db, "f")["state"] == "scheduled", "tq_retry did not give a fresh budget"
    pin(db, T0 + 2 * M)
    assert claim_ids(db, "mail") == [("f", 4)]
    assert settle(db, "f", 4, "error", "e4") == 1
    job = get(db, "f")
    assert job["state"] == "failed" and job["error"] == "e4"
    assert retry(db, "f") == 1
    assert get(db, "f")["state"] == "waiting"


def test_retry_returns_0_when_the_job_is_not_failed(db):
    pin(db, T0)
    assert retry(db, "never-added") == 0
    add(db, "mail", "{}", id="waiting")
    add(db, "mail", "{}", id="scheduled", delay="1h")
    add(db, "mail", "{}", id="running")
    add(db, "mail", "{}", id="done")
    claim(db, "mail", "w1", 3)                 # waiting, running, done (add order)
    settle(db, "waiting", 1, "snooze", "0s")  # back to waiting, not failed
    settle(db, "done", 1, "done")
    before = event_count(db)
    states = {j: get(db, j)["state"] for j in ("waiting", "scheduled", "running", "done")}
    assert states == {"waiting": "waiting", "scheduled": "scheduled", "running": "running",
                      "done": "done"}
    for job_id in states:
        assert retry(db, job_id) == 0, job_id
        assert get(db, job_id)["state"] == states[job_id]
    assert event_count(db) == before


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
        "from conftest import connect\n"
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
from conftest import connect, one, claim
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


# --------------------------------------------------------------------------- ahead

def test_ahead_counts_the_jobs_that_start_before(db):
    pin(db, T0)
    add(db, "q", "{}", id="r", priority=99)
    assert claim_ids(db, "q") == [("r", 1)]           # running: not ahead of anyone
    add(db, "q", "{}", id="a", at=T0 - 1000)
    add(db, "q", "{}", id="b", at=T0 - 500, priority=5)
    add(db, "q", "{}", id="c", at=T0 - 3000)
    add(db, "q", "{}", id="d", at=T0 - 1000)           # same time as a, added after it
    add(db, "q", "{}", id="e", at=T0 - 2000, priority=5)
    add(db, "q", "{}", id="f", at=T0 - 10_000, priority=-1)
    add(db, "elsewhere", "{}", id="x", priority=100)   # another queue: not ahead
    order = ["e", "b", "c", "a", "d", "f"]              # priority, then time, then add order
    for i, job_id in enumerate(order):
        job = get(db, job_id)
        assert job["state"] == "waiting"
        assert job["ahead"] == i, (job_id, job["ahead"], i)
    assert get(db, "b")["run_at"] == T0 - 500
    assert get(db, "x")["ahead"] == 0
    assert get(db, "r").get("ahead") is None
    # the jobs do start in that order, and ahead moves up
    assert claim_ids(db, "q", 2) == [("e", 1), ("b", 1)]
    for i, job_id in enumerate(order[2:]):
        assert get(db, job_id)["ahead"] == i
    assert settle(db, "r", 1, "done") == 1
    # a scheduled job reports no ahead until it is due
    add(db, "q", "{}", id="s", delay="1h", priority=50)
    assert get(db, "s")["state"] == "scheduled"
    assert get(db, "s").get("ahead") is None
    pin(db, T0 + H + S)
    job = get(db, "s")
    assert job["state"] == "waiting" and job["ahead"] == 0
    assert get(db, "c")["ahead"] == 1


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """100,000 waiting jobs in `bulk` (ids b1..b100000, added in that order), plus 5 failed
    `bulk` jobs and a `mail` queue with 50 running, 30 done, 20 failed and 500 waiting."""
    path = str(tmp_path_factory.mktemp("big") / "big.db")
    conn = connect(path)
    pin(conn, T0)
    started = time.perf_counter()
    bulk_add(conn, "mail", 100, id_prefix="m")
    claimed = claim_ids(conn, "mail", 100)
    assert len(claimed) == 100
    settle_all(conn, claimed[:30], "done")
    settle_all(conn, claimed[30:50], "fail", "bounced")
    bulk_add(conn, "mail", 500, id_prefix="mw")
    bulk_add(conn, "bulk", 5, id_prefix="bf", priority=10)
    settle_all(conn, claim_ids(conn, "bulk", 5), "fail", "bad")
    took = bulk_add(conn, "bulk", 100_000, id_prefix="b")
    print(f"\nbig store: 100,000 tq_add in one transaction took {took:.2f}s "
          f"(build {time.perf_counter() - started:.2f}s)")
    yield conn
    conn.close()


def test_ahead_at_100k_waiting_jobs(big_store):
    conn = big_store
    assert get(conn, "b1")["ahead"] == 0
    figures = {}
    for job_id, ahead in (("b1", 0), ("b50000", 49_999), ("b100000", 99_999)):
        fastest, median, text = best_of(7, lambda: one(conn, "SELECT tq_get(?)", job_id))
        job = json.loads(text)
        assert job["state"] == "waiting"
        assert job["ahead"] == ahead, (job_id, job["ahead"])
        figures[job_id] = (fastest, median)
    print("\nahead at 100,000 waiting jobs: tq_get "
          + ", ".join(f"{k} {v[0] * 1000:.2f} ms (median {v[1] * 1000:.2f} ms)"
                      for k, v in figures.items()))


# --------------------------------------------------------------------------- tq_jobs, tq_stats

def test_jobs_lists_every_job_with_its_derived_state(db):
    pin(db, T0)
    add(db, "j", "{}", id="j-scheduled", delay="1h")
    add(db, "j", "{}", id="j-due-soon", delay="10s")
    add(db, "j", "{}", id="j-running")
    add(db, "j", "{}", id="j-done")
    add(db, "j", "{}", id="j-failed")
    add(db, "j", "{}", id="j-waiting")
    add(db, "j", "{}", id="j-cancelled")
    add(db, "k", "{}", id="k-waiting")
    assert [i for i, _ in claim_ids(db, "j", 3)] == ["j-running", "j-done", "j-failed"]
    settle(db, "j-done", 1, "done")
    settle(db, "j-failed", 1, "fail", "no")
    cancel(db, "j-cancelled")
    pin(db, T0 + M)                                     # j-due-soon is due now
    got = {j["id"]: (j["queue"], j["state"]) for j in jobs(db)}
    assert got == {
        "j-scheduled": ("j", "scheduled"),
        "j-due-soon": ("j", "waiting"),
        "j-running": ("j", "running"),
        "j-done": ("j", "done"),
        "j-failed": ("j", "failed"),
        "j-waiting": ("j", "waiting"),
        "k-waiting": ("k", "waiting"),
    }
    assert sorted(j["id"] for j in jobs(db, "WHERE queue = ? AND state = ?", "j", "waiting")) \
        == ["j-due-soon", "j-waiting"]
    assert [j["id"] for j in jobs(db, "WHERE state = ?", "scheduled")] == ["j-scheduled"]
    assert [j["id"] for j in jobs(db, "WHERE queue = ?", "k")] == ["k-waiting"]
    assert jobs(db, "WHERE queue = ? AND state = ?", "j", "cancelled") == []
    assert jobs(db, "WHERE queue = ?", "nope") == []


def test_jobs_filter_by_queue_and_state_beats_a_full_scan_20x(big_store):
    conn = big_store
    total = 100_000 + 5 + 600
    full_best, full_median, n = best_of(
        3, lambda: one(conn, "SELECT count(*) FROM tq_jobs"))
    assert n == total
    sql = "SELECT id, state FROM tq_jobs WHERE queue = ? AND state = ?"
    figures = []
    for queue, state, expect in (("mail", "running", 50), ("bulk", "failed", 5),
                                 ("mail", "failed", 20)):
        best, median, found = best_of(7, lambda: conn.execute(sql, (queue, state)).fetchall())
        assert len(found) == expect and {s for _, s in found} == {state}
        figures.append((queue, state, best, median))
    assert one(conn, "SELECT count(*) FROM tq_jobs WHERE queue = 'bulk' AND state = 'waiting'") \
        == 100_000
    print(f"\ntq_jobs at {total:,} jobs: full count(*) {full_best * 1000:.1f} ms "
          f"(median {full_median * 1000:.1f}); "
          + "; ".join(f"queue={q} state={s}: {b * 1000:.3f} ms (median {m * 1000:.3f}), "
                      f"{full_best / b:.0f}x faster" for q, s, b, m in figures))
    for queue, state, best, _ in figures:
        assert full_best >= 20 * best, \
            f"queue={queue} state={state}: {best * 1000:.2f} ms vs full {full_best * 1000:.2f} ms"


def stats(conn, queue=None):
    if queue is None:
        return rows(conn, "SELECT * FROM tq_stats")
    return rows(conn, "SELECT * FROM tq_stats(?)", queue)


def test_stats_per_queue(db):
    pin(db, T0)
    one(db, "SELECT tq_queue('st', ?)", json.dumps({"rate": "10/1m"}))
    for i in range(6):
        add(db, "st", "{}", id=f"w{i}")
    for i in range(3):
        add(db, "st", "{}", id=f"s{i}", delay="1h")
    add(db, "other", "{}", id="o1")
    assert [i for i, _ in claim_ids(db, "st", 3)] == ["w0", "w1", "w2"]
    settle(db, "w0", 1, "done")
    settle(db, "w1", 1, "fail", "x")
    pin(db, T0 + 4 * S)

    every = stats(db)
    assert sorted(r["queue"] for r in every) == ["other", "st"]
    (st,) = stats(db, "st")
    assert st["queue"] == "st"
    assert (st["scheduled"], st["waiting"], st["running"], st["done"], st["failed"]) \
        == (3, 3, 1, 1, 1), st
    assert st["leases"] == 1, st
    assert st["oldest_waiting_ms"] == 4 * S, st
    assert st["started_in_window"] == 3, st
    (other,) = stats(db, "other")
    assert (other["waiting"], other["running"], other["done"]) == (1, 0, 0)
    assert other["oldest_waiting_ms"] == 4 * S

    # later: the rate window has moved on; the oldest waiting job has waited longer
    pin(db, T0 + 2 * M)
    (st,) = stats(db, "st")
    assert st["started_in_window"] == 0, st
    assert st["oldest_waiting_ms"] == 2 * M, st
    # a queue with nothing waiting has no oldest waiting age
    claim(db, "other")
    (other,) = stats(db, "other")
    assert other["waiting"] == 0 and other["running"] == 1
    assert other["oldest_waiting_ms"] in (None, 0)
    assert stats(db, "nope") == [] or stats(db, "nope")[0]["waiting"] == 0


# --------------------------------------------------------------------------- RET-01 dedupe / keep / sweep

def test_RET_01_a_done_id_adds_nothing_during_dedupe_then_is_free(db):
    pin(db, T0)
    add(db, "r", json.dumps({"v": 1}), id="reply:41")
    claim(db, "r")
    pin(db, T0 + 5 * S)
    assert settle(db, "reply:41", 1, "done", json.dumps({"sent": True})) == 1
    events, count = event_count(db), job_count(db)
    # inside the default 1d window (counted from the settlement): the old job, nothing added
    for at in (T0 + 5 * S + H, T0 + 5 * S + D - M):
        pin(db, at)
        assert add(db, "r", json.dumps({"v": 2}), id="reply:41") == "reply:41"
        job = get(db, "reply:41")
        assert job["state"] == "done" and job["payload"] == {"v": 1}
        assert job["result"] == {"sent": True}
        assert (event_count(db), job_count(db)) == (events, count)
        assert claim_ids(db, "r") == []
    # after it, a new job
    pin(db, T0 + 5 * S + D + M)
    assert add(db, "r", json.dumps({"v": 3}), id="reply:41") == "reply:41"
    job = get(db, "reply:41")
    assert job["state"] == "waiting" and job["payload"] == {"v": 3}
    # (its attempts continue after the old job's: an attempt belongs to one job, JOB-05)
    assert job["result"] is None and job["attempt"] == 1
    assert job_count(db) == count
    assert claim_ids(db, "r") == [("reply:41", 2)]


def test_RET_01_the_queue_dedupe_setting_sets_the_window(db):
    pin(db, T0)
    one(db, "SELECT tq_queue('r10', ?)", json.dumps({"dedupe": "10m"}))
    add(db, "r10", "{}", id="k")
    claim(db, "r10")
    settle(db, "k", 1, "done", "first")
    pin(db, T0 + 9 * M)
    assert add(db, "r10", "{}", id="k") == "k"
    assert get(db, "k")["state"] == "done"
    pin(db, T0 + 11 * M)
    assert add(db, "r10", "{}", id="k") == "k"
    assert get(db, "k")["state"] == "waiting"


def test_RET_01_a_failed_job_is_kept_with_its_error_during_keep_then_freed(db):
    pin(db, T0)
    add(db, "r", json.dumps({"v": 1}), id="bad")
    add(db, "r", json.dumps({"v": 1}), id="bad2")
    claim(db, "r", "w1", 2)
    assert settle(db, "bad", 1, "fail", "the PDF is encrypted") == 1
    assert settle(db, "bad2", 1, "fail", "the PDF is encrypted") == 1
    # kept for the default 7d, with its error; its id adds nothing
    pin(db, T0 + 7 * D - M)
    job = get(db, "bad")
    assert job["state"] == "failed" and job["error"] == "the PDF is encrypted"
    assert add(db, "r", json.dumps({"v": 2}), id="bad") == "bad"
    job = get(db, "bad")
    assert job["state"] == "failed" and job["payload"] == {"v": 1}
    assert sweep_all(db) >= 0 and get(db, "bad")["state"] == "failed"
    # after it, the id is free: adding makes a new job ...
    pin(db, T0 + 7 * D + M)
    assert add(db, "r", json.dumps({"v": 2}), id="bad") == "bad"
    job = get(db, "bad")
    assert job["state"] == "waiting" and job["payload"] == {"v": 2} and job["error"] is None
    # ... and sweeping removes the other one
    assert sweep_all(db) >= 1
    assert get(db, "bad2") is None
    assert get(db, "bad")["state"] == "waiting"


def test_RET_01_sweep_removes_what_is_past_its_window_and_returns_the_count(db):
    pin(db, T0)
    one(db, "SELECT tq_queue('s', ?)", json.dumps({"dedupe": "1h", "keep": "2h"}))
    for i in range(12):
        add(db, "s", "{}", id=f"s{i}")
    claimed = claim_ids(db, "s", 12)
    settle_all(db, claimed[:7], "done")
    settle_all(db, claimed[7:], "fail", "x")          # 5 failed
    for i in range(3):
        add(db, "s", "{}", id=f"live{i}")

    def removed_by(fn):
        jobs_before, events_before = job_count(db), event_count(db)
        returned = fn()
        gone = (jobs_before - job_count(db)) + (events_before - event_count(db))
        return returned, jobs_before - job_count(db), gone

    # nothing is past its window yet
    pin(db, T0 + 30 * M)
    returned, jobs_gone, gone = removed_by(lambda: sweep_all(db))
    assert jobs_gone == 0 and returned == gone
    # past dedupe, not past keep: the 7 done jobs go, in limited sweeps
    pin(db, T0 + 90 * M)
    returned, jobs_gone, gone = removed_by(lambda: sweep(db, 4))
    assert 1 <= returned <= 4 and returned == gone
    returned, jobs_gone, gone = removed_by(lambda: sweep_all(db, 4))
    assert returned == gone
    assert sorted(j["id"] for j in jobs(db, "WHERE queue = 's' AND state = 'done'")) == []
    assert len(jobs(db, "WHERE queue = 's' AND state = 'failed'")) == 5
    assert len(jobs(db, "WHERE queue = 's' AND state = 'waiting'")) == 3
    assert sweep(db) == 0
    # past keep: the failed go too; the waiting jobs stay
    pin(db, T0 + 3 * H)
    returned, jobs_gone, gone = removed_by(lambda: sweep(db))
    assert jobs_gone == 5 and returned == gone
    assert sorted(j["id"] for j in jobs(db)) == ["live0", "live1", "live2"]
    assert sweep(db) == 0


def test_RET_01_claims_also_sweep_a_bounded_amount(db):
    n = 3000
    pin(db, T0)
    one(db, "SELECT tq_queue('cs', ?)", json.dumps({"dedupe": "1m"}))
    bulk_add(db, "cs", n, id_prefix="c")
    for _ in range(n // 1000):
        settle_all(db, claim_ids(db, "cs", 1000), "done")
    assert len(jobs(db, "WHERE queue = 'cs' AND state = 'done'")) == n
    pin(db, T0 + H)
    per_claim = []
    remaining = n
    for _ in range(n + 1):
        assert claim_ids(db, "cs", 10) == []
        now = len(jobs(db, "WHERE queue = 'cs' AND state = 'done'"))
        per_claim.append(remaining - now)
        remaining = now
        if remaining == 0:
            break
    print(f"\nclaims sweep: {n} expired done jobs gone after {len(per_claim)} empty claims; "
          f"first claims removed {per_claim[:5]}")
    # Each claim sweeps one kind of expired row in turn (jobs, events, starts).
    assert sum(per_claim[:3]) > 0, "three claims swept no job"
    assert remaining == 0, "claims alone never emptied the store"


def test_RET_01_an_unattended_store_stays_bounded(db):
    """No one calls tq_sweep: a worker claims 10 at a time (as in the README's example) and settles.
    Each round adds 1,000 jobs and then time moves past every window (dedupe and keep 1m).
    What is left after a round (done jobs and events, as tq_jobs and tq_watch show them)
    must not grow with the number of rounds: claims sweep what the work leaves behind."""
    rounds, per_round, batch = 12, 1000, 10
    pin(db, T0)
    one(db, "SELECT tq_queue('un', ?)", json.dumps({"dedupe": "1m", "keep": "1m"}))
    now = T0
    left = []
    for _ in range(rounds):
        bulk_add(db, "un", per_round)
        while True:
            claimed = claim_ids(db, "un", batch)
            if not claimed:
                break
            for job_id, attempt in claimed:
                assert settle(db, job_id, attempt, "done") == 1
        left.append((len(jobs(db, "WHERE queue = 'un' AND state = 'done'")),
                     len(watch(db, 0, "un"))))
        now += 2 * M
        pin(db, now)
    print(f"\nunattended store, claims of {batch}: (done jobs, events) left after each round of "
          f"{per_round}: {left}")
    made_per_round = per_round * 4            # a job and its 3 events (waiting, running, done)
    for done_left, events_left in left:
        assert done_left + events_left <= 2 * made_per_round, left


def test_RET_01_a_swept_store_keeps_its_live_pages_bounded(db):
    """Rounds of add -> claim -> settle done -> (time passes) -> sweep. The live pages
    (page_count - freelist_count) after each sweep stay where they were after the first."""
    rounds, per_round = 20, 15_000
    pin(db, T0)
    now = T0
    live_after = []
    peak = 0
    started = time.perf_counter()
    for r in range(rounds):
        bulk_add(db, "pg", per_round, payload_bytes=200)
        settled = 0
        while True:
            claimed = claim_ids(db, "pg", 1000)
            if not claimed:
                break
            settle_all(db, claimed, "done", json.dumps({"ok": True}))
            settled += len(claimed)
        assert settled == per_round
        peak = max(peak, one(db, "PRAGMA page_count") - one(db, "PRAGMA freelist_count"))
        now += 30 * D                    # past dedupe, keep and any event window
        pin(db, now)
        sweep_all(db)
        assert job_count(db) == 0
        live_after.append(one(db, "PRAGMA page_count") - one(db, "PRAGMA freelist_count"))
    took = time.perf_counter() - started
    total = rounds * per_round
    print(f"\nswept store: {total:,} jobs in {rounds} rounds in {took:.1f}s; live pages "
          f"before sweeping up to {peak}, after each sweep {live_after}; "
          f"file {one(db, 'PRAGMA page_count')} pages, events left {event_count(db)}")
    assert live_after[-1] <= live_after[0] * 1.5 + 20, live_after
    assert live_after[-1] * 5 < peak, (live_after, peak)
