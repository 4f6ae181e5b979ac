"""JOB-02 through the Python helper on a connection the caller owns: a Queue's writes commit
and roll back with the caller's transaction exactly as an INSERT on that connection would,
in every transaction mode of Python's sqlite3 module (legacy isolation levels,
isolation_level=None, 3.12's autocommit=False where a Python here has it) and through
SQLAlchemy's documented recipe for pysqlite. A raw `SELECT tq_add(...)` in legacy mode is
the documented trap (docs/reference.md, "Transactions from Python")."""
import glob
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from helpers import EXT, ROOT, claim_one, connect, get, one, settle, snapshot

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402

LEGACY_LEVELS = ("", "DEFERRED", "IMMEDIATE", "EXCLUSIVE")


def caller_conn(db_path, **kw):
    """The caller's own connection, as the README opens one, with a table of orders."""
    conn = tinyq.load(sqlite3.connect(db_path, **kw))
    conn.execute("PRAGMA journal_mode=WAL")         # so that another connection reads meanwhile
    conn.execute("CREATE TABLE IF NOT EXISTS orders (item TEXT)")
    if conn.in_transaction:
        conn.commit()
    return conn


def seen(db_path, job_id):
    """The job's state as another connection sees it (None: no such job committed)."""
    other = connect(db_path)
    try:
        job = get(other, job_id)
        return job and job["state"]
    finally:
        other.close()


@pytest.mark.parametrize("level", LEGACY_LEVELS)
def test_JOB_02_an_add_before_any_insert_rolls_back_in_sqlite3s_default_mode(db_path, level):
    conn = caller_conn(db_path, isolation_level=level)
    q = tinyq.Queue(conn, "orders")
    q.add({"item": "book"}, id="o:1")              # before any INSERT
    assert conn.in_transaction                      # the module's implicit transaction, opened
    conn.execute("INSERT INTO orders VALUES ('book')")
    conn.rollback()
    assert q.get("o:1") is None and one(conn, "SELECT count(*) FROM orders") == 0
    q.add_many([{"n": 1}, {"n": 2}], ids=["m:1", "m:2"])
    conn.rollback()
    assert q.get("m:1") is None and q.get("m:2") is None
    q.add({"item": "pen"}, id="o:2")
    conn.execute("INSERT INTO orders VALUES ('pen')")
    assert seen(db_path, "o:2") is None             # not committed yet
    conn.commit()
    assert seen(db_path, "o:2") == "waiting" and not conn.in_transaction
    conn.close()


def test_JOB_02_every_write_of_a_queue_rolls_back_with_the_caller(db_path):
    conn = caller_conn(db_path)                     # isolation_level "" (the default)
    q = tinyq.Queue(conn, "q")
    q.add({}, id="broken")
    q.add({}, id="waiting")
    q.schedule("daily", "@daily", {})
    conn.commit()
    db = connect(db_path)
    try:
        job = claim_one(db, "q")
        settle(db, job["id"], job["attempt"], "fail", "no")
        before = snapshot(db)
        writes = [lambda: q.retry(job["id"]), lambda: q.cancel("waiting"), lambda: q.settings(lease="5m"),
                  lambda: q.signal("approve", {"ok": True}), lambda: q.schedule("hourly", "@hourly", {}),
                  lambda: q.unschedule("daily")]
        for write in writes:
            write()
            assert conn.in_transaction
            conn.rollback()
        assert snapshot(db) == before
    finally:
        db.close()
        conn.close()


def test_JOB_02_a_raw_select_tq_add_first_commits_on_its_own_in_legacy_mode(db_path):
    """The trap the helper avoids: sqlite3 opens nothing before a SELECT, so the add runs
    in autocommit; an INSERT (or BEGIN) first makes it join."""
    conn = caller_conn(db_path)
    one(conn, "SELECT tq_add('q', '{}', '{\"id\": \"raw\"}')")
    assert not conn.in_transaction
    conn.rollback()
    assert seen(db_path, "raw") == "waiting"        # it stayed
    conn.execute("INSERT INTO orders VALUES ('book')")
    one(conn, "SELECT tq_add('q', '{}', '{\"id\": \"after-insert\"}')")
    conn.rollback()
    assert seen(db_path, "after-insert") is None
    conn.close()


def test_JOB_02_isolation_level_none_adds_as_an_insert_would(db_path):
    conn = caller_conn(db_path, isolation_level=None)
    q = tinyq.Queue(conn, "q")
    q.add({}, id="outside")                          # no BEGIN: autocommit, as an INSERT
    assert not conn.in_transaction and seen(db_path, "outside") == "waiting"
    conn.execute("BEGIN")
    q.add({}, id="inside")
    q.add_many([{}, {}], ids=["many:1", "many:2"])
    conn.execute("INSERT INTO orders VALUES ('book')")
    conn.execute("ROLLBACK")
    assert [seen(db_path, i) for i in ("inside", "many:1", "many:2")] == [None, None, None]
    conn.execute("BEGIN")
    q.add({}, id="inside")
    conn.execute("COMMIT")
    assert seen(db_path, "inside") == "waiting"
    conn.close()


# -- Python 3.12's autocommit=False (PEP 249): a transaction is always open ------------------

AUTOCOMMIT_FALSE = textwrap.dedent("""
    import importlib, sys
    import tinyq
    mod = importlib.import_module(sys.argv[1])
    path = sys.argv[2]
    conn = tinyq.load(mod.connect(path, autocommit=False))
    conn.execute("CREATE TABLE orders (item TEXT)")
    conn.commit()
    q = tinyq.Queue(conn, "q")
    q.add({}, id="o:1")
    conn.execute("INSERT INTO orders VALUES ('book')")
    conn.rollback()
    assert q.get("o:1") is None
    q.add_many([{}, {}], ids=["m:1", "m:2"])
    q.add({}, id="o:2")
    conn.commit()
    other = tinyq.load(mod.connect(path, autocommit=True))
    states = [other.execute("SELECT tq_get(?) ->> 'state'", (i,)).fetchone()[0] for i in ("o:1", "m:1", "o:2")]
    assert states == [None, "waiting", "waiting"], states
    print("ok")
""")

PROBE = ("import importlib, sys\n"
         "for name in ('sqlite3', 'pysqlite3'):\n"
         "    try:\n"
         "        mod = importlib.import_module(name)\n"
         "        conn = mod.connect(':memory:', autocommit=False)\n"
         "        conn.enable_load_extension(True)\n"
         "    except Exception:\n"
         "        continue\n"
         "    print(name)\n"
         "    break\n")


def python_with_autocommit():
    """(python, module) of a Python 3.12+ whose sqlite3 module (or pysqlite3) has
    autocommit= and loads extensions: $TINYQ_PY312, else any found; None when none."""
    found = [os.environ.get("TINYQ_PY312")] + sorted(
        glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3"))
        + glob.glob("/usr/bin/python3.1[2-9]") + glob.glob("/usr/local/bin/python3.1[2-9]"))
    for python in filter(None, found):
        try:
            out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out:
            return python, out
    return None


def test_JOB_02_python_312_autocommit_false_keeps_adds_in_its_transaction(db_path):
    found = python_with_autocommit()
    if found is None:
        pytest.skip("no Python 3.12+ here whose sqlite3 has autocommit= and loads extensions (pyenv's "
                    "cannot load extensions; pysqlite3(-binary) 0.5/0.6 have no autocommit=): "
                    "set TINYQ_PY312 to one")
    python, module = found
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python"))
    run = subprocess.run([python, "-c", AUTOCOMMIT_FALSE, module, db_path], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.stdout.strip() == "ok", run.stderr


# -- SQLAlchemy (pysqlite) ---------------------------------------------------------------------

def sqlalchemy_engine(db_path, recipe):
    sa = pytest.importorskip("sqlalchemy")
    engine = sa.create_engine("sqlite:///" + db_path)

    @sa.event.listens_for(engine, "connect")
    def on_connect(dbapi_connection, _record):
        tinyq.load(dbapi_connection)
        if recipe:
            dbapi_connection.isolation_level = None   # pysqlite emits no BEGIN of its own ...

    if recipe:
        @sa.event.listens_for(engine, "begin")
        def on_begin(connection):
            connection.exec_driver_sql("BEGIN")      # ... SQLAlchemy's begin does
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE IF NOT EXISTS orders (item TEXT)")
    return sa, engine


class Boom(Exception):
    pass


def test_JOB_02_sqlalchemys_recipe_rolls_a_raw_tq_add_back_with_the_session(db_path):
    sa, engine = sqlalchemy_engine(db_path, recipe=True)
    from sqlalchemy.orm import Session
    add = sa.text("SELECT tq_add('orders', '{}', json_object('id', :id))")
    with pytest.raises(Boom):
        with Session(engine) as session, session.begin():
            session.execute(add, {"id": "o:1"})          # first: no INSERT before it
            session.execute(sa.text("INSERT INTO orders VALUES ('book')"))
            raise Boom()
    assert seen(db_path, "o:1") is None
    with Session(engine) as session, session.begin():
        session.execute(add, {"id": "o:2"})
    assert seen(db_path, "o:2") == "waiting"
    engine.dispose()


def test_JOB_02_queue_on_sqlalchemys_default_engine_joins_the_session(db_path):
    """Without the recipe, a raw SELECT tq_add first would commit on its own; Queue.add on
    the session's driver connection opens the implicit transaction as an INSERT would."""
    sa, engine = sqlalchemy_engine(db_path, recipe=False)
    from sqlalchemy.orm import Session
    with pytest.raises(Boom):
        with Session(engine) as session, session.begin():
            fairy = session.connection().connection
            driver = getattr(fairy, "dbapi_connection", None) or fairy.connection
            tinyq.Queue(driver, "orders").add({"item": "book"}, id="o:1")
            session.execute(sa.text("INSERT INTO orders VALUES ('book')"))
            raise Boom()
    assert seen(db_path, "o:1") is None
    engine.dispose()
