"""Settling an attempt (tq_settle): done, error, and snooze / retry / fail (JOB-08), and the
backoff between attempts (JOB-07).

Time is pinned with tq_clock wherever possible, so nothing here depends on sleeping.
"""
import pytest

from helpers import DAY, SEC, T0, add, claim, claim_one, get, pin, settle
from helpers import setq as set_queue


# ---------------------------------------------------------------- settle outcomes, JOB-08

@pytest.mark.parametrize("value,shown", [
    (('{"sent": true}',), {"sent": True}),
    (("ok",), "ok"),
    ((7,), 7),
    ((), None),
])
def test_settle_done_keeps_result(db, value, shown):
    pin(db, T0)
    jid = add(db, "d")
    claim_one(db, "d")
    pin(db, T0 + 3 * SEC)
    assert settle(db, jid, 1, "done", *value) == 1
    job = get(db, jid)
    assert job["state"] == "done"
    assert job["result"] == shown
    assert job["lease_until"] is None
    settled = [k for k in job if k.startswith("settled")]
    assert settled and job[settled[0]] == T0 + 3 * SEC, f"tq_get has a settled time: {job}"
    assert claim(db, "d") == []


def test_settle_error_retries_until_budget_then_fails_with_that_error(db):
    pin(db, T0)
    set_queue(db, "e", attempts=2)
    jid = add(db, "e")
    claim_one(db, "e")
    assert settle(db, jid, 1, "error", "first boom") == 1
    job = get(db, jid)
    assert job["state"] == "scheduled"
    assert job["error"] == "first boom"
    pin(db, job["run_at"])
    assert claim_one(db, "e")["attempt"] == 2
    assert settle(db, jid, 2, "error", "second boom") == 1
    job = get(db, jid)
    assert job["state"] == "failed"
    assert job["error"] == "second boom"
    pin(db, T0 + DAY)
    assert claim(db, "e") == []


def test_JOB_08_snooze_does_not_use_budget(db):
    pin(db, T0)
    set_queue(db, "sn", attempts=2)
    jid = add(db, "sn")
    now = T0
    for attempt in range(1, 8):
        row = claim_one(db, "sn")
        assert row["attempt"] == attempt, "every claim is a new attempt number"
        assert settle(db, jid, attempt, "snooze", "10s") == 1
        job = get(db, jid)
        assert job["state"] == "scheduled"
        assert job["run_at"] == now + 10 * SEC
        assert claim(db, "sn") == []
        now += 10 * SEC
        pin(db, now)
    # the budget of 2 is untouched: two more charged attempts are allowed
    assert claim_one(db, "sn")["attempt"] == 8
    assert settle(db, jid, 8, "retry", "1s") == 1
    assert get(db, jid)["state"] == "scheduled"
    pin(db, now + SEC)
    assert claim_one(db, "sn")["attempt"] == 9
    assert settle(db, jid, 9, "retry", "1s") == 1
    assert get(db, jid)["state"] == "failed", "retry counts: the budget of 2 is spent"


def test_JOB_08_retry_uses_budget_and_waits_the_given_delay(db):
    pin(db, T0)
    set_queue(db, "rt", attempts=3)
    jid = add(db, "rt")
    for attempt, now in ((1, T0), (2, T0 + 5 * SEC)):
        pin(db, now)
        assert claim_one(db, "rt")["attempt"] == attempt
        assert settle(db, jid, attempt, "retry", "5s") == 1
        job = get(db, jid)
        assert job["state"] == "scheduled" and job["run_at"] == now + 5 * SEC
    pin(db, T0 + 10 * SEC)
    claim_one(db, "rt")
    assert settle(db, jid, 3, "retry", "5s") == 1
    assert get(db, jid)["state"] == "failed"


def test_JOB_08_retry_without_delay_waits_the_backoff(db):
    pin(db, T0)
    set_queue(db, "rb", backoff="10s")
    jid = add(db, "rb")
    claim_one(db, "rb")
    assert settle(db, jid, 1, "retry") == 1
    assert T0 + 9 * SEC <= get(db, jid)["run_at"] <= T0 + 11 * SEC


def test_JOB_08_fail_ends_the_job_now_with_budget_left(db):
    pin(db, T0)
    jid = add(db, "fl")          # default budget 20
    claim_one(db, "fl")
    assert settle(db, jid, 1, "fail", "bad payload") == 1
    job = get(db, jid)
    assert job["state"] == "failed"
    assert job["error"] == "bad payload"
    pin(db, T0 + 30 * DAY - 1)
    assert claim(db, "fl", "w", 10) == []


# ---------------------------------------------------------------- JOB-07

def test_JOB_07_backoff_doubles_from_backoff_and_is_capped_with_jitter(db):
    pin(db, T0)
    set_queue(db, "bo", backoff="1s", backoff_max="5s", attempts=10)
    jid = add(db, "bo")
    now = T0
    for attempt, base in enumerate([1000, 2000, 4000, 5000, 5000, 5000], start=1):
        row = claim_one(db, "bo")
        assert row["attempt"] == attempt
        assert settle(db, jid, attempt, "error", f"boom {attempt}") == 1
        job = get(db, jid)
        delay = job["run_at"] - now
        assert base * 0.9 <= delay <= base * 1.1, f"attempt {attempt}: delay {delay}, base {base}"
        assert job["state"] == "scheduled"
        pin(db, job["run_at"] - 1)
        assert claim(db, "bo") == []
        now = job["run_at"]
        pin(db, now)


def test_JOB_07_default_backoff_starts_at_one_second(db):
    pin(db, T0)
    jid = add(db, "dflt")
    claim_one(db, "dflt")
    settle(db, jid, 1, "error", "boom")
    assert T0 + 900 <= get(db, jid)["run_at"] <= T0 + 1100


def test_JOB_07_backoff_counts_attempts_whose_lease_ran_out(db):
    pin(db, T0)
    set_queue(db, "bl", lease="1s", backoff="10s")
    jid = add(db, "bl")
    claim_one(db, "bl")
    pin(db, T0 + 2 * SEC)
    assert claim_one(db, "bl")["attempt"] == 2
    settle(db, jid, 2, "error", "boom")
    delay = get(db, jid)["run_at"] - (T0 + 2 * SEC)
    assert 18 * SEC <= delay <= 22 * SEC, "second charged attempt: backoff * 2"


def test_JOB_07_a_thousand_jobs_failing_together_are_spread(db):
    pin(db, T0)
    set_queue(db, "herd", backoff="1s")
    db.execute("BEGIN IMMEDIATE")
    for k in range(1000):
        add(db, "herd", f'{{"k": {k}}}')
    db.execute("COMMIT")
    rows = claim(db, "herd", "w", 1000)
    assert len(rows) == 1000
    db.execute("BEGIN IMMEDIATE")
    for r in rows:
        assert settle(db, r["id"], r["attempt"], "error", "upstream down") == 1
    db.execute("COMMIT")
    run_at = [get(db, r["id"])["run_at"] for r in rows]
    assert all(T0 + 900 <= t <= T0 + 1100 for t in run_at), (min(run_at), max(run_at))
    assert len(set(run_at)) >= 100, f"only {len(set(run_at))} distinct retry times"
    assert max(run_at) - min(run_at) >= 150
    # not all due in the same instant: a claim at the earliest time takes only a few
    pin(db, min(run_at))
    assert len(claim(db, "herd", "w", 1000)) < 50
