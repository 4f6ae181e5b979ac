"""JOB-05: an attempt belongs to one job for ever. Once its job is gone (done or failed and
swept, or cancelled) and the id is added again, none of the old attempt's calls (settle,
renew, step_put, progress) acts on the new job, however long the old worker waited:
the new job's attempt numbers continue above every attempt the id (or an id sharing its
slot, docs/design.md "Attempts across jobs of one id") ever had.
"""
import json

import pytest

from helpers import DAY, HOUR, MIN, T0, add, claim, connect, get, one, pin, settle, setq, snapshot
from support.proc_worker import Holder


def stale_calls_change_nothing(db, jid, attempt):
    """Every call a stale worker of (jid, attempt) can make: each returns 'stale' and the
    store is left exactly as it was."""
    before = snapshot(db)
    assert settle(db, jid, attempt, "done", "stale") == 0
    assert settle(db, jid, attempt, "fail", "stale") == 0
    assert one(db, "SELECT tq_renew(?, ?, '1h')", jid, attempt) is None
    assert one(db, "SELECT tq_step_put(?, ?, 'answer', 'stale')", jid, attempt) is None
    assert one(db, "SELECT tq_progress(?, ?, '\"stale\"')", jid, attempt) == 0
    assert snapshot(db) == before


def end_and_forget(db, queue, jid, how, attempt):
    """Ends the job (id, attempt) the way `how` says, and lets tinyq forget it."""
    if how == "done":
        assert settle(db, jid, attempt, "done") == 1
    elif how == "failed":
        assert settle(db, jid, attempt, "fail", "no") == 1
    else:
        assert one(db, "SELECT tq_cancel(?)", jid) == 1
    pin(db, T0 + DAY)  # past dedupe and keep (both 0), and any tombstone's time
    one(db, "SELECT tq_sweep()")
    assert get(db, jid) is None


@pytest.mark.parametrize("how", ["done", "failed", "cancelled"])
def test_JOB_05_an_attempt_of_a_swept_job_cannot_act_on_the_id_added_again(db, how):
    """dedupe 0 frees a done id at once, keep 0 a failed one (and, before schema 6, the
    tombstone of a cancelled one)."""
    pin(db, T0)
    setq(db, "q", dedupe=0, keep=0, lease="1h")
    add(db, "q", id="x")
    (old,) = claim(db, "q", "old-worker")
    assert (old["id"], old["attempt"]) == ("x", 1)
    end_and_forget(db, "q", "x", how, 1)
    assert add(db, "q", '{"new": 1}', id="x") == "x"
    stale_calls_change_nothing(db, "x", 1)  # before the new job is claimed
    (new,) = claim(db, "q", "new-worker")
    assert new["id"] == "x" and new["attempt"] > 1 and json.loads(new["payload"]) == {"new": 1}
    stale_calls_change_nothing(db, "x", 1)  # while it runs
    assert get(db, "x")["state"] == "running"
    assert one(db, "SELECT tq_step_put('x', ?, 'answer', 'new')", new["attempt"]) == "new"
    assert settle(db, "x", new["attempt"], "done") == 1
    assert get(db, "x")["state"] == "done"


def test_JOB_05_an_id_freed_by_its_own_add_continues_its_attempts(db):
    """With dedupe 0 the add itself frees the done id (no sweep needed): the same holds."""
    pin(db, T0)
    setq(db, "q", dedupe=0)
    for round_ in range(3):
        add(db, "q", id="again")
        (job,) = claim(db, "q")
        assert job["attempt"] == round_ + 1
        for stale in range(1, job["attempt"]):
            stale_calls_change_nothing(db, "again", stale)
        assert settle(db, "again", job["attempt"], "done") == 1
        pin(db, T0 + (round_ + 1) * MIN)


def test_JOB_05_attempts_continue_after_retries_of_the_old_job(db):
    """The old job ran three attempts (two lease expiries): the new one starts after all three."""
    pin(db, T0)
    setq(db, "q", dedupe=0, lease="1m")
    add(db, "q", id="r")
    for attempt in (1, 2, 3):
        (job,) = claim(db, "q")
        assert job["attempt"] == attempt
        pin(db, T0 + attempt * HOUR)  # its lease runs out
    assert settle(db, "r", 3, "done") == 1
    pin(db, T0 + DAY)
    add(db, "q", id="r")
    (job,) = claim(db, "q")
    assert job["attempt"] > 3
    for stale in (1, 2, 3):
        stale_calls_change_nothing(db, "r", stale)


def test_JOB_05_first_claims_of_new_ids_are_attempt_1(db):
    """Readable numbers: an id never seen before (generated or chosen, in a fresh store)
    is claimed first as attempt 1; `tries` stays the budget count either way."""
    pin(db, T0)
    setq(db, "q", dedupe=0)
    jobs = [add(db, "q")] + [add(db, "q", id=f"order:{i}") for i in range(50)]
    got = claim(db, "q", n=100)
    assert sorted(j["id"] for j in got) == sorted(jobs)
    assert {j["attempt"] for j in got} == {1}
    for j in got:
        assert settle(db, j["id"], j["attempt"], "done") == 1
    # Generated ids never repeat, so they never continue anyone's numbers.
    pin(db, T0 + DAY)
    one(db, "SELECT tq_sweep()")
    fresh = add(db, "q")
    (job,) = claim(db, "q")
    assert (job["id"], job["attempt"]) == (fresh, 1)


def test_JOB_05_the_budget_counts_tries_not_attempt_numbers(db):
    """A re-added id starts with a fresh budget, whatever its first attempt number is."""
    pin(db, T0)
    setq(db, "q", dedupe=0, keep="1h", lease="1m", attempts=2)
    add(db, "q", id="b")
    (job,) = claim(db, "q")
    assert settle(db, "b", 1, "fail", "gone") == 1
    pin(db, T0 + DAY)
    one(db, "SELECT tq_sweep()")
    add(db, "q", id="b")
    first = claim(db, "q")[0]["attempt"]
    pin(db, T0 + DAY + HOUR)
    second = claim(db, "q")[0]["attempt"]   # the first lease ran out: a second try
    assert second == first + 1
    pin(db, T0 + DAY + 2 * HOUR)
    assert claim(db, "q") == []             # two tries used: failed for good
    job = get(db, "b")
    assert job["state"] == "failed"
    assert job["error"] == "lease expired on attempt 2 of 2: its leases ran out"


def test_JOB_05_a_stale_worker_in_another_process_cannot_settle_the_new_job(db_path):
    """A real second process claims 'x' and keeps (x, 1) while it stalls; its job is
    cancelled and forgotten, the id is added again and claimed here. The stalled process
    then wakes and calls settle, renew, step_put and progress with (x, 1): all stale."""
    db = connect(db_path)
    setq(db, "q", dedupe=0, keep=0, lease="1h")
    add(db, "q", '{"old": 1}', id="x")
    stalled = Holder(db_path, "q", n=1, worker="stalled")
    try:
        assert [(r["id"], r["attempt"]) for r in stalled.rows] == [("x", 1)]
        assert one(db, "SELECT tq_cancel('x')") == 1
        pin(db, int(one(db, "SELECT tq_now()")) + DAY)
        one(db, "SELECT tq_sweep()")
        one(db, "SELECT tq_clock(NULL)")
        add(db, "q", '{"new": 1}', id="x")
        (new,) = claim(db, "q", "fresh")
        assert new["attempt"] > 1
        before = snapshot(db)
        assert stalled.sql("SELECT tq_settle('x', 1, 'done', 'stale')") == 0
        assert stalled.sql("SELECT tq_renew('x', 1, '1h')") is None
        assert stalled.sql("SELECT tq_step_put('x', 1, 'answer', 'stale')") is None
        assert stalled.sql("SELECT tq_progress('x', 1, '99')") == 0
        assert snapshot(db) == before
        assert settle(db, "x", new["attempt"], "done", "fresh") == 1
        assert get(db, "x")["result"] == "fresh"
    finally:
        stalled.exit()
        stalled.close()
    db.close()


def test_JOB_05_marks_are_kept_per_slot_not_per_id(db):
    """The marks are a fixed table of 65536 slots: ids that come and go raise the marks
    of their slots and add no rows of their own, however often they come back."""
    pin(db, T0)
    setq(db, "q", dedupe=0)
    for round_ in range(2):
        db.execute("BEGIN IMMEDIATE")
        db.execute("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000) "
                   "SELECT count(tq_add('q', '{}', json_object('id', 'id-' || i))) FROM c")
        db.execute("COMMIT")
        slots = one(db, "SELECT count(DISTINCT slot) FROM tinyq_jobs")
        assert one(db, "SELECT min(slot) >= 0 AND max(slot) < 65536 FROM tinyq_jobs") == 1
        while True:
            got = claim(db, "q", n=1000)
            if not got:
                break
            for job in got:
                settle(db, job["id"], job["attempt"], "done")
        pin(db, T0 + (round_ + 1) * DAY)
        one(db, "SELECT tq_sweep()")
        assert one(db, "SELECT count(*) FROM tinyq_jobs") == 0
        assert one(db, "SELECT count(*) FROM tinyq_marks") == slots


def late_calls_change_nothing(db, worker, jid, attempt):
    """Every call the late worker (a real process) can make with (jid, attempt): each
    returns 'stale', and the store is left exactly as it was."""
    before = snapshot(db)
    for outcome, value in [("done", '{"late": 1}'), ("wait", '{"after": ["other"]}'),
                           ("wait", '{"signal": "s"}'), ("error", "late"), ("retry", None),
                           ("snooze", "1s"), ("fail", "late")]:
        if value is None:
            assert worker.sql("SELECT tq_settle(?, ?, ?)", jid, attempt, outcome) == 0, outcome
        else:
            assert worker.sql("SELECT tq_settle(?, ?, ?, ?)", jid, attempt, outcome, value) == 0, outcome
    assert worker.sql("SELECT tq_renew(?, ?, '1h')", jid, attempt) is None
    assert worker.sql("SELECT tq_step_put(?, ?, 'answer', 'late')", jid, attempt) is None
    assert worker.sql("SELECT tq_progress(?, ?, '99')", jid, attempt) == 0
    assert snapshot(db) == before


@pytest.mark.parametrize("how", ["last_lease", "lease_past_expires", "expired_in_line"])
def test_JOB_05_a_late_call_of_an_attempt_whose_job_a_claim_ended_changes_nothing(db_path, how):
    """A worker process claims D and stalls; its lease runs out. A claim ends D for good:
    its last attempt's lease ran out (`last_lease`), or it ran out past D's `expires`
    (`lease_past_expires`), or it ran out, D went back in line, and a later claim found D
    past its `expires` (`expired_in_line`). D's dependents followed `after_failed` (one
    failed, one cancelled). The stalled worker then settles D late, any outcome, or renews,
    keeps a step or reports progress: nothing changes, and D stays failed as its
    dependents saw it."""
    db = connect(db_path)
    setq(db, "q", lease="1s")
    if how == "last_lease":
        add(db, "q", id="D", attempts=1)
    else:
        add(db, "q", id="D", expires="30m")
    add(db, "deps", id="F", after=["D"])
    add(db, "deps", id="X", after=["D"], after_failed="cancel")
    add(db, "other", id="other")
    stalled = Holder(db_path, "q", n=1, worker="stalled")
    try:
        assert [(r["id"], r["attempt"]) for r in stalled.rows] == [("D", 1)]
        now = int(one(db, "SELECT tq_now()"))
        if how == "expired_in_line":
            add(db, "q", id="urgent", priority=10)
            pin(db, now + MIN)  # D's lease ran out: this claim puts it back in line, takes 'urgent'
            (urgent,) = claim(db, "q", "w")
            assert urgent["id"] == "urgent" and settle(db, "urgent", urgent["attempt"]) == 1
            assert get(db, "D")["state"] == "waiting"
        pin(db, now + HOUR)
        assert claim(db, "q", "w") == []
        d = get(db, "D")
        expected = "lease expired on attempt 1 of 1: its leases ran out" if how == "last_lease" else "expired"
        assert (d["state"], d["error"]) == ("failed", expected)
        assert get(db, "F")["state"] == "failed" and get(db, "X") is None
        late_calls_change_nothing(db, stalled, "D", 1)
        assert (get(db, "D")["state"], get(db, "D")["error"]) == ("failed", expected)
    finally:
        stalled.exit()
        stalled.close()
    db.close()


def test_JOB_05_a_late_settle_of_a_job_back_in_line_still_counts_from_another_process(db_path):
    """The rule's other half: D's lease ran out and a claim put it back in line (not ended,
    not claimed again): the stalled worker's late `done` counts, and D's dependent runs."""
    db = connect(db_path)
    setq(db, "q", lease="1s")
    add(db, "q", id="D")
    add(db, "deps", id="F", after=["D"])
    stalled = Holder(db_path, "q", n=1, worker="stalled")
    try:
        add(db, "q", id="urgent", priority=10)
        pin(db, int(one(db, "SELECT tq_now()")) + MIN)
        assert [r["id"] for r in claim(db, "q", "w")] == ["urgent"]
        assert get(db, "D")["state"] == "waiting"
        assert stalled.sql("SELECT tq_settle('D', 1, 'done', '{\"late\": 1}')") == 1
        assert (get(db, "D")["state"], get(db, "D")["result"]) == ("done", {"late": 1})
        assert get(db, "F")["state"] == "waiting"
    finally:
        stalled.exit()
        stalled.close()
    db.close()


@pytest.mark.parametrize("outcome,value", [("retry", "0ms"), ("snooze", "0ms"), ("error", "boom")])
def test_JOB_05_a_late_settle_that_leaves_a_job_waiting_keeps_its_timeline(db, outcome, value):
    """D's lease ran out and a claim put it back in line; the stalled worker's late settle
    counts, and leaves D waiting (no backoff): no state changed, so no event is logged, and
    D's timeline (tq_watch's `job`) must still be its own events, whole, with tq_check clean.
    (The late settle once pointed D's timeline at the next event, another job's: D's next
    events then chained into that job's, and tq_check reported the timelines.)"""
    setq(db, "q", lease="1s", backoff="0ms")
    add(db, "q", id="D")
    [(jid, attempt)] = [(r["id"], r["attempt"]) for r in claim(db, "q", "stalled")]
    add(db, "q", id="urgent", priority=10)
    pin(db, int(one(db, "SELECT tq_now()")) + MIN)
    assert [r["id"] for r in claim(db, "q", "w")] == ["urgent"]      # D back in line
    assert get(db, "D")["state"] == "waiting"
    before = [tuple(r) for r in db.execute("SELECT seq, state FROM tq_watch WHERE job = 'D'")]
    assert settle(db, jid, attempt, outcome, value) == 1                 # late, and it counts
    assert get(db, "D")["state"] == "waiting"
    add(db, "q", id="other")                                             # the next event: not D's
    claimed = [r["id"] for r in claim(db, "q", "w2", 2)]
    assert "D" in claimed
    timeline = [tuple(r) for r in db.execute("SELECT seq, state FROM tq_watch WHERE job = 'D'")]
    own = [tuple(r) for r in db.execute("SELECT seq, state FROM tq_watch(0) WHERE id = 'D' ORDER BY seq")]
    assert timeline == own and timeline[:len(before)] == before and timeline[-1][1] == "running", timeline
    assert json.loads(one(db, "SELECT tq_check()")) == [], one(db, "SELECT tq_check()")
