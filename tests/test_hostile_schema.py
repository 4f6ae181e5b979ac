"""SEC-01 for files tinyq did not write: no object stored in a schema (a CHECK constraint,
a DEFAULT clause, a generated column, an index expression, a partial index, a view, a
trigger), in the main database or in an attached one, can run a function that settles,
sweeps, pauses, schedules or pins the clock, whatever `trusted_schema` says; tq_add and
tq_cancel cannot run from one while `trusted_schema` is off.

SQLite 3.40 flags a call in a CHECK constraint as coming from the schema only when the
function is deterministic (tinyq's are not), so there tinyq's own run-time check is what
refuses it; newer SQLite refuses it too. Each hostile file is written the way an attacker
would: the object is created with a harmless deterministic function (printf) in place of
the tinyq call, and its SQL text is then rewritten in sqlite_schema (writable_schema), so
the same file can be made on every SQLite version. Each case first runs its statement on
the harmless file, to show that the statement itself is sound.
"""
import sqlite3

import pytest

from helpers import connect, get, one, snapshot
from test_security import DIRECT_CALLS, store  # noqa: F401 (a fixture)

# Calls that would each change the victim's store (or its clock) if they ran: the
# DIRECTONLY ones, and tq_add, tq_cancel and a claim.
CALLS = dict(DIRECT_CALLS, tq_clock="tq_clock('2100-01-01T00:00:00Z')",
             tq_add="tq_add('q', '{\"evil\": 1}', '{\"id\": \"evil\"}')", tq_cancel="tq_cancel('waits')",
             tq_claim="(SELECT count(*) FROM tq_claim('q', 'evil', 10))")
# tq_add and tq_cancel may run from the schema with trusted_schema on (documented).
TRUSTED_OK = {"tq_add", "tq_cancel"}

# Each kind of schema object: its SQL (CALL stands for the tinyq call), and the statement
# that makes SQLite evaluate it ({s} is the schema: main or h).
KINDS = {
    "check": ("CREATE TABLE t(a, b CHECK ((CALL) IS NULL OR b IS NOT NULL))", "INSERT INTO {s}.t VALUES (1, 2)"),
    "default": ("CREATE TABLE t(a, b DEFAULT (CALL))", "INSERT INTO {s}.t (a) VALUES (1)"),
    "generated": ("CREATE TABLE t(a, b, g AS (CALL))", "INSERT INTO {s}.t (a, b) VALUES (1, 2)"),
    "stored": ("CREATE TABLE t(a, b, g AS (CALL) STORED)", "INSERT INTO {s}.t (a, b) VALUES (1, 2)"),
    "index": ("CREATE INDEX i ON t((CALL))", "INSERT INTO {s}.t VALUES (1, 2)"),
    "partial": ("CREATE INDEX i ON t(a) WHERE (CALL) IS NOT 0", "INSERT INTO {s}.t VALUES (1, 2)"),
    "view": ("CREATE VIEW v AS SELECT CALL AS x", "SELECT * FROM {s}.v"),
    "trigger": ("CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT CALL; END", "INSERT INTO {s}.t VALUES (1, 2)"),
}
# What the index kinds need first: the table they index.
NEEDS_TABLE = {"index", "partial", "view", "trigger"}


def write_hostile(path, kind, call):
    """A database file with one object of `kind` calling `call`, written without tinyq."""
    create, _ = KINDS[kind]
    conn = sqlite3.connect(path, isolation_level=None)
    if kind in NEEDS_TABLE:
        conn.execute("CREATE TABLE t(a, b)")
    harmless = create.replace("CALL", "printf('%d', 1)")
    conn.execute(harmless)
    if call is not None:
        name = {"index": "i", "partial": "i", "view": "v", "trigger": "tr"}.get(kind, "t")
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = ?", (create.replace("CALL", call), name))
        conn.execute("PRAGMA writable_schema = OFF")
    conn.close()


@pytest.fixture
def victim(store):
    """test_security's store: a running job 'held' (attempt 1, a step kept), a waiting job
    'waits', a failed job 'failed' and a schedule 'kept'."""
    return store


def run_against(victim, path, kind, trusted):
    """Attaches the file at `path` as `h` and runs the kind's statement on it: returns
    the error, or None."""
    _, action = KINDS[kind]
    one(victim, f"PRAGMA trusted_schema = {'ON' if trusted else 'OFF'}")
    try:
        victim.execute("ATTACH ? AS h", (path,))
        victim.execute(action.format(s="h")).fetchall()
        return None
    except sqlite3.Error as e:
        return str(e)
    finally:
        if any(r[1] == "h" for r in victim.execute("PRAGMA database_list")):
            victim.execute("DETACH h")


def cases():
    for kind in KINDS:
        fns = sorted(CALLS) if kind in ("check", "trigger", "view") else ["tq_add", "tq_clock", "tq_settle", "tq_sweep"]
        for fn in fns:
            for trusted in (False, True):
                if not (trusted and fn in TRUSTED_OK):  # documented: trusted, the schema may add and cancel
                    yield pytest.param(kind, fn, trusted, id=f"{kind}-{fn}-{'trusted' if trusted else 'untrusted'}")


@pytest.mark.parametrize("kind,fn,trusted", list(cases()))
def test_SEC_01_an_attached_file_cannot_run_tinyq_against_main(victim, tmp_path, kind, fn, trusted):
    """A file someone else wrote, attached to read or import its rows: none of its
    objects acts on the victim's store or clock."""
    harmless = str(tmp_path / "harmless.db")
    write_hostile(harmless, kind, None)
    assert run_against(victim, harmless, kind, trusted=trusted) is None
    hostile = str(tmp_path / "theirs.db")
    write_hostile(hostile, kind, CALLS[fn])
    before = snapshot(victim)
    err = run_against(victim, hostile, kind, trusted=trusted)
    assert err is not None, f"{kind} calling {fn} ran"
    assert snapshot(victim) == before, err
    assert one(victim, "SELECT tq_clock()") is None, "the clock was pinned"
    if kind == "check" and fn != "tq_claim":  # (a table: SQLite refuses subqueries in a CHECK)
        assert fn in err, err  # refused by name: 'unsafe use of tq_x()' or 'tq_x: not called directly'


def set_check(path, call):
    """Rewrites the CHECK constraint of table t in the file at `path` (writable_schema)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 't'", (KINDS["check"][0].replace("CALL", call),))
    conn.close()


@pytest.mark.parametrize("fn", sorted(set(CALLS) - {"tq_claim"}))
def test_SEC_01_a_check_constraint_in_main_cannot_run_tinyq(tmp_path, fn):
    """The same file opened as the main database, with trusted_schema off: its CHECK
    constraint cannot touch the store inside it (SQLite 3.52 refuses to open it at all:
    'malformed database schema')."""
    path = str(tmp_path / "theirs.db")
    write_hostile(path, "check", None)
    db = connect(path)
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"waits\"}')")
    db.execute("INSERT INTO t VALUES (0, 0)")  # the harmless CHECK passes
    before = snapshot(db)
    db.close()
    set_check(path, CALLS[fn])
    with pytest.raises(sqlite3.Error) as info:
        db = connect(path)
        try:
            one(db, "PRAGMA trusted_schema = OFF")
            db.execute("INSERT INTO t VALUES (1, 2)")
        finally:
            assert one(db, "SELECT tq_clock()") is None
            db.close()
    assert fn in str(info.value)
    set_check(path, "printf('%d', 1)")
    db = connect(path)
    assert snapshot(db) == before
    assert one(db, "SELECT count(*) FROM t") == 1
    db.close()


def test_SEC_01_the_run_time_check_names_the_function_and_the_rule(victim, tmp_path):
    """On a SQLite that lets the call through (3.40), tinyq's own refusal says what and why;
    a newer SQLite refuses it first with its own 'unsafe use of'."""
    hostile = str(tmp_path / "theirs.db")
    write_hostile(hostile, "check", CALLS["tq_clock"])
    err = run_against(victim, hostile, "check", trusted=True)
    assert err.endswith("unsafe use of tq_clock()") or err == (
                   "tq_clock: not called directly (SEC-01): it runs only from a statement whose SQL calls it,"
                   " never from a CHECK constraint, a trigger, a view or anything else stored in a database's schema"), err
    write_hostile(str(tmp_path / "add.db"), "check", CALLS["tq_add"])
    err = run_against(victim, str(tmp_path / "add.db"), "check", trusted=False)
    assert err.endswith("unsafe use of tq_add()") or err.startswith(
        "tq_add: not called directly (SEC-01), and trusted_schema is off:"), err


@pytest.mark.parametrize("sql", [
    "SELECT tq_settle('held', 1, 'done')",
    "select TQ_SETTLE('held', 1, 'done')",
    'SELECT "tq_settle"(\'held\', 1, \'done\')',
    "SELECT [tq_settle] /* a comment */ ('held', 1, 'done')",
    "WITH j(id) AS (SELECT 'held') SELECT tq_settle(id, 1, 'done') FROM j",
    "INSERT INTO log SELECT tq_settle('held', 1, 'done')",
])
def test_SEC_01_direct_calls_run_in_every_form(victim, sql):
    """What the run-time check lets through: any statement whose SQL calls the function,
    whatever its case, quoting or shape, with trusted_schema off too."""
    one(victim, "PRAGMA trusted_schema = OFF")
    victim.execute("CREATE TABLE log (x)")
    victim.execute(sql).fetchall()
    assert get(victim, "held")["state"] == "done"


def test_SEC_01_direct_calls_of_tq_add_run_with_trusted_schema_off(victim):
    one(victim, "PRAGMA trusted_schema = OFF")
    assert one(victim, "SELECT tq_add('q', '{}', '{\"id\": \"direct\"}')") == "direct"
    assert one(victim, "SELECT tq_cancel('direct')") == 1
