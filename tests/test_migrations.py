"""A store written by an older tinyq is migrated forward on first write, keeping its jobs.

The old store is built from the old schema script itself (tests/fixtures/v1_store.sql, v2_store.sql ...)
with rows as that tinyq wrote them, without the extension; then the current build opens it.
"""
import json
import os
import sqlite3

import pytest

from helpers import ROOT, check_buckets, claim, connect, get, one, plain_ahead, trigger_order

NOW = 1_900_000_000_000
CURRENT = 9  # the schema version this build creates
DAY = 86_400_000


def v1_store(path, version=1):
    """A store as tinyq `version` left it (the job rows are the same in versions 1 to 3)."""
    db = sqlite3.connect(path, isolation_level=None)
    with open(os.path.join(ROOT, "tests", "fixtures", f"v{version}_store.sql")) as f:
        db.executescript(f.read())
    db.execute("INSERT INTO tinyq_meta VALUES ('schema_version', ?)", (version,))
    db.execute("CREATE TABLE app_orders (id INTEGER PRIMARY KEY, total INTEGER)")
    db.execute("INSERT INTO app_orders (total) VALUES (42)")
    db.execute("PRAGMA user_version = 7")
    rows = [
        # id, status, attempt, tries, lease_until, expires_at, payload
        ("waiting-1", "queued", 0, 0, None, None, '{"n": 1}'),
        ("running-1", "running", 1, 1, NOW + DAY, None, '{"n": 2}'),
        ("done-1", "done", 1, 1, None, NOW + DAY, '{"n": 3}'),
        ("failed-old", "failed", 3, 3, None, NOW - 1, '{"n": 4}'),
    ]
    for job_id, status, attempt, tries, lease_until, expires_at, payload in rows:
        db.execute(
            "INSERT INTO tinyq_jobs (id, queue, status, run_at, attempt, tries, lease_until, deadline,"
            " payload, created_at, changed_at, expires_at, settled_at, worker)"
            " VALUES (?, 'q', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (job_id, status, NOW - DAY, attempt, tries, lease_until,
             NOW + DAY if lease_until else None, payload, NOW - DAY, NOW - DAY, expires_at,
             NOW - DAY if expires_at else None, "w-old" if attempt else None))
    seq = one(db, "SELECT seq FROM tinyq_jobs WHERE id = 'running-1'")
    db.execute("INSERT INTO tinyq_steps VALUES (?, 'answer', 'kept', 1, ?)", (seq, NOW - DAY))
    events = one(db, "SELECT count(*) FROM tinyq_events")
    db.close()
    return events


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 7, 8])
def test_old_store_migrates_to_current_on_first_write_keeping_jobs(tmp_path, version):
    path = str(tmp_path / "old.db")
    events_before = v1_store(path, version)
    db = connect(path)
    one(db, "SELECT tq_clock(?)", NOW)
    assert one(db, "SELECT tq_add('other', '{}')") is not None  # the first write migrates
    assert one(db, "SELECT value FROM tinyq_meta WHERE key = 'schema_version'") == CURRENT
    assert f"schema {CURRENT}" in one(db, "SELECT tq_debug()")
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tinyq_jobs'")}
    assert "tinyq_jobs_held" in indexes and "tinyq_jobs_running" not in indexes and "tinyq_jobs_settled" not in indexes
    triggers = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert {"tinyq_jobs_added", "tinyq_jobs_changed", "tinyq_jobs_progressed", "tinyq_jobs_removed",
            "tinyq_jobs_marked"} <= triggers
    assert "tinyq_jobs_cancel_tombstone" not in triggers
    assert one(db, "PRAGMA integrity_check") == "ok"
    # The user's table and user_version are untouched.
    assert one(db, "SELECT total FROM app_orders") == 42
    assert one(db, "PRAGMA user_version") == 7

    # Every job is where it was, and works as before.
    assert {i: get(db, i)["state"] for i in ("waiting-1", "running-1", "done-1", "failed-old")} == {
        "waiting-1": "waiting", "running-1": "running", "done-1": "done", "failed-old": "failed"}
    assert one(db, "SELECT tq_step_get('running-1', 'answer')") == "kept"
    assert one(db, "SELECT tq_settle('running-1', 1, 'done', '{\"ok\": 1}')") == 1
    assert get(db, "running-1")["result"] == {"ok": 1}
    # Jobs from before meta existed have none; new ones keep theirs (schema 3).
    assert get(db, "waiting-1")["meta"] is None
    one(db, "SELECT tq_add('other', '{}', '{\"id\": \"with-meta\", \"meta\": {\"tenant\": \"acme\"}}')")
    assert get(db, "with-meta")["meta"] == {"tenant": "acme"}
    # failed-old is past its window and is swept; done-1 still holds its id (dedupe).
    assert one(db, "SELECT tq_sweep()") >= 1
    assert get(db, "failed-old") is None
    assert one(db, "SELECT tq_add('q', '{}', '{\"id\": \"done-1\"}')") == "done-1"
    assert one(db, "SELECT count(*) FROM tinyq_jobs WHERE id = 'done-1'") == 1
    (row,) = claim(db, "q", "w-new", 5)
    assert (row["id"], row["attempt"], json.loads(row["payload"])) == ("waiting-1", 1, {"n": 1})
    # The event log kept its rows and went on.
    assert one(db, "SELECT count(*) FROM tinyq_events") > events_before
    db.close()


def test_reader_of_v1_store_changes_nothing(tmp_path):
    path = str(tmp_path / "old.db")
    v1_store(path)
    db = connect(path)
    one(db, "SELECT tq_get('waiting-1')")
    list(db.execute("SELECT * FROM tq_jobs"))
    assert one(db, "SELECT value FROM tinyq_meta WHERE key = 'schema_version'") == 1
    assert "tinyq_jobs_running" in {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    db.close()


def shape(db):
    """Every tinyq object's definition, as SQLite keeps it (whitespace and quoting aside)."""
    rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'tinyq%' ORDER BY name")
    return {(t, n, tbl): " ".join((sql or "").replace('"tinyq_jobs"', "tinyq_jobs").split()) for t, n, tbl, sql in rows}


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 7, 8])
def test_migrated_store_has_the_schema_of_a_new_store(tmp_path, version):
    old = str(tmp_path / "old.db")
    v1_store(old, version)
    migrated = connect(old)
    one(migrated, "SELECT tq_add('q', '{}')")
    new = connect(str(tmp_path / "new.db"))
    one(new, "SELECT tq_add('q', '{}')")
    assert shape(migrated) == shape(new)
    assert len(shape(new)) > 10
    # SQLite fires a change's triggers newest first, and some read what another wrote
    # (tinyq_jobs_lined after tinyq_jobs_changed): the order is part of the store.
    assert trigger_order(migrated) == trigger_order(new)
    assert ("table", "tinyq_schedules", "tinyq_schedules") in shape(new)
    migrated.close()
    new.close()


def test_upgrade_inside_a_trigger_fails_clearly_then_runs_outside(tmp_path):
    path = str(tmp_path / "old.db")
    v1_store(path)
    db = connect(path)
    db.executescript("""
        PRAGMA trusted_schema = ON;
        CREATE TABLE orders(id INTEGER PRIMARY KEY);
        CREATE TRIGGER orders_ship AFTER INSERT ON orders BEGIN
            SELECT tq_add('ship', json_object('order', NEW.id));
        END;
    """)
    try:
        db.execute("INSERT INTO orders VALUES (1)")
        raise AssertionError("the insert should fail")
    except sqlite3.OperationalError as e:
        assert str(e).startswith(f"tq_add: this store has schema version 1 and needs an upgrade to {CURRENT}"), e
    assert one(db, "SELECT count(*) FROM orders") == 0
    assert one(db, "SELECT value FROM tinyq_meta WHERE key = 'schema_version'") == 1
    one(db, "SELECT tq_sweep()")  # outside a trigger: upgrades
    db.execute("INSERT INTO orders VALUES (2)")
    assert one(db, "SELECT count(*) FROM tinyq_jobs WHERE queue = 'ship'") == 1
    db.close()


def test_migrated_store_counts_its_jobs_and_limits_its_groups(tmp_path):
    """Schema 4 keeps counters (tq_stats, limits) and sets aside the jobs of full groups:
    a migrated store's counters start from its rows, and its first claim sets its groups up."""
    path = str(tmp_path / "old.db")
    v1_store(path)
    db = sqlite3.connect(path, isolation_level=None)
    for i in range(5):
        db.execute(
            "INSERT INTO tinyq_jobs (id, queue, status, grp, run_at, payload, created_at, changed_at)"
            " VALUES (?, 'g', 'queued', ?, ?, '{}', ?, ?)", (f"g-{i}", "a" if i < 3 else "b", NOW - DAY + i,
                                                               NOW - DAY, NOW - DAY))
    db.execute("UPDATE tinyq_queues SET group_concurrency = 1 WHERE name = 'g'")
    db.close()
    db = connect(path)
    one(db, "SELECT tq_clock(?)", NOW)
    stats = db.execute("SELECT waiting, running, done, failed FROM tq_stats('q')").fetchone()
    assert stats is None  # a reader sees no store before the first write migrates it
    one(db, "SELECT tq_add('other', '{}')")
    assert db.execute("SELECT waiting, running, done, failed FROM tq_stats('q')").fetchone() == (1, 1, 1, 1)
    assert db.execute("SELECT waiting FROM tq_stats('g')").fetchone() == (5,)
    got = [r["id"] for r in claim(db, "g", "w", 10)]
    assert got == ["g-0", "g-3"]  # one per group (group_concurrency 1), in order
    assert claim(db, "g", "w", 10) == []
    assert one(db, "SELECT tq_settle('g-0', 1, 'done')") == 1
    assert [r["id"] for r in claim(db, "g", "w", 10)] == ["g-1"]
    assert db.execute("SELECT waiting, running, done FROM tq_stats('g')").fetchone() == (2, 2, 1)
    db.close()


def test_long_line_of_a_v4_store_is_cut_into_buckets(tmp_path):
    """Schema 5 counts a line of over 1024 jobs in buckets (tq_get's `ahead`): the migration
    cuts the lines already there, in claim order, and `ahead` stays exact as they change."""
    path = str(tmp_path / "old.db")
    v1_store(path, 4)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1500)"
               " INSERT INTO tinyq_jobs (id, queue, status, priority, run_at, payload, created_at, changed_at)"
               " SELECT 'l-' || i, 'long', 'queued', i % 3, ? + i % 7, '{}', ?, ? FROM c", (NOW - DAY, NOW - DAY, NOW - DAY))
    db.close()
    db = connect(path)
    one(db, "SELECT tq_clock(?)", NOW)
    one(db, "SELECT tq_add('other', '{}')")  # the first write migrates
    assert one(db, "SELECT count(*) FROM tinyq_buckets WHERE queue = 'long'") == 2  # 512 (the first, no row), 512, 476
    check_buckets(db)
    for job_id in ("l-1", "l-700", "l-1500", "waiting-1"):
        assert get(db, job_id)["ahead"] == plain_ahead(db, job_id), job_id
    claim(db, "long", "w", 600)
    one(db, "SELECT tq_add('long', '{}', '{\"id\": \"new\", \"priority\": 1}')")
    check_buckets(db)
    assert get(db, "new")["ahead"] == plain_ahead(db, "new")
    db.close()


def test_long_line_of_a_v8_store_stays_exact_after_its_migration(tmp_path):
    """Schema 9 moves the line's bookkeeping to triggers of their own (tinyq_jobs_lined): a
    line that version 8 cut into buckets goes on being counted exactly through claims,
    settles and adds after the upgrade."""
    path = str(tmp_path / "old.db")
    v1_store(path, 8)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1500)"
               " INSERT INTO tinyq_jobs (id, queue, status, priority, run_at, payload, created_at, changed_at)"
               " SELECT 'l-' || i, 'long', 'queued', i % 3, ? + i % 7, '{}', ?, ? FROM c", (NOW - DAY, NOW - DAY, NOW - DAY))
    cut = one(db, "SELECT count(*) FROM tinyq_buckets WHERE queue = 'long'")
    db.close()
    assert cut >= 1  # version 8's triggers cut it as it grew
    db = connect(path)
    one(db, "SELECT tq_clock(?)", NOW)
    one(db, "SELECT tq_add('other', '{}')")  # the first write migrates
    assert one(db, "SELECT value FROM tinyq_meta WHERE key = 'schema_version'") == CURRENT
    check_buckets(db)
    rows = claim(db, "long", "w", 600)
    for r in rows[:300]:
        assert one(db, "SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"]) == 1
    for r in rows[300:]:
        assert one(db, "SELECT tq_settle(?, ?, 'retry', 0)", r["id"], r["attempt"]) == 1
    one(db, "SELECT tq_add('long', '{}', '{\"id\": \"new\", \"priority\": 1}')")
    check_buckets(db)
    assert db.execute("SELECT waiting, running, done FROM tq_stats('long')").fetchone() == (1201, 0, 300)
    for job_id in ("l-1", "l-700", "l-1500", "new"):
        assert get(db, job_id)["ahead"] == plain_ahead(db, job_id), job_id
    db.close()


@pytest.mark.parametrize("version", [2, 5])
def test_JOB_05_a_migrated_store_keeps_the_attempts_of_its_ids(tmp_path, version):
    """Schema 6 numbers the attempts of an id added again after those of its jobs that are
    gone (JOB-05): a migrated store gives its jobs their slots and turns the cancel
    tombstones it kept into marks, so neither a cancelled id nor a present one starts over."""
    path = str(tmp_path / "old.db")
    v1_store(path, version)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("INSERT INTO tinyq_tombstones VALUES ('gone', 3, ?)", (NOW - DAY,))
    db.close()
    db = connect(path)
    one(db, "SELECT tq_clock(?)", NOW)
    one(db, "SELECT tq_add('other', '{}')")  # the first write migrates
    assert "tinyq_tombstones" not in {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert one(db, "SELECT count(*) FROM tinyq_jobs WHERE slot IS NULL AND id NOT LIKE 'tq\\_%' ESCAPE '\\'") == 0
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"gone\"}')")
    assert [r["attempt"] for r in claim(db, "q", "w", 5) if r["id"] == "gone"] == [4]
    # running-1 (attempt 1) is cancelled, forgotten, added again: it continues after 1.
    assert one(db, "SELECT tq_cancel('running-1')") == 1
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"running-1\"}')")
    assert [r["attempt"] for r in claim(db, "q", "w", 5) if r["id"] == "running-1"] == [2]
    assert one(db, "SELECT tq_settle('running-1', 1, 'done')") == 0
    db.close()


def test_v5_store_takes_expires_and_replace_after_its_migration(tmp_path):
    """Schema 6 keeps tq_add's `expires` per job and replaces jobs (EXP-01, KEY-01): jobs from
    before have no bound; new ones expire, and a replace moves a job of the old store."""
    path = str(tmp_path / "old.db")
    v1_store(path, 5)
    db = connect(path)
    one(db, "SELECT tq_clock(?)", NOW)
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"bounded\", \"expires\": \"1m\"}')")
    assert get(db, "waiting-1")["expires"] is None and get(db, "bounded")["expires"] == NOW + 60_000
    one(db, "SELECT tq_add('q', '{\"n\": 9}', '{\"id\": \"waiting-1\", \"on_conflict\": \"replace\", \"priority\": 1}')")
    assert (get(db, "waiting-1")["payload"], get(db, "waiting-1")["priority"]) == ({"n": 9}, 1)
    one(db, "SELECT tq_clock(?)", NOW + 60_000)
    assert [r["id"] for r in claim(db, "q", "w", 10)] == ["waiting-1"]
    assert get(db, "bounded")["error"] == "expired"
    db.close()


@pytest.mark.parametrize("version", [1, 5, 6])
def test_WAT_01_a_migrated_store_chains_the_events_it_kept(tmp_path, version):
    """Schema 7 links each job's events (its timeline is read along them): the migration
    links the events an older store kept, so every job's timeline is what it was."""
    path = str(tmp_path / "old.db")
    v1_store(path, version)
    db = connect(path)
    one(db, "SELECT tq_clock(?)", NOW)
    # (Readers see no store before its upgrade: the old log is read as stored.)
    before = {i: db.execute("SELECT seq, CASE state WHEN 'queued' THEN 'waiting' ELSE state END FROM tinyq_events"
                            " WHERE id = ? ORDER BY seq", (i,)).fetchall()
              for i in ("waiting-1", "running-1", "done-1")}
    assert all(before.values())
    one(db, "SELECT tq_add('other', '{}')")  # the first write migrates
    assert one(db, "SELECT value FROM tinyq_meta WHERE key = 'schema_version'") == CURRENT
    for jid, events in before.items():
        assert db.execute("SELECT seq, state FROM tq_watch WHERE job = ?", (jid,)).fetchall() == events
    assert one(db, "SELECT tq_settle('running-1', 1, 'done')") == 1
    assert [s for _, s in db.execute("SELECT seq, state FROM tq_watch WHERE job = 'running-1'")] == \
        [s for _, s in before["running-1"]] + ["done"]
    db.close()
