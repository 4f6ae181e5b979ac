"""SEC-01 schema safety.

- DIRECTONLY functions (they change settings, leases or data, or the clock) can never be
  called from a view or a trigger, whatever trusted_schema says: SQLite's own
  "unsafe use of ..." error, and nothing changes. This is what keeps a database file
  prepared by someone else from settling, sweeping or pausing your jobs when you read it.
- tq_add, tq_cancel and tq_signal may be called from triggers (and views) while trusted_schema is ON;
  with trusted_schema=OFF SQLite refuses them with its own clear error.
- Read-only functions are INNOCUOUS: they work in views and triggers even with
  trusted_schema=OFF.
- The flags SQLite reports for each function are exactly the ones docs/design.md lists.
"""
import json
import sqlite3

import pytest

from helpers import claim, connect, get, one, snapshot

DIRECTONLY = 0x080000
INNOCUOUS = 0x200000

# (function, narg as registered) -> flags, per docs/design.md "Function flags (SEC-01)".
EXPECTED_FLAGS = {
    ("tq_add", -1): 0, ("tq_cancel", -1): 0, ("tq_signal", -1): 0,
    ("tq_get", -1): INNOCUOUS, ("tq_now", -1): INNOCUOUS, ("tq_version", -1): INNOCUOUS,
    ("tq_debug", -1): INNOCUOUS, ("tq_step_get", -1): INNOCUOUS, ("tq_queue", 1): INNOCUOUS,
    ("tq_queue", 2): DIRECTONLY, ("tq_queue", -1): DIRECTONLY,
    ("tq_renew", -1): DIRECTONLY, ("tq_settle", -1): DIRECTONLY, ("tq_step_put", -1): DIRECTONLY,
    ("tq_progress", -1): DIRECTONLY, ("tq_retry", -1): DIRECTONLY, ("tq_sweep", -1): DIRECTONLY,
    ("tq_clock", -1): DIRECTONLY, ("tq_wait", -1): DIRECTONLY, ("tq_wait_any", -1): DIRECTONLY,
    ("tq_schedule", -1): DIRECTONLY, ("tq_unschedule", -1): DIRECTONLY,
    ("tq_schedule_get", -1): INNOCUOUS, ("tq_check", -1): DIRECTONLY,
}

# Calls of DIRECTONLY scalar functions, each of which would change something if it ran.
DIRECT_CALLS = {
    "tq_settle": "tq_settle('held', 1, 'done')",
    "tq_renew": "tq_renew('held', 1, '1h')",
    "tq_step_put": "tq_step_put('held', 1, 'step', 'evil')",
    "tq_progress": "tq_progress('held', 1, '99')",
    "tq_retry": "tq_retry('failed')",
    "tq_queue": "tq_queue('q', '{\"paused\": true}')",
    "tq_sweep": "tq_sweep()",
    "tq_clock": "tq_clock(0)",
    "tq_wait": "tq_wait('q', 0)",
    "tq_wait_any": "tq_wait_any('[\"q\"]', 0)",
    "tq_schedule": "tq_schedule('evil', 'q', '* * * * *', '{}')",
    "tq_unschedule": "tq_unschedule('kept')",
    "tq_check": "tq_check('{\"recount\": true}')",
}
READ_CALLS = [
    "tq_get('held')", "tq_now()", "tq_version()", "tq_debug()", "tq_step_get('held', 'step')",
    "tq_queue('q')",
]
READ_TABLES = ["tq_watch(0)", "tq_watch(0, 'q')", "tq_jobs", "tq_stats()", "tq_stats('q')", "tq_schedules",
               "tq_steps('held')", "tq_jobs WHERE queue = 'q' AND state = 'waiting' AND after = 'held'",
               "tq_watch WHERE job = 'held'", "tq_deps('after-held')"]


@pytest.fixture
def store(db):
    """A store with a running job 'held' (attempt 1), a waiting job 'waits', a failed job, and
    'after-held' (another queue), blocked on 'held'."""
    one(db, "SELECT tq_queue('q', '{\"lease\": \"1h\"}')")
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"failed\", \"priority\": 9}')")
    (f,) = claim(db, "q", "w0", 1)
    assert one(db, "SELECT tq_settle(?, ?, 'fail', 'x')", f["id"], f["attempt"]) == 1
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"held\"}')")
    (h,) = claim(db, "q", "w1", 1)
    assert h["id"] == "held" and h["attempt"] == 1
    assert one(db, "SELECT tq_step_put('held', 1, 'draft', 'x')") == "x"
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"waits\"}')")
    one(db, "SELECT tq_schedule('kept', 'other', '@daily', '{}')")
    one(db, "SELECT tq_add('later', '{}', '{\"id\": \"after-held\", \"after\": [\"held\"]}')")
    db.execute("CREATE TABLE rows (x)")
    return db


def trusted(conn, on):
    one(conn, f"PRAGMA trusted_schema = {'ON' if on else 'OFF'}")


def refused(conn, sql, fn):
    """`sql` fails with SQLite's 'unsafe use of' for `fn`, and changes nothing."""
    before = snapshot(conn)
    with pytest.raises(sqlite3.Error) as info:
        conn.execute(sql).fetchall()
    msg = str(info.value)
    assert msg.startswith("unsafe use of") and fn in msg, f"{sql}: {msg}"
    assert snapshot(conn) == before


def test_SEC_01_registered_flags_are_exactly_the_documented_ones(db):
    got = {(name, narg): flags & (DIRECTONLY | INNOCUOUS) for name, narg, flags in db.execute(
        "SELECT name, narg, flags FROM pragma_function_list WHERE name LIKE 'tq\\_%' ESCAPE '\\'")}
    assert got == EXPECTED_FLAGS


@pytest.mark.parametrize("on", [True, False], ids=["trusted", "untrusted"])
@pytest.mark.parametrize("fn", sorted(DIRECT_CALLS))
def test_SEC_01_view_cannot_call_directonly_function(store, fn, on):
    store.execute(f"CREATE VIEW v AS SELECT {DIRECT_CALLS[fn]} AS x")
    trusted(store, on)
    refused(store, "SELECT * FROM v", fn)
    # Not through a subquery, a join or a CTE over the view either.
    refused(store, "SELECT (SELECT x FROM v)", fn)
    refused(store, "WITH c AS (SELECT * FROM v) SELECT * FROM c", fn)


@pytest.mark.parametrize("on", [True, False], ids=["trusted", "untrusted"])
@pytest.mark.parametrize("fn", sorted(DIRECT_CALLS))
def test_SEC_01_trigger_cannot_call_directonly_function(store, fn, on):
    store.execute(f"CREATE TRIGGER t AFTER INSERT ON rows BEGIN SELECT {DIRECT_CALLS[fn]}; END")
    trusted(store, on)
    refused(store, "INSERT INTO rows VALUES (1)", fn)
    assert one(store, "SELECT count(*) FROM rows") == 0


@pytest.mark.parametrize("on", [True, False], ids=["trusted", "untrusted"])
def test_SEC_01_view_and_trigger_cannot_claim(store, on):
    store.execute("CREATE VIEW v AS SELECT * FROM tq_claim('q', 'evil', 10)")
    store.execute("CREATE TRIGGER t AFTER INSERT ON rows BEGIN "
                  "SELECT * FROM tq_claim('q', 'evil', 10); END")
    trusted(store, on)
    refused(store, "SELECT * FROM v", "tq_claim")
    refused(store, "INSERT INTO rows VALUES (1)", "tq_claim")
    assert get(store, "waits")["state"] == "waiting"


def test_SEC_01_directonly_functions_still_work_when_called_directly(store):
    """The flag only keeps them out of the schema: a direct call (even with
    trusted_schema=OFF) works."""
    trusted(store, False)
    assert one(store, "SELECT tq_renew('held', 1, '1h')") is not None
    assert one(store, "SELECT tq_step_put('held', 1, 'step', 'ok')") == "ok"
    assert one(store, "SELECT tq_settle('held', 1, 'done')") == 1
    assert one(store, "SELECT tq_retry('failed')") == 1
    assert len(claim(store, "q", "w2", 10)) == 2


@pytest.mark.parametrize("fn,expr", [("tq_add", "tq_add('q', NEW.x, json_object('id', 'trig:' || NEW.x))"),
                                     ("tq_cancel", "tq_cancel('waits')"),
                                     ("tq_signal", "tq_signal('sig:' || NEW.x)")])
def test_SEC_01_trigger_calling_tq_add_or_cancel_needs_trusted_schema(store, fn, expr):
    store.execute(f"CREATE TRIGGER t AFTER INSERT ON rows BEGIN SELECT {expr}; END")
    trusted(store, True)
    store.execute("INSERT INTO rows VALUES ('1')")
    if fn == "tq_add":
        assert get(store, "trig:1")["state"] == "waiting"
    elif fn == "tq_signal":
        assert one(store, "SELECT count(*) FROM tinyq_signals WHERE name = 'sig:1'") == 1
    else:
        assert get(store, "waits") is None
    trusted(store, False)
    before = snapshot(store)
    with pytest.raises(sqlite3.Error) as info:
        store.execute("INSERT INTO rows VALUES ('2')")
    assert str(info.value) == f"unsafe use of {fn}()", str(info.value)
    assert snapshot(store) == before
    assert one(store, "SELECT count(*) FROM rows") == 1
    # On again: works again.
    trusted(store, True)
    store.execute("INSERT INTO rows VALUES ('3')")
    assert one(store, "SELECT count(*) FROM rows") == 2


def test_SEC_01_trigger_add_commits_and_rolls_back_with_the_row(store):
    """JOB-02 through a trigger, checked here because SEC-01 documents the pattern."""
    store.execute("CREATE TRIGGER t AFTER INSERT ON rows BEGIN "
                  "SELECT tq_add('q', NEW.x, json_object('id', 'row:' || NEW.x)); END")
    store.execute("BEGIN")
    store.execute("INSERT INTO rows VALUES ('a')")
    store.execute("ROLLBACK")
    assert get(store, "row:a") is None
    store.execute("BEGIN")
    store.execute("INSERT INTO rows VALUES ('b')")
    store.execute("COMMIT")
    assert get(store, "row:b")["state"] == "waiting"


@pytest.mark.parametrize("expr", READ_CALLS)
def test_SEC_01_read_only_function_works_in_view_and_trigger_untrusted(store, expr):
    direct = one(store, f"SELECT {expr}")
    store.execute(f"CREATE VIEW v AS SELECT {expr} AS x")
    store.execute("CREATE TABLE seen (x)")
    store.execute(f"CREATE TRIGGER t AFTER INSERT ON rows BEGIN INSERT INTO seen VALUES ({expr}); END")
    trusted(store, False)
    got = one(store, "SELECT x FROM v")
    store.execute("INSERT INTO rows VALUES (1)")
    seen = one(store, "SELECT x FROM seen")
    if expr.startswith(("tq_now", "tq_get")):   # the time moves on; tq_get's ahead/clock fields too
        assert got is not None and seen is not None
    else:
        assert got == direct and seen == direct


@pytest.mark.parametrize("table", READ_TABLES)
def test_SEC_01_read_only_table_works_in_view_and_trigger_untrusted(store, table):
    direct = store.execute(f"SELECT * FROM {table}").fetchall()
    assert direct
    store.execute(f"CREATE VIEW v AS SELECT * FROM {table}")
    store.execute("CREATE TABLE seen (n)")
    store.execute(f"CREATE TRIGGER t AFTER INSERT ON rows BEGIN "
                  f"INSERT INTO seen SELECT count(*) FROM {table}; END")
    trusted(store, False)
    assert len(store.execute("SELECT * FROM v").fetchall()) == len(direct)
    store.execute("INSERT INTO rows VALUES (1)")
    assert one(store, "SELECT n FROM seen") == len(direct)


def test_SEC_01_a_prepared_database_cannot_touch_jobs_when_read(tmp_path):
    """Someone hands you a database whose innocent-looking view sweeps, settles and
    pauses: reading it (trusted_schema at its default) fails and changes nothing."""
    path = str(tmp_path / "theirs.db")
    conn = connect(path)
    one(conn, "SELECT tq_add('q', '{}', '{\"id\": \"mine\"}')")
    (r,) = claim(conn, "q", "w1", 1)
    conn.execute("CREATE VIEW report AS SELECT tq_settle('mine', 1, 'fail', 'pwned') AS a, "
                 "tq_queue('q', '{\"paused\": true}') AS b, tq_sweep() AS c")
    conn.close()
    victim = connect(path)
    assert one(victim, "PRAGMA trusted_schema") == 1
    before = snapshot(victim)
    with pytest.raises(sqlite3.Error, match="unsafe use of"):
        victim.execute("SELECT * FROM report").fetchall()
    assert snapshot(victim) == before
    assert get(victim, "mine")["state"] == "running"
    assert json.loads(one(victim, "SELECT tq_queue('q')"))["paused"] is False
    victim.close()
