"""Cancelling a job (CAN-01, tq_cancel): it is gone and its worker learns it; and retrying a
failed one (tq_retry).

Time is pinned with tq_clock wherever it matters.
"""
import json

from helpers import (LEASE, T0, add, cancel, claim, claim_ids, connect, event_count, get, jobs, one, pin,
                     progress, retry, settle, watch)
from helpers import DAY as D, HOUR as H, MIN as M


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
