"""EXP-01: a job past its `expires` is never claimed; it ends `failed` with the error
`expired`, exactly once, with its event; between attempts too; a running attempt goes on.

Every test pins the clock (tq_clock) and moves it by hand, except the tq_wait one, which
waits for a condition on the real clock (no timed assertion).
"""
import json
import sqlite3
import time

import pytest

from helpers import (DAY, HOUR, SEC, T0, add, check_buckets, claim, connect, get, ids, one, pin, plain_ahead,
                      renew, settle, setq, snapshot, watch_all)


def events_of(db, job_id):
    return [(e["state"], e["detail"]) for e in watch_all(db) if e["id"] == job_id]


def test_EXP_01_a_job_not_started_by_its_expires_fails_expired_once_and_is_never_claimed(db):
    pin(db, T0)
    add(db, "q", '{"remind": 1}', id="reminder", expires="10s")
    assert get(db, "reminder")["expires"] == T0 + 10 * SEC
    pin(db, T0 + 10 * SEC)  # at the bound: too late
    assert claim(db, "q", n=5) == []
    job = get(db, "reminder")
    assert (job["state"], job["error"], job["attempt"], job["settled_at"]) == ("failed", "expired", 0, T0 + 10 * SEC)
    assert one(db, "SELECT failed FROM tq_stats('q')") == 1
    assert claim(db, "q", n=5) == []
    pin(db, T0 + HOUR)
    assert claim(db, "q", n=5) == []
    assert events_of(db, "reminder") == [("waiting", None), ("failed", "expired")]
    # Kept with its error for the queue's `keep`, like any failed job: its id adds nothing.
    assert add(db, "q", "{}", id="reminder") == "reminder"
    assert get(db, "reminder")["error"] == "expired"


def test_EXP_01_a_job_claimed_before_its_bound_runs_and_jobs_without_one_are_untouched(db):
    pin(db, T0)
    add(db, "q", "{}", id="soon", expires="10s")
    add(db, "q", "{}", id="free")
    pin(db, T0 + 9999)
    assert ids(claim(db, "q", n=1)) == ["soon"]
    pin(db, T0 + DAY)
    assert ids(claim(db, "q", n=1)) == ["free"]


@pytest.mark.parametrize("expires, bound", [
    ("2027-01-15T08:01:00Z", T0 + 60 * SEC),   # a time, as ISO-8601 text
    (T0 + 60 * SEC, T0 + 60 * SEC),            # a time, in ms
    ("1m", T0 + 60 * SEC),                     # a duration from the add
    ("1.5h", T0 + 90 * 60 * SEC),
])
def test_EXP_01_expires_is_a_time_or_a_duration_from_the_add(db, expires, bound):
    pin(db, T0)
    add(db, "q", "{}", id="j", expires=expires)
    assert get(db, "j")["expires"] == bound
    assert one(db, "SELECT json_extract(tq_get('j'), '$.expires')") == bound
    pin(db, bound - 1)
    assert one(db, "SELECT count(*) FROM tq_claim('q', 'w', 1, '{\"lease\": \"1s\"}')") == 1


def test_EXP_01_a_scheduled_job_past_its_bound_never_comes_due(db):
    pin(db, T0)
    add(db, "q", "{}", id="later", delay="1m", expires="2m")
    pin(db, T0 + 3 * 60 * SEC)
    assert claim(db, "q", n=5) == []
    assert get(db, "later")["state"] == "failed"
    # Dated at its bound, and never seen waiting.
    assert [(e["state"], e["at"]) for e in watch_all(db) if e["id"] == "later"] == [
        ("scheduled", T0), ("failed", T0 + 2 * 60 * SEC)]


def test_EXP_01_the_bound_holds_through_retries_and_snoozes(db):
    pin(db, T0)
    setq(db, "q", backoff="1s")
    add(db, "q", "{}", id="j", expires="1m")
    (r,) = claim(db, "q")
    assert settle(db, "j", r["attempt"], "error", "boom") == 1  # back in 1 s: before the bound
    pin(db, T0 + 2 * SEC)
    (r,) = claim(db, "q")
    assert settle(db, "j", r["attempt"], "snooze", "10s") == 1   # back at T0 + 12 s
    pin(db, T0 + 12 * SEC)
    (r,) = claim(db, "q")
    assert r["attempt"] == 3 and get(db, "j")["expires"] == T0 + 60 * SEC
    # A retry that would land past the bound ends the job at once, at the settle.
    assert settle(db, "j", r["attempt"], "retry", "1m") == 1
    job = get(db, "j")
    assert (job["state"], job["error"], job["settled_at"]) == ("failed", "expired", T0 + 12 * SEC)
    assert [s for s, _ in events_of(db, "j")].count("failed") == 1


@pytest.mark.parametrize("outcome, value", [("error", "boom"), ("retry", None), ("snooze", "1m")])
def test_EXP_01_an_attempt_that_would_run_again_past_the_bound_ends_the_job_expired(db, outcome, value):
    pin(db, T0)
    setq(db, "q", backoff="1m")
    add(db, "q", "{}", id="j", expires="30s")
    (r,) = claim(db, "q")
    assert settle(db, "j", r["attempt"], outcome, value) == 1
    assert (get(db, "j")["state"], get(db, "j")["error"]) == ("failed", "expired")
    assert events_of(db, "j")[-1] == ("failed", "expired")
    pin(db, T0 + DAY)
    assert claim(db, "q") == []


def test_EXP_01_a_running_attempt_is_not_interrupted(db):
    pin(db, T0)
    add(db, "q", "{}", id="j", expires="10s")
    (r,) = claim(db, "q", options={"lease": "1m"})
    pin(db, T0 + 30 * SEC)  # past the bound, while it runs
    assert claim(db, "q") == []
    assert get(db, "j")["state"] == "running"
    assert renew(db, "j", r["attempt"]) is not None
    one(db, "SELECT tq_step_put('j', ?, 's', 'kept')", r["attempt"])
    assert settle(db, "j", r["attempt"], "done", '{"ok": 1}') == 1
    assert (get(db, "j")["state"], get(db, "j")["result"]) == ("done", {"ok": 1})


def test_EXP_01_a_lease_that_ran_out_past_the_bound_ends_the_job_and_its_late_settle_changes_nothing(db):
    """The claim that finds the lease ran out finds the job past its bound: failed, expired,
    for good; the attempt that held it can no longer settle it (JOB-05: ended is final)."""
    pin(db, T0)
    add(db, "q", "{}", id="j", expires="10s")
    (r,) = claim(db, "q", options={"lease": "5s"})
    pin(db, T0 + 20 * SEC)
    assert claim(db, "q") == []
    assert (get(db, "j")["state"], get(db, "j")["error"]) == ("failed", "expired")
    before = snapshot(db)
    assert settle(db, "j", r["attempt"], "done") == 0
    assert snapshot(db) == before
    assert (get(db, "j")["state"], get(db, "j")["error"]) == ("failed", "expired")


def test_EXP_01_a_lease_that_ran_out_before_the_bound_puts_the_job_back_in_line(db):
    pin(db, T0)
    add(db, "q", "{}", id="j", expires="1m")
    claim(db, "q", options={"lease": "5s"})
    pin(db, T0 + 10 * SEC)
    (r,) = claim(db, "q")
    assert (r["id"], r["attempt"]) == ("j", 2)


def test_EXP_01_many_jobs_expire_in_one_claim_each_once_and_the_line_stays_counted(db):
    """A line over 1024 jobs (cut into buckets for `ahead`), some of them grouped in a queue
    with group limits: those past their bound end in one claim; the counts, the buckets and
    the group heads match the rows after it, and `ahead` matches a plain count."""
    pin(db, T0)
    setq(db, "q", group_concurrency=1)
    db.execute("BEGIN IMMEDIATE")
    one(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000)"
            " SELECT count(tq_add('q', json_object('i', i), json_object('id', 'j' || i, 'priority', i % 3,"
            " 'group', CASE WHEN i % 5 = 0 THEN 'g' || (i % 2) END,"
            " 'expires', CASE WHEN i % 2 = 0 THEN '10s' ELSE '1d' END))) FROM c")
    db.execute("COMMIT")
    check_buckets(db)
    pin(db, T0 + 10 * SEC)
    rows = claim(db, "q", n=10)
    taken = ids(rows)
    assert all(int(t[1:]) % 2 == 1 for t in taken), taken
    for r in rows:
        settle(db, r["id"], r["attempt"])
    assert one(db, "SELECT count(*) FROM tq_jobs WHERE state = 'failed'") == 1500
    assert one(db, "SELECT count(*) FROM tinyq_events WHERE state = 'failed' AND detail = 'expired'") == 1500
    assert db.execute("SELECT waiting, done, failed FROM tq_stats('q')").fetchone() == (1490, 10, 1500)
    check_buckets(db)
    for job_id in ("j1", "j1501", "j2999", "j15"):
        if get(db, job_id)["state"] == "waiting":
            assert get(db, job_id)["ahead"] == plain_ahead(db, job_id), job_id
    # The rest run, each once, the groups one job at a time.
    while True:
        rows = claim(db, "q", n=1000)
        if not rows:
            break
        taken += ids(rows)
        for r in rows:
            settle(db, r["id"], r["attempt"])
    assert sorted(taken) == sorted(f"j{i}" for i in range(1, 3001, 2))
    check_buckets(db)


def test_EXP_01_grouped_heads_that_expire_hand_over_to_the_next_job_of_their_group(db):
    pin(db, T0)
    setq(db, "q", group_concurrency=1)
    add(db, "q", "{}", id="a1", group="a", expires="10s")
    add(db, "q", "{}", id="a2", group="a")
    assert ids(claim(db, "q", n=1, options={"lease": "1s"})) == ["a1"]
    assert settle(db, "a1", 1, "snooze", "5s") == 1  # a1 waits until T0 + 5 s
    pin(db, T0 + 20 * SEC)
    # a1 is past its bound: it ends, and a2, its group's next job, starts.
    assert ids(claim(db, "q", n=5)) == ["a2"]
    assert get(db, "a1")["error"] == "expired"


def test_EXP_01_retry_of_an_expired_job_runs_it(db):
    pin(db, T0)
    add(db, "q", "{}", id="j", expires="10s")
    pin(db, T0 + HOUR)
    claim(db, "q")
    assert one(db, "SELECT tq_retry('j')") == 1
    assert get(db, "j")["expires"] is None  # its bound had passed: the retry drops it
    assert ids(claim(db, "q")) == ["j"]
    # A bound still ahead stays through a retry.
    add(db, "q", "{}", id="k", expires="1d")
    (r,) = claim(db, "q")
    settle(db, "k", r["attempt"], "fail", "no")
    assert one(db, "SELECT tq_retry('k')") == 1
    assert get(db, "k")["expires"] == T0 + HOUR + DAY


def test_EXP_01_watchers_in_another_process_see_the_expiry(db, db_path):
    pin(db, T0)
    add(db, "q", "{}", id="j", expires="1s")
    other = connect(db_path)
    since = one(other, "SELECT max(seq) FROM tq_watch(0)")
    pin(db, T0 + 2 * SEC)
    claim(db, "q")
    got = other.execute("SELECT id, state, detail FROM tq_watch(?)", (since,)).fetchall()
    assert got == [("j", "failed", "expired")]
    other.close()


def test_EXP_01_a_waiting_worker_wakes_when_a_job_reaches_its_bound(db_path):
    """tq_wait returns 1 (not 0 at its timeout) once a job it cannot claim reaches its bound,
    so that the worker's next claim ends it then."""
    db = connect(db_path)
    setq(db, "q", concurrency=1)
    add(db, "q", "{}", id="busy")
    claim(db, "q", options={"lease": "1h"})           # the queue is full: nothing claimable
    add(db, "q", "{}", id="j", expires="300ms")
    assert one(db, "SELECT tq_wait('q', '30s')") == 1
    assert claim(db, "q") == []
    assert (get(db, "j")["state"], get(db, "j")["error"]) == ("failed", "expired")
    db.close()


@pytest.mark.parametrize("options, message", [
    ({"expires": "soon"}, "tq_add: option \"expires\": 'soon' is neither a time"),
    ({"expires": "-5s"}, "tq_add: option \"expires\": '-5s' is neither a time"),
    ({"expires": True}, "tq_add: option \"expires\" must not be a boolean"),
    ({"expires": "0s"}, "tq_add: option \"expires\" (%d) is not after the job's time (%d): it could never start" % (T0, T0)),
    ({"expires": 60000}, "tq_add: option \"expires\" (60000) is not after the job's time"),
    ({"expires": "1m", "delay": "2m"}, "tq_add: option \"expires\" (%d) is not after the job's time (%d)"
     % (T0 + 60 * SEC, T0 + 120 * SEC)),
    ({"expires": "2027-01-15T07:00:00Z"}, "tq_add: option \"expires\" (%d) is not after" % (T0 - HOUR)),
])
def test_EXP_01_ERR_01_a_bad_expires_is_an_error_naming_it_and_changes_nothing(db, options, message):
    pin(db, T0)
    add(db, "q", "{}", id="before")
    before = snapshot(db)
    with pytest.raises(sqlite3.OperationalError) as e:
        add(db, "q", "{}", id="j", **options)
    assert str(e.value).startswith(message), str(e.value)
    assert snapshot(db) == before


def test_EXP_01_tq_get_shows_expires_null_without_one(db):
    pin(db, T0)
    add(db, "q", "{}", id="j")
    assert "expires" in get(db, "j") and get(db, "j")["expires"] is None
    assert json.loads(one(db, "SELECT tq_get('j')"))["expires"] is None


@pytest.mark.parametrize("on", ["after", "signal", "signal_with_a_later_timeout"])
def test_EXP_01_a_blocked_job_expires_at_its_bound(db, on):
    """A job blocked on a dependency that never finishes, or on a signal that never comes
    (with no timeout, or one after the bound), ends `failed`/`expired` at its bound, once:
    the first claim of its queue from then ends it, its dependents
    follow `after_failed`, its dependency is let go, and a late signal or dependency
    changes nothing."""
    pin(db, T0)
    add(db, "slow", "{}", id="dep")  # nobody works this queue: it never finishes
    if on == "after":
        add(db, "q", "{}", id="j", expires="10s", after=["dep"])
    else:
        add(db, "q", "{}", id="j", expires="10s")
        (r,) = claim(db, "q")
        wait = {"signal": "s"} if on == "signal" else {"signal": "s", "timeout": "1h"}
        assert settle(db, "j", r["attempt"], "wait", json.dumps(wait)) == 1
    add(db, "next", "{}", id="k", after=["j"])
    add(db, "next", "{}", id="c", after=["j"], after_failed="cancel")
    assert get(db, "j")["state"] == "blocked"
    pin(db, T0 + 9 * SEC)
    assert claim(db, "q") == [] and get(db, "j")["state"] == "blocked"
    pin(db, T0 + 10 * SEC)
    assert claim(db, "q") == []
    job = get(db, "j")
    assert (job["state"], job["error"], job["settled_at"]) == ("failed", "expired", T0 + 10 * SEC)
    assert (get(db, "k")["state"], get(db, "k")["error"]) == ("failed", "dependency 'j' failed: expired")
    assert get(db, "c") is None
    stats = db.execute("SELECT blocked, failed FROM tq_stats('q')").fetchone()
    assert tuple(stats) == (0, 1)
    pin(db, T0 + 2 * HOUR)  # past the timeout too
    assert claim(db, "q") == []
    one(db, "SELECT tq_signal('s')")
    (d,) = claim(db, "slow")
    assert settle(db, "dep", d["attempt"]) == 1
    assert claim(db, "q") == []
    assert (get(db, "j")["state"], get(db, "j")["error"]) == ("failed", "expired")
    assert [e for e in events_of(db, "j") if e[0] == "failed"] == [("failed", "expired")]
    assert one(db, "SELECT count(*) FROM tinyq_deps d JOIN tinyq_jobs j ON j.seq = d.dep"
                   " WHERE j.id = 'dep' AND d.resolved IS NOT 2") == 0  # 'dep' is no longer held by 'j'


def test_EXP_01_a_waiter_wakes_at_the_bound_of_a_job_blocked_on_after(db_path):
    """A queue whose only job is blocked on `after` with an `expires` is not idle: tq_wait
    wakes at the bound (returns 1 well before its own timeout), and the claim then ends it."""
    conn = connect(db_path)
    add(conn, "slow", "{}", id="dep")
    add(conn, "q", "{}", id="j", expires="1s", after=["dep"])
    started = time.monotonic()
    assert one(conn, "SELECT tq_wait('q', '60s')") == 1
    assert time.monotonic() - started < 45
    assert claim(conn, "q") == []
    assert (get(conn, "j")["state"], get(conn, "j")["error"]) == ("failed", "expired")
