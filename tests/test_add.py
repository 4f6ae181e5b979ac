"""Adding and reading jobs (tq_add, tq_get), the order they start in (JOB-01), and an add
that commits or rolls back with the caller's transaction, triggers included (JOB-02).

Time is pinned with tq_clock wherever possible, so nothing here depends on sleeping.
"""
import sqlite3

import pytest

from helpers import (EXT, DAY, GENERATED_ID, MIN, SEC, T0, add, claim, claim_one, connect, get, ids, one, pin,
                     snapshot)


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


def test_JOB_02_a_writer_without_tinyq_cannot_insert_into_a_table_with_a_tq_add_trigger(db, db_path):
    """docs/reference.md, "Enqueue from a trigger": a connection without tinyq loaded (a
    migration tool, the plain shell) fails the INSERT and writes nothing, so no row is ever
    committed without its job; UPDATE, DELETE and ALTER TABLE are left alone (the trigger
    fires on INSERT only); once it loads tinyq the INSERT adds the job."""
    db.executescript(ORDERS_SCHEMA)
    plain = sqlite3.connect(db_path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such function: tq_add"):
            plain.execute("INSERT INTO orders VALUES (1, 'book')")
        assert one(plain, "SELECT count(*) FROM orders") == 0
        db.execute("INSERT INTO orders VALUES (2, 'lamp')")
        plain.execute("UPDATE orders SET item = 'lamps' WHERE id = 2")
        plain.execute("ALTER TABLE orders ADD COLUMN note TEXT")
        plain.execute("DELETE FROM orders WHERE id = 2")
        plain.enable_load_extension(True)
        plain.load_extension(EXT)
        plain.execute("INSERT INTO orders (id, item) VALUES (3, 'pen')")
    finally:
        plain.close()
    assert get(db, "ship:1") is None
    assert get(db, "ship:3")["state"] == "waiting"
