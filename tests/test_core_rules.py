"""Core lifecycle: tq_add, tq_get, tq_claim, tq_renew, tq_settle, tq_queue, the clock.

Rules covered here (docs/guarantees.md): JOB-01, JOB-02, JOB-03, JOB-04, JOB-05, JOB-07,
JOB-08, DUR-01, REP-01, plus concurrent claiming by two worker processes.
Time is pinned with tq_clock wherever possible, so nothing here depends on sleeping.
"""
import json
import os
import re
import shutil
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import (DAY, HOUR, MIN, ROOT, SEC, T0, add, claim, connect, get, ids, one, pin, renew, run_python,
                      settle, snapshot)
from conftest import setq as set_queue

T0_ISO = "2027-01-15T08:00:00Z"

GENERATED_ID = re.compile(r"tq_[0-9A-HJKMNP-TV-Z]{26}")


# ---------------------------------------------------------------- helpers

def read_queue(conn, name):
    text = one(conn, "SELECT tq_queue(?)", name)
    return None if text is None else json.loads(text)


def tinyq_tables(conn):
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE name LIKE 'tinyq%'")]


def claim_one(conn, queue, worker="w1", options=None):
    rows = claim(conn, queue, worker, 1, options)
    assert len(rows) == 1, f"expected one claimable job in {queue!r}, got {rows}"
    return rows[0]


# ---------------------------------------------------------------- clock, version, debug

def test_clock_pins_now_for_this_connection_only_and_null_unpins(db, db_path):
    before = int(time.time() * 1000)
    now = one(db, "SELECT tq_now()")
    after = int(time.time() * 1000)
    assert isinstance(now, int)
    assert before - 1000 <= now <= after + 1000, "unpinned tq_now() must follow the system clock"

    pin(db, T0)
    assert one(db, "SELECT tq_now()") == T0
    assert one(db, "SELECT tq_now()") == T0, "a pinned clock does not move"

    other = connect(db_path)
    try:
        assert abs(one(other, "SELECT tq_now()") - time.time() * 1000) < 5000, \
            "pinning is per connection"
    finally:
        other.close()

    pin(db, T0 + 5 * SEC)
    assert one(db, "SELECT tq_now()") == T0 + 5 * SEC

    pin(db, None)
    assert abs(one(db, "SELECT tq_now()") - time.time() * 1000) < 5000, "tq_clock(NULL) unpins"


@pytest.mark.parametrize("text,ms", [
    (T0_ISO, T0),
    ("2027-01-15T08:00:00.250Z", T0 + 250),
    ("2027-01-15T10:00:00+02:00", T0),
    ("2026-11-29T12:00:00Z", 1_795_953_600_000),
])
def test_clock_accepts_iso_8601_text(db, text, ms):
    pin(db, text)
    assert one(db, "SELECT tq_now()") == ms


def test_version_and_debug_describe_the_build(db):
    cargo = open(os.path.join(ROOT, "Cargo.toml")).read()
    version = re.search(r'^version\s*=\s*"([^"]+)"', cargo, re.M).group(1)
    v = one(db, "SELECT tq_version()")
    assert isinstance(v, str) and version in v
    d = one(db, "SELECT tq_debug()")
    assert isinstance(d, str)
    assert version in d
    assert one(db, "SELECT sqlite_version()") in d, "tq_debug names the SQLite version"
    assert "schema" in d.lower(), "tq_debug names the schema version"


def test_loading_and_reading_functions_create_no_store(db):
    assert one(db, "SELECT tq_version()")
    assert one(db, "SELECT tq_debug()")
    assert one(db, "SELECT tq_now()")
    pin(db, T0)
    assert one(db, "SELECT tq_get('nope')") is None
    one(db, "SELECT tq_queue('q')")
    assert tinyq_tables(db) == []
    add(db, "q")
    assert "tinyq_jobs" in tinyq_tables(db)


def test_queue_read_on_database_without_store_shows_defaults(db):
    """docs/design.md: reading tq_queue on a database without a store returns the
    effective (default) settings and creates nothing."""
    settings = json.loads(one(db, "SELECT tq_queue('q')"))
    assert settings["queue"] == "q" and settings["lease"] == 30000 and settings["attempts"] == 20
    assert tinyq_tables(db) == []


# ---------------------------------------------------------------- tq_add / tq_get

def test_add_without_id_generates_distinct_reserved_ids_that_sort_by_creation(db):
    pin(db, T0)
    same_ms = [add(db, "gen") for _ in range(200)]
    assert all(GENERATED_ID.fullmatch(i) for i in same_ms), same_ms[:3]
    assert len(set(same_ms)) == 200, "generated ids never repeat, even in the same millisecond"
    later = []
    for k in range(1, 6):
        pin(db, T0 + k * 1000)
        later.append(add(db, "gen"))
    pin(db, T0 + 400 * DAY)
    later.append(add(db, "gen"))
    assert later == sorted(later), "generated ids sort by creation time"
    assert all(i > max(same_ms) for i in later)


def test_add_with_chosen_id_returns_it_and_get_shows_the_job(db):
    pin(db, T0)
    assert add(db, "replies", '{"messageId": 41}', id="reply:41") == "reply:41"
    job = get(db, "reply:41")
    for key in ("id", "queue", "state", "group", "priority", "attempt", "run_at",
                "lease_until", "worker", "payload", "result", "error", "progress", "ahead"):
        assert key in job, f"tq_get lacks {key!r}: {job}"
    assert job["id"] == "reply:41"
    assert job["queue"] == "replies"
    assert job["state"] == "waiting"
    assert job["group"] is None
    assert job["priority"] == 0
    assert job["attempt"] in (0, None)
    assert job["run_at"] == T0
    assert job["lease_until"] is None
    assert job["worker"] is None
    assert job["payload"] == {"messageId": 41}
    assert job["result"] is None and job["error"] is None and job["progress"] is None
    assert job["ahead"] == 0
    created = [k for k in job if k.startswith("created")]
    assert created and job[created[0]] == T0, f"tq_get has a created time: {job}"


def test_get_of_unknown_id_is_null(db):
    add(db, "q", id="known")
    assert one(db, "SELECT tq_get('unknown')") is None


def test_add_same_id_again_adds_nothing_and_returns_the_id(db):
    pin(db, T0)
    assert add(db, "q", '{"v": 1}', id="once") == "once"
    before = snapshot(db)
    assert add(db, "q", '{"v": 2}', id="once", priority=9) == "once"
    assert get(db, "once")["payload"] == {"v": 1}
    assert get(db, "once")["priority"] == 0
    assert snapshot(db) == before
    assert ids(claim(db, "q", "w1", 10)) == ["once"]


@pytest.mark.parametrize("payload,claimed,shown", [
    ('{"a": 1}', '{"a": 1}', {"a": 1}),
    ('{ "spaced" :  [1, 2] }', '{ "spaced" :  [1, 2] }', {"spaced": [1, 2]}),
    ("hello world", "hello world", "hello world"),
    ("[1,2,3]", "[1,2,3]", [1, 2, 3]),
    (42, 42, 42),
    (1.5, 1.5, 1.5),
    ("{}", "{}", {}),
])
def test_payload_is_claimed_exactly_as_stored_and_shown_as_json(db, payload, claimed, shown):
    jid = one(db, "SELECT tq_add('p', ?)", payload)
    assert get(db, jid)["payload"] == shown
    row = claim_one(db, "p")
    assert row["payload"] == claimed
    assert type(row["payload"]) is type(claimed)


def test_add_group_priority_and_at_are_shown(db):
    pin(db, T0)
    add(db, "q", id="g", group="tenant-7", priority=-4, at=T0 - 5 * SEC)
    job = get(db, "g")
    assert job["group"] == "tenant-7"
    assert job["priority"] == -4
    assert job["run_at"] == T0 - 5 * SEC
    row = claim_one(db, "q")
    assert row["group_key"] == "tenant-7"


@pytest.mark.parametrize("opts,run_at", [
    ({"delay": 1500}, T0 + 1500),
    ({"delay": "500ms"}, T0 + 500),
    ({"delay": "30s"}, T0 + 30 * SEC),
    ({"delay": "10m"}, T0 + 10 * MIN),
    ({"delay": "1.5h"}, T0 + 90 * MIN),
    ({"delay": "7d"}, T0 + 7 * DAY),
    ({"delay": 0}, T0),
    ({"at": T0 + 1234}, T0 + 1234),
    ({"at": "2027-01-15T08:01:00Z"}, T0 + MIN),
    ({"at": "2027-01-15T07:59:00Z"}, T0 - MIN),
])
def test_add_at_and_delay_set_run_at(db, opts, run_at):
    pin(db, T0)
    jid = add(db, "sched", **opts)
    job = get(db, jid)
    assert job["run_at"] == run_at
    assert job["state"] == ("scheduled" if run_at > T0 else "waiting")


def test_scheduled_job_waits_for_its_time_then_is_claimable(db):
    pin(db, T0)
    jid = add(db, "s", delay="10s")
    job = get(db, jid)
    assert job["state"] == "scheduled"
    assert job.get("ahead") is None, "ahead is only given while waiting"
    assert claim(db, "s") == []
    pin(db, T0 + 10 * SEC - 1)
    assert claim(db, "s") == []
    pin(db, T0 + 10 * SEC)
    assert get(db, jid)["state"] == "waiting"
    assert get(db, jid)["ahead"] == 0
    assert claim_one(db, "s")["id"] == jid


# ---------------------------------------------------------------- JOB-01

def test_JOB_01_order_priority_then_time_then_add_order(db):
    pin(db, T0)
    add(db, "q", id="low-old", priority=0, at=T0 - 50 * SEC)
    add(db, "q", id="mid-late", priority=5, at=T0 - 1 * SEC)
    add(db, "q", id="high", priority=10, at=T0 - 1 * SEC)
    add(db, "q", id="mid-early", priority=5, at=T0 - 20 * SEC)
    add(db, "q", id="mid-same-1", priority=5, at=T0 - 10 * SEC)
    add(db, "q", id="mid-same-2", priority=5, at=T0 - 10 * SEC)
    add(db, "q", id="neg", priority=-3, at=T0 - 100 * SEC)
    add(db, "q", id="now-0")
    add(db, "q", id="future", priority=100, delay="1s")
    add(db, "other", id="elsewhere", priority=1000)
    expected = ["high", "mid-early", "mid-same-1", "mid-same-2", "mid-late",
                "low-old", "now-0", "neg"]

    for position, jid in enumerate(expected):
        assert get(db, jid)["ahead"] == position, jid

    first = claim(db, "q", "w1", 3)
    assert ids(first) == expected[:3]
    # jobs already running are not ahead of anyone any more
    assert get(db, "mid-same-2")["ahead"] == 0
    assert get(db, "low-old")["ahead"] == 2
    assert get(db, "high").get("ahead") is None
    rest = claim(db, "q", "w2", 100)
    assert ids(rest) == expected[3:]
    assert "future" not in ids(first + rest)
    assert "elsewhere" not in ids(first + rest)


def test_JOB_01_same_time_same_priority_follows_add_order(db):
    pin(db, T0)
    added = [add(db, "fifo", id=f"job-{k:03d}") for k in (5, 3, 9, 1, 7, 2, 8, 0, 6, 4)]
    got = []
    for n in (1, 2, 3, 4):
        got += ids(claim(db, "fifo", "w", n))
    assert got == added


# ---------------------------------------------------------------- JOB-02

def test_JOB_02_add_rolls_back_and_commits_with_the_transaction(db):
    pin(db, T0)
    db.execute("BEGIN")
    add(db, "tx", id="rolled-back")
    assert get(db, "rolled-back")["state"] == "waiting", "visible inside its transaction"
    db.execute("ROLLBACK")
    assert get(db, "rolled-back") is None
    # the store must still work after the rollback that took its creation with it
    db.execute("BEGIN IMMEDIATE")
    add(db, "tx", id="committed")
    db.execute("COMMIT")
    assert get(db, "committed")["state"] == "waiting"
    assert ids(claim(db, "tx", "w", 10)) == ["committed"]


def test_JOB_02_add_follows_savepoint_rollback(db):
    add(db, "tx", id="kept")
    db.execute("BEGIN")
    db.execute("SAVEPOINT s1")
    add(db, "tx", id="undone")
    db.execute("ROLLBACK TO s1")
    db.execute("RELEASE s1")
    add(db, "tx", id="kept-2")
    db.execute("COMMIT")
    assert get(db, "undone") is None
    assert ids(claim(db, "tx", "w", 10)) == ["kept", "kept-2"]


ORDERS_SCHEMA = """
    PRAGMA trusted_schema = ON;
    CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT NOT NULL);
    CREATE TRIGGER orders_ship AFTER INSERT ON orders BEGIN
        SELECT tq_add('ship', json_object('order', NEW.id), json_object('id', 'ship:' || NEW.id));
    END;
"""


@pytest.mark.parametrize("store_exists", [True, False], ids=["store-exists", "first-use"])
def test_JOB_02_trigger_add_commits_or_rolls_back_with_the_row(db, db_path, store_exists):
    if store_exists:
        add(db, "warmup", id="warm")
    db.executescript(ORDERS_SCHEMA)

    db.execute("BEGIN")
    db.execute("INSERT INTO orders VALUES (1, 'book')")
    db.execute("ROLLBACK")
    assert one(db, "SELECT count(*) FROM orders") == 0
    assert get(db, "ship:1") is None

    db.execute("BEGIN")
    db.execute("INSERT INTO orders VALUES (2, 'lamp')")
    db.execute("COMMIT")
    job = get(db, "ship:2")
    assert job is not None and job["payload"] == {"order": 2}

    # autocommit insert, trigger fires
    db.execute("INSERT INTO orders VALUES (3, 'pen')")
    assert get(db, "ship:3")["state"] == "waiting"

    # a statement that fails after the trigger ran for its first row rolls the job back too
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("INSERT INTO orders VALUES (4, 'cup'), (5, NULL)")
    assert one(db, "SELECT count(*) FROM orders WHERE id = 4") == 0
    assert get(db, "ship:4") is None

    other = connect(db_path)
    try:
        assert ids(claim(other, "ship", "w", 10)) == ["ship:2", "ship:3"]
    finally:
        other.close()


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
from conftest import connect, claim
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


def test_JOB_05_late_snooze_of_a_job_failed_by_its_leases_runs_again_with_working_leases(db):
    # The last attempt's lease runs out: the job fails for good, but that attempt's late
    # settlement still counts. A snooze puts it back; its next lease must run out as any.
    pin(db, T0)
    jid = add(db, "late", id="slow", attempts=1)
    claim_one(db, "late", "w1", {"lease": "1s"})
    pin(db, T0 + 10 * SEC)
    assert claim(db, "late") == []                          # reaps it: failed, no attempts left
    assert get(db, jid)["state"] == "failed"
    assert settle(db, jid, 1, "snooze", "1s") == 1           # the late worker snoozes it
    pin(db, T0 + 12 * SEC)
    again = claim_one(db, "late", "w2", {"lease": "1s"})
    assert (again["id"], again["attempt"]) == (jid, 2)
    stats = one(db, "SELECT json_object('running', running, 'leases', leases) FROM tq_stats('late')")
    assert json.loads(stats) == {"running": 1, "leases": 1}
    pin(db, T0 + 20 * SEC)                                   # its lease ran out: reaped again
    assert claim(db, "late") == []
    assert get(db, jid)["state"] == "failed"
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


# ---------------------------------------------------------------- tq_queue settings

DEFAULTS = {
    "lease": 30 * SEC, "timeout": HOUR, "attempts": 20, "backoff": SEC,
    "backoff_max": HOUR, "paused": False, "dedupe": DAY, "keep": 7 * DAY,
}
NONE_BY_DEFAULT = ("concurrency", "rate", "group_concurrency", "group_rate")


def test_queue_reads_defaults(db):
    add(db, "dq")
    settings = read_queue(db, "dq")
    for key, value in DEFAULTS.items():
        assert settings[key] == value, key
    for key in NONE_BY_DEFAULT:
        assert settings.get(key) is None, key


def test_queue_read_of_unused_queue_gives_defaults_and_changes_nothing(db):
    add(db, "used")
    before = snapshot(db)
    settings = read_queue(db, "unused")
    for key, value in DEFAULTS.items():
        assert settings[key] == value, key
    assert snapshot(db) == before


def test_queue_set_returns_effective_settings_persisted_and_partial(db, db_path):
    got = set_queue(db, "cfg", lease="2m", attempts=5)
    assert got["lease"] == 2 * MIN and got["attempts"] == 5
    assert got["timeout"] == HOUR and got["backoff"] == SEC and got["paused"] is False
    got = set_queue(db, "cfg", timeout="90s", backoff="250ms", backoff_max="1m", paused=True)
    assert got["lease"] == 2 * MIN and got["attempts"] == 5, "an update keeps other settings"
    assert got["timeout"] == 90 * SEC
    assert got["backoff"] == 250 and got["backoff_max"] == MIN and got["paused"] is True
    other = connect(db_path)
    try:
        assert read_queue(other, "cfg") == got
    finally:
        other.close()
    assert read_queue(db, "cfg") == got
    assert read_queue(db, "another")["lease"] == 30 * SEC, "settings are per queue"


@pytest.mark.parametrize("text,ms", [
    ("500ms", 500), ("30s", 30 * SEC), ("10m", 10 * MIN), ("1.5h", 90 * MIN),
    ("7d", 7 * DAY), (2500, 2500), ("0.5s", 500),
])
def test_queue_durations_accept_units_and_report_ms(db, text, ms):
    assert set_queue(db, "units", lease=text)["lease"] == ms
    assert read_queue(db, "units")["lease"] == ms


def test_queue_paused_jobs_are_not_claimed(db):
    pin(db, T0)
    jid = add(db, "pz")
    assert set_queue(db, "pz", paused=True)["paused"] is True
    assert claim(db, "pz", "w", 10) == []
    assert get(db, jid)["state"] == "waiting"
    add(db, "pz", id="added-while-paused")
    assert claim(db, "pz", "w", 10) == []
    set_queue(db, "pz", paused=False)
    assert ids(claim(db, "pz", "w", 10)) == [jid, "added-while-paused"]


def test_queue_settings_apply_to_claims_and_budget(db):
    pin(db, T0)
    set_queue(db, "eff", lease="45s", timeout="2m", attempts=1)
    jid = add(db, "eff")
    row = claim_one(db, "eff")
    assert row["lease_until"] == T0 + 45 * SEC
    assert row["deadline"] == T0 + 2 * MIN
    assert settle(db, jid, 1, "error", "only once") == 1
    assert get(db, jid)["state"] == "failed"


# ---------------------------------------------------------------- DUR-01

ADD_AND_DIE = r"""
import os, signal, sys
from conftest import connect, one
db = connect(sys.argv[1])
print(one(db, "SELECT tq_add('durable', '{\"n\": 1}', '{\"id\": \"survivor\"}')"), flush=True)
print(one(db, "SELECT tq_add('durable', '{\"n\": 2}')"), flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
os._exit(0)                     # no close, no cleanup
"""

CLAIM_ALL = r"""
import json, sys
from conftest import connect, claim, one
db = connect(sys.argv[1])
rows = claim(db, "durable", "fresh-process", 10)
for r in rows:
    assert one(db, "SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"]) == 1
print(json.dumps(rows))
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_DUR_01_committed_job_survives_its_process_and_runs_in_another(db_path, how):
    proc = run_python(ADD_AND_DIE, db_path, how)
    assert proc.returncode == (-9 if how == "kill" else 0), proc.stderr
    added = proc.stdout.split()
    assert added[0] == "survivor" and GENERATED_ID.fullmatch(added[1])
    proc = run_python(CLAIM_ALL, db_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert ids(rows) == added
    assert rows[0]["payload"] == '{"n": 1}'
    assert all(r["attempt"] == 1 for r in rows)
    conn = connect(db_path)
    try:
        assert get(conn, "survivor")["state"] == "done"
    finally:
        conn.close()


# ---------------------------------------------------------------- concurrent workers

POOL_WORKER = r"""
import json, random, sys, time
from conftest import connect, claim, one
db = connect(sys.argv[1], busy_ms=30000)
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.002)
got = []
while True:
    rows = claim(db, "pool", sys.argv[3], random.randint(1, 4), {"lease": "10m"})
    if not rows:
        break
    for r in rows:
        got.append([r["id"], r["attempt"]])
        time.sleep(0.002)                                # the "work", outside any transaction
        ok = one(db, "SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"])
        if ok != 1:
            raise SystemExit("settle returned %r for %r" % (ok, r))
print(json.dumps(got))
"""


def test_two_worker_processes_never_claim_the_same_job_and_claim_all(db, db_path):
    db.execute("BEGIN IMMEDIATE")
    all_ids = [add(db, "pool", f'{{"k": {k}}}') for k in range(400)]
    db.execute("COMMIT")
    start = time.time() + 1.5
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(run_python, POOL_WORKER, db_path, str(start), f"w{k}", timeout=120)
                   for k in (1, 2)]
        procs = [f.result() for f in futures]
    claimed = []
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
        claimed.append(json.loads(proc.stdout))
    first, second = ({tuple(x) for x in c} for c in claimed)
    assert not ({i for i, _ in first} & {i for i, _ in second}), "a job was claimed twice"
    together = [i for c in claimed for i, _ in c]
    assert sorted(together) == sorted(all_ids), "every job claimed exactly once"
    assert all(a == 1 for c in claimed for _, a in c)
    assert all(get(db, i)["state"] == "done" for i in all_ids)


# ---------------------------------------------------------------- REP-01

SCENARIO = r'''
import json, sqlite3

def scenario(conn, t0):
    """A fixed statement sequence; every result (or error text) is returned."""
    out = []
    def run(sql, *args):
        try:
            rows = conn.execute(sql, args).fetchall()
            out.append(("ok", sql, rows))
            return rows
        except sqlite3.Error as e:
            out.append(("error", sql, str(e)))
            return None
    def val(sql, *args):
        rows = run(sql, *args)
        return rows[0][0] if rows else None

    run("SELECT tq_clock(?)", t0)
    run("SELECT tq_queue('r', ?)", json.dumps({"lease": "10s", "attempts": 3, "timeout": "1m"}))
    gen = [val("SELECT tq_add('r', ?)", json.dumps({"n": k})) for k in range(12)]
    val("SELECT tq_add('r', '{}', ?)", json.dumps({"id": "chosen", "priority": 5}))
    val("SELECT tq_add('r', '{}', ?)", json.dumps({"delay": "3s", "group": "g1"}))
    val("SELECT tq_add('r', NULL)")                           # an error, on both
    val("SELECT tq_add('other', 'x', ?)", json.dumps({"delay": "5s"}))
    rows = run("SELECT * FROM tq_claim('r', 'w1', 8)") or []
    for i, r in enumerate(rows):
        if i % 4 == 0:
            val("SELECT tq_settle(?, ?, 'error', 'boom')", r[0], r[1])
        elif i % 4 == 1:
            val("SELECT tq_settle(?, ?, 'retry')", r[0], r[1])
        elif i % 4 == 2:
            val("SELECT tq_settle(?, ?, 'snooze', '2s')", r[0], r[1])
        # i % 4 == 3: left to run out
    run("SELECT tq_clock(?)", t0 + 1500)
    if len(rows) > 3:
        val("SELECT tq_renew(?, ?)", rows[3][0], rows[3][1])
    run("SELECT tq_clock(?)", t0 + 30000)
    more = run("SELECT * FROM tq_claim('r', 'w2', 20)") or []
    for i, r in enumerate(more):
        if i % 3 == 0:
            val("SELECT tq_settle(?, ?, 'done', ?)", r[0], r[1], json.dumps({"i": i}))
        elif i % 3 == 1:
            val("SELECT tq_settle(?, ?, 'error', 'again')", r[0], r[1])
        else:
            val("SELECT tq_settle(?, ?, 'fail', 'give up')", r[0], r[1])
    gen += [val("SELECT tq_add('r', ?)", json.dumps({"late": k})) for k in range(3)]
    run("SELECT tq_clock(?)", t0 + 3600000)
    run("SELECT * FROM tq_claim('r', 'w3', 50)")
    for i in gen:
        run("SELECT tq_get(?)", i)
    return out
'''

SCENARIO_IN_PROCESS = r'''
import json, sys
from conftest import connect, snapshot
exec(sys.argv[3])
conn = connect(sys.argv[1])
out = scenario(conn, int(sys.argv[2]))
print(json.dumps({"out": out, "tables": snapshot(conn)}, default=repr))
'''

_scenario_ns = {}
exec(SCENARIO, _scenario_ns)
scenario = _scenario_ns["scenario"]


def _normalize(snap):
    return json.loads(json.dumps(snap, default=repr))


def _assert_same_tables(a, b):
    assert set(a) == set(b)
    for table in a:
        assert a[table] == b[table], f"{table} differs between the two stores"


def test_REP_01_same_statements_on_two_fresh_stores_leave_identical_tables(tmp_path):
    a = connect(str(tmp_path / "a.db"))
    b = connect(str(tmp_path / "b.db"))
    try:
        out_a = scenario(a, T0)
        out_b = scenario(b, T0)
        assert [o for o in out_a if o[0] == "error"], "the scenario includes an error"
        assert out_a == out_b
        snap_a, snap_b = snapshot(a), snapshot(b)
        assert snap_a["tinyq_jobs"], "the scenario left jobs"
        _assert_same_tables(snap_a, snap_b)
    finally:
        a.close()
        b.close()


def test_REP_01_same_statements_on_two_copies_of_a_store_leave_identical_tables(tmp_path):
    origin = str(tmp_path / "origin.db")
    conn = connect(origin)
    pin(conn, T0 - DAY)
    for k in range(5):
        add(conn, "r", f'{{"old": {k}}}')
    for r in claim(conn, "r", "w0", 2):
        settle(conn, r["id"], r["attempt"], "error", "old boom")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    shutil.copy(origin, tmp_path / "c1.db")
    shutil.copy(origin, tmp_path / "c2.db")
    c1, c2 = connect(str(tmp_path / "c1.db")), connect(str(tmp_path / "c2.db"))
    try:
        assert scenario(c1, T0) == scenario(c2, T0)
        _assert_same_tables(snapshot(c1), snapshot(c2))
    finally:
        c1.close()
        c2.close()


def test_REP_01_two_processes_replaying_the_same_statements_end_identical(tmp_path):
    """As on a statement-replicated engine: each node runs the statements in its own process."""
    results = []
    for name in ("node1.db", "node2.db"):
        proc = run_python(SCENARIO_IN_PROCESS, str(tmp_path / name), str(T0), SCENARIO)
        assert proc.returncode == 0, proc.stderr
        results.append(json.loads(proc.stdout))
    assert results[0]["out"] == results[1]["out"]
    _assert_same_tables(results[0]["tables"], results[1]["tables"])
