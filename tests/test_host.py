"""HOST-01: the host stays in charge. tinyq leaves no transaction open that its caller did
not begin; a waiting tq_wait ends soon after sqlite3_interrupt or the progress handler asks
(what Datasette bounds a query's time with); tq_clock does not pin a read-only connection.

What is checked is what a user sees: another process can claim, the wait raises SQLite's
"interrupted" well before its timeout (a bound with a wide margin, not a timing).
"""
import sqlite3
import threading
import time

import pytest

from helpers import EXT, T0, add, connect, one, run_python

CLAIMER = """
import json, os, sys
sys.path.insert(0, os.environ["PYTHONPATH"])
from helpers import connect, claim
conn = connect(sys.argv[1], busy_ms=3000)
print(json.dumps([r["id"] for r in claim(conn, "q")]))
"""


def claims_elsewhere(db_path):
    """The ids another process claims from queue q (it fails on a lock held over 3 s)."""
    proc = run_python(CLAIMER, db_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


WRITING_CHECKS = [
    "INSERT INTO health SELECT tq_check()",
    "CREATE TABLE report AS SELECT tq_check() AS problems",
]


@pytest.mark.parametrize("statement", WRITING_CHECKS)
def test_HOST_01_tq_check_in_a_writing_statement_leaves_no_transaction_open(db_path, statement):
    conn = connect(db_path)
    add(conn, "q", id="a")
    conn.execute("CREATE TABLE health (problems TEXT)")
    conn.execute(statement)
    assert not conn.in_transaction            # was left in a BEGIN holding the write lock
    table = "health" if "health" in statement else "report"
    assert one(conn, f"SELECT problems FROM {table}") == "[]"   # read in the statement's own transaction
    assert claims_elsewhere(db_path) == '["a"]'
    conn.close()


def test_HOST_01_tq_check_in_the_callers_transaction_uses_it(db_path):
    conn = connect(db_path)
    add(conn, "q", id="a")
    conn.execute("CREATE TABLE health (problems TEXT)")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO health SELECT tq_check()")
    assert conn.in_transaction
    conn.execute("COMMIT")
    assert one(conn, "SELECT problems FROM health") == "[]"
    assert claims_elsewhere(db_path) == '["a"]'
    conn.close()


def test_HOST_01_a_recount_in_a_writing_statement_is_refused_and_leaves_nothing_open(db_path):
    conn = connect(db_path)
    add(conn, "q", id="a")
    conn.execute("CREATE TABLE health (problems TEXT)")
    with pytest.raises(sqlite3.Error, match=r"^tq_check: recount cannot run inside a writing statement"):
        conn.execute("""INSERT INTO health SELECT tq_check('{"recount": true}')""")
    assert not conn.in_transaction
    assert one(conn, "SELECT count(*) FROM health") == 0
    assert claims_elsewhere(db_path) == '["a"]'
    conn.close()


def test_HOST_01_functions_with_transactions_of_their_own_leave_none_open_in_writing_statements(db_path):
    """tq_add, tq_queue, tq_signal run their own transaction in autocommit: inside a writing
    statement they run in its transaction instead."""
    conn = connect(db_path)
    conn.execute("CREATE TABLE log (v)")
    conn.execute("INSERT INTO log SELECT tq_add('q', '{}', '{\"id\": \"a\"}')")
    conn.execute("INSERT INTO log SELECT tq_queue('q', '{\"attempts\": 3}')")
    conn.execute("INSERT INTO log SELECT tq_signal('s')")
    conn.execute("CREATE TABLE copy AS SELECT tq_check() AS problems")
    assert not conn.in_transaction
    assert one(conn, "SELECT problems FROM copy") == "[]"
    assert claims_elsewhere(db_path) == '["a"]'
    conn.close()


# -- waits end when the host asks ---------------------------------------------------------

WAITS = ["SELECT tq_wait('idle', '60s')", """SELECT tq_wait_any('["idle", "other"]', '60s')"""]
STORES = ["file", "memory"]     # a file is watched (inotify); in memory the waiter polls


def waiting_store(db_path, kind):
    conn = connect(db_path if kind == "file" else ":memory:")
    add(conn, "busy", id="b0")  # the store exists; the waited-for queues stay empty
    return conn


def ends_interrupted(conn, statement):
    """Runs the wait: it must raise SQLite's "interrupted"; returns the seconds it took."""
    began = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        conn.execute(statement).fetchone()
    return time.monotonic() - began


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("statement", WAITS)
def test_HOST_01_sqlite3_interrupt_ends_a_wait(db_path, kind, statement):
    conn = waiting_store(db_path, kind)
    timer = threading.Timer(0.5, conn.interrupt)
    timer.start()
    took = ends_interrupted(conn, statement)
    timer.join()
    assert took < 30, took            # it ran its 60 s
    assert one(conn, "SELECT 1") == 1  # the connection goes on
    conn.close()


@pytest.mark.parametrize("n", [100, 1000])   # Datasette's is 1000
@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("statement", WAITS)
def test_HOST_01_the_progress_handler_ends_a_wait(db_path, kind, statement, n):
    conn = waiting_store(db_path, kind)
    stop_at = time.monotonic() + 0.5
    calls = []

    def handler():
        calls.append(1)
        return 1 if time.monotonic() > stop_at else 0

    conn.set_progress_handler(handler, n)
    took = ends_interrupted(conn, statement)
    assert took < 30, took
    conn.set_progress_handler(None, n)
    assert one(conn, "SELECT 1") == 1
    conn.close()


# -- tq_clock on a read-only connection ---------------------------------------------------

@pytest.mark.parametrize("uri", ["mode=ro", "immutable=1"])
def test_HOST_01_tq_clock_refuses_to_pin_a_read_only_connection(db_path, uri):
    rw = connect(db_path)
    add(rw, "q", id="a")
    rw.execute("PRAGMA journal_mode=DELETE")   # immutable needs no -wal to read
    rw.close()
    ro = sqlite3.connect(f"file:{db_path}?{uri}", uri=True, isolation_level=None)
    ro.enable_load_extension(True)
    ro.load_extension(EXT)
    with pytest.raises(sqlite3.Error, match=r"^tq_clock: cannot pin the clock of a read-only connection"):
        ro.execute("SELECT tq_clock(?)", (T0,))
    with pytest.raises(sqlite3.Error, match=r"^tq_clock: cannot pin"):
        ro.execute("SELECT tq_clock(NULL)")
    assert one(ro, "SELECT tq_clock()") is None          # reading the pin is fine: there is none
    assert abs(one(ro, "SELECT tq_now()") - time.time() * 1000) < 3_600_000   # the system clock
    assert one(ro, "SELECT json_extract(tq_get('a'), '$.state')") == "waiting"
    ro.close()


def test_HOST_01_tq_clock_still_pins_a_writable_connection(db_path):
    conn = connect(db_path)
    assert one(conn, "SELECT tq_clock(?)", T0) == T0
    assert one(conn, "SELECT tq_now()") == T0
    conn.close()
