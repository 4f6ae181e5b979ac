"""tq_wait never sleeps holding a lock: it refuses to run inside a transaction or inside a
statement that writes (`INSERT INTO t SELECT tq_wait(...)` would hold the write lock for
as long as it waits, and every other writer would get "database is locked")."""
import sqlite3
import subprocess
import sys

import pytest

from helpers import ROOT, EXT, connect, one

WRITING = [
    "INSERT INTO t SELECT tq_wait('q', '1h')",
    "UPDATE t SET x = tq_wait('q', '1h')",
    "WITH w(v) AS (SELECT tq_wait('q', '1h')) INSERT INTO t SELECT v FROM w",
    "INSERT INTO t VALUES (1) RETURNING tq_wait('q', '1h')",
]


@pytest.fixture
def store(db):
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (0)")
    one(db, "SELECT tq_queue('q', '{}')")
    return db


@pytest.mark.parametrize("sql", WRITING)
def test_ERR_01_tq_wait_refuses_a_writing_statement(store, sql):
    with pytest.raises(sqlite3.Error) as info:
        store.execute(sql).fetchall()
    assert str(info.value).startswith("tq_wait: call it from a statement that writes nothing"), str(info.value)
    assert one(store, "SELECT count(*) FROM t") == 1
    assert one(store, "SELECT x FROM t") == 0


def test_ERR_01_tq_wait_still_waits_from_a_reading_statement(store):
    assert one(store, "SELECT tq_wait('q', 0)") == 0
    assert store.execute("SELECT x, tq_wait('q', 0) FROM t").fetchall() == [(0, 0)]


def test_ERR_01_another_process_writes_while_one_tries_to_wait_in_an_insert(store, db_path):
    """A second process holding `INSERT ... SELECT tq_wait('q', '1h')` would block every
    writer for an hour; refused, it leaves the lock free: this process writes meanwhile."""
    code = f"""
import sqlite3, sys
sys.path.insert(0, {repr(ROOT + '/tests')})
from helpers import connect
db = connect(sys.argv[1])
print("start", flush=True)
try:
    db.execute("INSERT INTO t SELECT tq_wait('q', '1h')")
    print("waited", flush=True)
except sqlite3.Error as e:
    print("refused:", e, flush=True)
"""
    proc = subprocess.Popen(["/usr/bin/python3", "-c", code, db_path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={"TINYQ_EXT": EXT})
    try:
        assert proc.stdout.readline().strip() == "start"
        writer = connect(db_path, busy_ms=30_000)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO t VALUES (2)")
        writer.execute("COMMIT")
        writer.close()
        proc.wait(timeout=120)  # only on failure: it would wait an hour
        out = proc.stdout.read()  # (not communicate: readline may have buffered it already)
    finally:
        proc.kill()
        proc.wait()
    assert out.startswith("refused: tq_wait: call it from a statement that writes nothing"), (out, proc.stderr.read())
    assert one(store, "SELECT count(*) FROM t") == 2
