"""Claims and leases: the attempt is counted at claim (JOB-03), a lease ends by itself
(JOB-04), renewals and attempt timeouts (tq_renew), and fencing: a stale attempt changes
nothing (JOB-05).

Time is pinned with tq_clock wherever possible, so nothing here depends on sleeping.
"""
import json
import time

import pytest

from helpers import (HOUR, MIN, SEC, T0, add, bulk_add, check_buckets, claim, claim_one, get, one, pin, plain_ahead,
                     renew, run_python, settle, snapshot)
from helpers import setq as set_queue


# ---------------------------------------------------------------- JOB-03

def test_JOB_03_attempt_counted_at_claim_and_expired_leases_exhaust_budget(db):
    pin(db, T0)
    set_queue(db, "crashy", lease="1s", attempts=3)
    jid = add(db, "crashy", id="doomed")
    now = T0
    for attempt in (1, 2, 3):
        row = claim_one(db, "crashy", f"w{attempt}")
        assert row["id"] == jid and row["attempt"] == attempt
        job = get(db, jid)
        assert job["attempt"] == attempt, "the attempt is counted when claimed"
        assert job["state"] == "running"
        now += 2 * SEC          # the worker "dies": its lease runs out
        pin(db, now)
    assert claim(db, "crashy", "w4", 10) == []
    job = get(db, jid)
    assert job["state"] == "failed"
    assert job["attempt"] == 3
    assert "leases ran out" in job["error"], job["error"]
    assert "attempt 3 of 3" in job["error"], "design.md: lease expired on attempt N of M"
    pin(db, now + HOUR)
    assert claim(db, "crashy", "w5", 10) == []


def test_JOB_03_per_job_attempts_option_overrides_queue_budget(db):
    pin(db, T0)
    set_queue(db, "crashy", lease="1s", attempts=10)
    jid = add(db, "crashy", attempts=2)
    claim_one(db, "crashy")
    pin(db, T0 + 2 * SEC)
    assert claim_one(db, "crashy")["attempt"] == 2
    pin(db, T0 + 4 * SEC)
    assert claim(db, "crashy") == []
    assert get(db, jid)["state"] == "failed"
    assert "leases ran out" in get(db, jid)["error"]


CRASHING_WORKER = r"""
import json, os, signal, sys, time
from helpers import connect, claim
db = connect(sys.argv[1])
deadline = time.time() + 30
while True:
    rows = claim(db, "crash", "pid-%d" % os.getpid(), 1)
    if rows:
        break
    if time.time() > deadline:
        print("null", flush=True)
        sys.exit(3)
    time.sleep(0.05)
print(json.dumps(rows[0]), flush=True)
os.kill(os.getpid(), signal.SIGKILL)      # dies holding the lease, every time
"""


def test_JOB_03_worker_process_killed_every_time_reaches_budget_and_fails(db, db_path):
    set_queue(db, "crash", lease="500ms", attempts=3)
    jid = add(db, "crash", '{"poison": true}', id="poison")
    for attempt in (1, 2, 3):
        proc = run_python(CRASHING_WORKER, db_path)
        assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)
        row = json.loads(proc.stdout.strip())
        assert row["id"] == jid and row["attempt"] == attempt
    deadline = time.time() + 30
    while get(db, jid)["state"] != "failed" and time.time() < deadline:
        assert claim(db, "crash", "parent", 10) == [], "a 4th attempt exceeds the budget of 3"
        time.sleep(0.05)
    job = get(db, jid)
    assert job["state"] == "failed"
    assert job["attempt"] == 3
    assert "leases ran out" in job["error"], job["error"]


# ---------------------------------------------------------------- JOB-04

def test_JOB_04_lease_ends_by_itself_and_job_is_claimed_as_next_attempt(db):
    pin(db, T0)
    jid = add(db, "l", id="lease-me")
    r1 = claim_one(db, "l", "w1", {"lease": "5s"})
    assert r1["attempt"] == 1
    assert r1["lease_until"] == T0 + 5 * SEC
    assert r1["deadline"] == T0 + HOUR, "deadline is claim time + the default 1h timeout"
    job = get(db, jid)
    assert job["state"] == "running"
    assert job["worker"] == "w1"
    assert job["lease_until"] == T0 + 5 * SEC
    assert job.get("ahead") is None

    pin(db, T0 + 5 * SEC - 1)
    assert claim(db, "l", "w2") == [], "a live lease is not taken"
    pin(db, T0 + 5 * SEC + 1)
    r2 = claim_one(db, "l", "w2")
    assert r2["id"] == jid
    assert r2["attempt"] == 2
    assert r2["lease_until"] == T0 + 5 * SEC + 1 + 30 * SEC, "default lease is 30s"
    job = get(db, jid)
    assert job["worker"] == "w2" and job["attempt"] == 2 and job["state"] == "running"


def test_JOB_04_expired_job_keeps_its_place_in_line(db):
    pin(db, T0)
    add(db, "line", id="first")
    add(db, "line", id="second")
    assert claim_one(db, "line", "w1", {"lease": "1s"})["id"] == "first"
    pin(db, T0 + 2 * SEC)
    again = claim_one(db, "line", "w2")
    assert (again["id"], again["attempt"]) == ("first", 2)


def test_claim_uses_queue_lease_and_caps_it_at_the_timeout(db):
    pin(db, T0)
    set_queue(db, "ql", lease="2m", timeout="10m")
    add(db, "ql", id="a")
    add(db, "ql", id="b")
    ra = claim_one(db, "ql")
    assert ra["lease_until"] == T0 + 2 * MIN
    assert ra["deadline"] == T0 + 10 * MIN
    rb = claim_one(db, "ql", "w1", {"lease": "1h"})
    assert rb["lease_until"] == T0 + 10 * MIN, "a lease never extends past the deadline"


def test_claim_returns_documented_columns_and_at_most_n(db):
    pin(db, T0)
    for k in range(5):
        add(db, "cols", f'{{"k": {k}}}')
    rows = claim(db, "cols", "w", 3)
    assert len(rows) == 3
    assert list(rows[0]) == ["id", "attempt", "payload", "group_key", "lease_until", "deadline"]
    assert len(claim(db, "cols", "w", 10)) == 2
    assert claim(db, "cols", "w", 10) == []
    assert claim(db, "never-used-queue", "w", 10) == []


def test_claim_rolls_back_with_the_callers_transaction(db):
    pin(db, T0)
    jid = add(db, "txc")
    db.execute("BEGIN IMMEDIATE")
    assert claim_one(db, "txc")["attempt"] == 1
    db.execute("ROLLBACK")
    assert get(db, jid)["state"] == "waiting"
    assert claim_one(db, "txc")["attempt"] == 1, "the rolled back claim left no trace"


# ---------------------------------------------------------------- tq_renew

def test_renew_extends_lease_from_now_and_keeps_others_out(db):
    pin(db, T0)
    set_queue(db, "rn", lease="10s")
    jid = add(db, "rn")
    claim_one(db, "rn")
    pin(db, T0 + 4 * SEC)
    assert renew(db, jid, 1) == T0 + 14 * SEC
    assert get(db, jid)["lease_until"] == T0 + 14 * SEC
    pin(db, T0 + 12 * SEC)
    assert claim(db, "rn", "w2") == [], "the renewed lease still holds"
    assert renew(db, jid, 1, "1m") == T0 + 12 * SEC + MIN
    pin(db, T0 + 13 * SEC)
    assert renew(db, jid, 1, 120000) == T0 + 13 * SEC + 2 * MIN, "lease given as integer ms"
    assert settle(db, jid, 1, "done") == 1
    assert renew(db, jid, 1) is None, "nothing to renew once settled"
    assert renew(db, "no-such-job", 1) is None


def test_timeout_caps_renewals_and_renew_returns_null_past_it(db):
    pin(db, T0)
    set_queue(db, "to", lease="4s", timeout="10s")
    jid = add(db, "to")
    row = claim_one(db, "to")
    assert row["deadline"] == T0 + 10 * SEC
    assert row["lease_until"] == T0 + 4 * SEC
    pin(db, T0 + 3 * SEC)
    assert renew(db, jid, 1) == T0 + 7 * SEC
    pin(db, T0 + 8 * SEC)
    assert renew(db, jid, 1) == T0 + 10 * SEC, "never past the deadline"
    pin(db, T0 + 10 * SEC + 1)
    assert renew(db, jid, 1) is None


def test_timeout_without_budget_fails_the_job_with_error_timeout(db):
    pin(db, T0)
    set_queue(db, "to1", lease="1h", timeout="5s", attempts=1)
    jid = add(db, "to1")
    claim_one(db, "to1")
    pin(db, T0 + 5 * SEC + 1)
    assert claim(db, "to1") == []
    job = get(db, jid)
    assert job["state"] == "failed"
    assert "timeout" in job["error"]


def test_timeout_with_budget_left_retries_after_backoff_not_at_once(db):
    pin(db, T0)
    set_queue(db, "to3", lease="1h", timeout="5s", attempts=3, backoff="1s")
    jid = add(db, "to3")
    claim_one(db, "to3")
    now = T0 + 5 * SEC + 1
    pin(db, now)
    assert claim(db, "to3") == [], "a timed-out attempt is an error: it waits for its backoff"
    job = get(db, jid)
    assert job["state"] == "scheduled"
    assert now + 900 <= job["run_at"] <= now + 1100
    pin(db, job["run_at"])
    assert claim_one(db, "to3")["attempt"] == 2


# ---------------------------------------------------------------- JOB-05

def test_JOB_05_stale_attempt_changes_nothing_after_a_later_claim(db):
    pin(db, T0)
    jid = add(db, "f", id="fenced")
    claim_one(db, "f", "old", {"lease": "1s"})
    pin(db, T0 + 2 * SEC)
    assert claim_one(db, "f", "new")["attempt"] == 2
    before = snapshot(db)
    for outcome, value in (("done", "r"), ("error", "boom"), ("retry", "1s"),
                           ("snooze", "1s"), ("fail", "no")):
        assert settle(db, jid, 1, outcome, value) == 0, outcome
    assert renew(db, jid, 1) is None
    assert one(db, "SELECT tq_step_put(?, 1, 'answer', 'stale')", jid) is None
    assert one(db, "SELECT tq_progress(?, 1, '50%')", jid) == 0
    assert snapshot(db) == before, "a stale attempt changed the store"
    job = get(db, jid)
    assert job["state"] == "running" and job["worker"] == "new" and job["attempt"] == 2
    assert one(db, "SELECT tq_step_get(?, 'answer')", jid) is None
    assert settle(db, jid, 2, "done", "fresh") == 1
    assert get(db, jid)["result"] == "fresh"


def test_JOB_05_settled_attempt_cannot_settle_again(db):
    pin(db, T0)
    jid = add(db, "f")
    claim_one(db, "f")
    assert settle(db, jid, 1, "done", "first") == 1
    before = snapshot(db)
    assert settle(db, jid, 1, "fail", "second") == 0
    assert settle(db, jid, 1, "done", "third") == 0
    assert snapshot(db) == before
    assert get(db, jid)["result"] == "first"


def test_JOB_05_late_settle_after_lease_ran_out_still_counts_when_unclaimed(db):
    pin(db, T0)
    jid = add(db, "late", id="slow")
    claim_one(db, "late", "w1", {"lease": "1s"})
    pin(db, T0 + 10 * SEC)
    assert settle(db, jid, 1, "done", '{"ok": 1}') == 1
    job = get(db, jid)
    assert job["state"] == "done"
    assert job["result"] == {"ok": 1}
    assert claim(db, "late") == []


def test_JOB_05_late_settle_counts_even_after_a_claim_reaped_but_did_not_take_it(db):
    pin(db, T0)
    jid = add(db, "late", id="slow")
    claim_one(db, "late", "w1", {"lease": "1s"})
    add(db, "late", id="urgent", priority=10)
    pin(db, T0 + 10 * SEC)
    assert claim_one(db, "late", "w2")["id"] == "urgent"   # reaps 'slow', does not claim it
    assert settle(db, jid, 1, "error", "late failure") == 1
    job = get(db, jid)
    assert job["state"] == "scheduled"
    assert job["error"] == "late failure"


@pytest.mark.parametrize("line", ["short", "long", "grouped"])
def test_JOB_05_a_late_done_of_a_job_back_in_line_takes_it_out_of_the_line(db, line):
    # The job's lease ran out and a claim put it back in line, at its old place (the front);
    # its worker's late `done` still counts, and the job leaves the line as a claim would
    # have taken it: the counts, a long line's buckets, `ahead` and its group's turn.
    pin(db, T0)
    if line == "grouped":
        set_queue(db, "late", group_concurrency=1)
    opts = {"group": "g"} if line == "grouped" else {}
    jid = add(db, "late", id="slow", **opts)
    claim_one(db, "late", "w1", {"lease": "1s"})
    add(db, "late", id="urgent", priority=10)
    add(db, "late", id="behind")
    if line == "long":
        bulk_add(db, "late", 1100)
    if line == "grouped":
        add(db, "late", id="next", group="g")
    pin(db, T0 + 10 * SEC)
    assert claim_one(db, "late", "w2")["id"] == "urgent"   # reaps 'slow', does not claim it
    assert get(db, jid)["state"] == "waiting"
    waiting = one(db, "SELECT waiting FROM tq_stats('late')")
    assert settle(db, jid, 1, "done", '{"late": 1}') == 1
    assert (get(db, jid)["state"], get(db, jid)["result"]) == ("done", {"late": 1})
    assert one(db, "SELECT waiting FROM tq_stats('late')") == waiting - 1
    check_buckets(db)
    last = one(db, "SELECT id FROM tinyq_jobs WHERE queue = 'late' AND status = 'queued' ORDER BY seq DESC LIMIT 1")
    assert get(db, last)["ahead"] == plain_ahead(db, last)
    if line == "grouped":
        assert {r["id"] for r in claim(db, "late", "w3", 5)} == {"behind", "next"}  # the group's next gets its turn


def test_JOB_05_a_job_failed_by_its_leases_is_final_for_its_late_worker(db):
    # The last attempt's lease runs out: the claim that finds it fails the job for good
    # (and its dependents follow). Ended is final: that attempt's late settlement, whatever
    # the outcome, changes nothing, and the job is never claimed again.
    pin(db, T0)
    jid = add(db, "late", id="slow", attempts=1)
    claim_one(db, "late", "w1", {"lease": "1s"})
    pin(db, T0 + 10 * SEC)
    assert claim(db, "late") == []                          # reaps it: failed, no attempts left
    assert get(db, jid)["state"] == "failed"
    assert get(db, jid)["lease_until"] is None
    before = snapshot(db)
    for outcome, value in [("snooze", "1s"), ("done", None), ("error", "late"), ("wait", '{"signal": "s"}')]:
        assert settle(db, jid, 1, outcome, value) == 0, outcome
    assert snapshot(db) == before
    pin(db, T0 + 12 * SEC)
    assert claim(db, "late") == []
    assert "leases ran out" in get(db, jid)["error"]


def test_JOB_05_cancelled_job_fences_its_attempt(db):
    pin(db, T0)
    jid = add(db, "c")
    claim_one(db, "c")
    assert one(db, "SELECT tq_cancel(?)", jid) == 1
    before = snapshot(db)
    assert renew(db, jid, 1) is None
    assert settle(db, jid, 1, "done") == 0
    assert snapshot(db) == before
    assert get(db, jid) is None


def test_settle_unknown_job_returns_zero(db):
    add(db, "q", id="x")
    before = snapshot(db)
    assert settle(db, "nope", 1, "done") == 0
    assert snapshot(db) == before


def test_settle_and_renew_of_a_never_claimed_job_change_nothing(db):
    pin(db, T0)
    jid = add(db, "q")
    before = snapshot(db)
    assert settle(db, jid, 1, "done") == 0
    assert renew(db, jid, 1) is None
    assert snapshot(db) == before
    assert claim_one(db, "q")["attempt"] == 1
