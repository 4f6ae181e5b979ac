"""Faults from outside tinyq: a full disk, a read-only file, a lock held past the busy
timeout, tables that are not tinyq's (or a newer tinyq's), a file that is not a database,
and a process SIGKILLed in the middle of a batch claim (DUR-02).

Each fault must give a clear SQL error that starts with the function's name (ERR-01),
change nothing, never crash the host (ERR-02), and leave a store that works again once
the fault is gone.
"""
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from helpers import EXT, ROOT, claim, connect, get, one, snapshot

HERE = os.path.dirname(os.path.abspath(__file__))


def raw_connect(path, busy_ms=5000, uri=False):
    """A connection with tinyq loaded and nothing else done (no PRAGMA that might fail)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_ms / 1000, uri=uri)
    conn.enable_load_extension(True)
    conn.load_extension(EXT)
    conn.enable_load_extension(False)
    return conn


def error_of(conn, sql, *args):
    with pytest.raises(sqlite3.Error) as info:
        conn.execute(sql, args).fetchall()
    return info.value


def check_store(conn):
    """The store is consistent: SQLite's own check, and every job has its latest event."""
    assert one(conn, "PRAGMA integrity_check") == "ok"
    assert one(conn, "PRAGMA foreign_key_check") is None
    bad = conn.execute(
        """SELECT j.id, j.status, e.state FROM tinyq_jobs j
           LEFT JOIN tinyq_events e ON e.seq = (SELECT max(seq) FROM tinyq_events
                                                WHERE id = j.id AND state <> 'progress')
           WHERE e.state IS NOT (CASE j.status WHEN 'queued' THEN 'waiting' ELSE j.status END)""").fetchall()
    assert bad == [], f"jobs whose latest event disagrees with their status: {bad[:5]}"
    assert one(conn, "SELECT count(*) FROM tinyq_jobs WHERE status = 'running' AND lease_until IS NULL") == 0


# --------------------------------------------------------------------------- disk full
def fill(conn, payload, limit=10_000):
    """Adds jobs until the database is full; returns (ids added, the error)."""
    added = []
    for i in range(limit):
        try:
            added.append(one(conn, "SELECT tq_add('q', ?, ?)", payload, json.dumps({"id": f"job-{i}"})))
        except sqlite3.Error as e:
            return added, e
    raise AssertionError(f"the database never filled up after {limit} adds")


def test_disk_full_add_is_a_clear_error_and_changes_nothing(db):
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"first\"}')")
    pages = one(db, "PRAGMA page_count")
    one(db, f"PRAGMA max_page_count = {pages + 8}")
    added, err = fill(db, "x" * 3000)
    assert added, "not even one job fitted in 8 more pages"
    assert str(err).startswith("tq_add:"), str(err)
    assert "full" in str(err), str(err)
    assert err.sqlite_errorcode == sqlite3.SQLITE_FULL, err.sqlite_errorname
    assert not db.in_transaction
    # The failed add left nothing behind; everything that succeeded is there.
    before = snapshot(db)
    with pytest.raises(sqlite3.Error):
        one(db, "SELECT tq_add('q', ?)", "x" * 3000)
    assert snapshot(db) == before
    assert one(db, "SELECT count(*) FROM tinyq_jobs") == len(added) + 1
    check_store(db)
    # Works again once there is room.
    one(db, "PRAGMA max_page_count = 1000000")
    more = [one(db, "SELECT tq_add('q', ?)", "x" * 3000) for _ in range(20)]
    assert len(set(more)) == 20
    rows = claim(db, "q", "w1", 1000)
    assert len(rows) == len(added) + 21
    for r in rows:
        assert one(db, "SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"]) == 1
    check_store(db)


def test_disk_full_during_claim_and_settle_changes_nothing(db):
    """A claim (events, holder row) and settles need pages too: when they cannot have them
    the whole call rolls back, and the jobs are still claimable afterwards."""
    for i in range(300):
        one(db, "SELECT tq_add('q', ?, ?)", "p" * 200, json.dumps({"id": f"j{i}"}))
    pages = one(db, "PRAGMA page_count")
    one(db, f"PRAGMA max_page_count = {pages}")
    before = snapshot(db)
    try:
        rows = claim(db, "q", "w1", 1000, {"lease": "1h"})
    except sqlite3.Error as e:
        assert str(e).startswith("tq_claim:") and "full" in str(e), str(e)
        assert e.sqlite_errorcode == sqlite3.SQLITE_FULL
        assert snapshot(db) == before, "a claim that failed for lack of room changed the store"
        rows = None
    check_store(db)
    if rows is None:
        one(db, "PRAGMA max_page_count = 1000000")
        rows = claim(db, "q", "w1", 1000, {"lease": "1h"})
    assert len(rows) == 300
    # Settling with results that do not fit: each failure leaves its job running.
    one(db, f"PRAGMA max_page_count = {one(db, 'PRAGMA page_count')}")
    failures = 0
    for r in rows:
        try:
            assert one(db, "SELECT tq_settle(?, ?, 'done', ?)", r["id"], r["attempt"], "r" * 2000) == 1
        except sqlite3.Error as e:
            failures += 1
            assert str(e).startswith("tq_settle:") and "full" in str(e), str(e)
            assert get(db, r["id"])["state"] == "running"
    assert failures > 0, "the results all fitted: the test did not fill the disk"
    check_store(db)
    one(db, "PRAGMA max_page_count = 1000000")
    for r in rows:
        if get(db, r["id"])["state"] == "running":
            assert one(db, "SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"]) == 1
    assert one(db, "SELECT count(*) FROM tq_jobs WHERE state = 'done'") == 300
    check_store(db)


def test_disk_full_on_first_use_leaves_no_half_store(db_path):
    conn = raw_connect(db_path)
    conn.execute("CREATE TABLE mine (x)")
    pages = one(conn, "PRAGMA page_count")
    one(conn, f"PRAGMA max_page_count = {pages + 2}")
    err = error_of(conn, "SELECT tq_add('q', '{}')")
    assert str(err).startswith("tq_add:") and "full" in str(err), str(err)
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'tinyq%'")]
    assert names == [], f"a half-created store was left behind: {names}"
    one(conn, "PRAGMA max_page_count = 1000000")
    job = one(conn, "SELECT tq_add('q', '{}')")
    assert get(conn, job)["state"] == "waiting"
    conn.close()


# --------------------------------------------------------------------------- read-only
def make_store(path, journal="wal"):
    conn = connect(path)
    if journal != "wal":
        one(conn, f"PRAGMA journal_mode={journal}")
    one(conn, "SELECT tq_queue('q', '{\"lease\": \"1h\"}')")
    for i in range(3):
        one(conn, "SELECT tq_add('q', ?, ?)", json.dumps({"n": i}), json.dumps({"id": f"j{i}"}))
    (r,) = claim(conn, "q", "w1", 1)
    one(conn, "SELECT tq_step_put(?, ?, 's', 'kept')", r["id"], r["attempt"])
    conn.close()
    return r


WRITES = [
    ("tq_add", "SELECT tq_add('q', '{}')"),
    ("tq_add", "SELECT tq_add('q', '{}', '{\"id\": \"j1\"}')"),
    ("tq_claim", "SELECT * FROM tq_claim('q', 'w2', 5)"),
    ("tq_settle", "SELECT tq_settle('j0', 1, 'done')"),
    ("tq_renew", "SELECT tq_renew('j0', 1)"),
    ("tq_step_put", "SELECT tq_step_put('j0', 1, 't', 'v')"),
    ("tq_progress", "SELECT tq_progress('j0', 1, '50')"),
    ("tq_cancel", "SELECT tq_cancel('j2')"),
    ("tq_retry", "SELECT tq_retry('j2')"),
    ("tq_queue", "SELECT tq_queue('q', '{\"paused\": true}')"),
    ("tq_sweep", "SELECT tq_sweep()"),
]
READS = [
    "SELECT tq_get('j0')", "SELECT tq_get('nope')", "SELECT * FROM tq_watch(0)",
    "SELECT * FROM tq_watch(0, 'q')", "SELECT * FROM tq_jobs", "SELECT * FROM tq_jobs WHERE queue = 'q' AND state = 'waiting'",
    "SELECT * FROM tq_stats()", "SELECT * FROM tq_stats('q')", "SELECT tq_step_get('j0', 's')",
    "SELECT tq_queue('q')", "SELECT tq_version()", "SELECT tq_debug()", "SELECT tq_now()",
]


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_read_only_file_writes_fail_clearly_reads_work(tmp_path, journal):
    path = str(tmp_path / "ro.db")
    held = make_store(path, journal)
    if journal == "wal":
        # A read-only WAL reader needs the -shm file: keep a writer's connection open.
        keeper = connect(path)
        one(keeper, "SELECT count(*) FROM tinyq_jobs")
    ro = raw_connect(f"file:{path}?mode=ro", uri=True)
    before = snapshot(ro)
    for fn, sql in WRITES:
        err = error_of(ro, sql)
        assert str(err).startswith(fn + ":"), f"{sql}: {err}"
        assert "readonly" in str(err) or "read-only" in str(err), f"{sql}: {err}"
        assert err.sqlite_errorcode == sqlite3.SQLITE_READONLY, f"{sql}: {err.sqlite_errorname}"
        assert not ro.in_transaction
    for sql in READS:
        ro.execute(sql).fetchall()
    assert json.loads(one(ro, "SELECT tq_get(?)", held["id"]))["state"] == "running"
    assert one(ro, "SELECT tq_step_get(?, 's')", held["id"]) == "kept"
    assert len(ro.execute("SELECT * FROM tq_watch(0)").fetchall()) >= 4
    assert snapshot(ro) == before
    ro.close()
    if journal == "wal":
        keeper.close()
    # The file still works for a writer.
    rw = connect(path)
    assert one(rw, "SELECT tq_settle(?, ?, 'done')", held["id"], held["attempt"]) == 1
    check_store(rw)
    rw.close()


RO_CHILD = r"""
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.enable_load_extension(True)
conn.load_extension(sys.argv[2])
out = {"writes": [], "reads": []}
for fn, sql in json.loads(sys.argv[3]):
    try:
        conn.execute(sql).fetchall()
        out["writes"].append([sql, None, None])
    except sqlite3.Error as e:
        out["writes"].append([sql, str(e), e.sqlite_errorname])
for sql in json.loads(sys.argv[4]):
    try:
        conn.execute(sql).fetchall()
        out["reads"].append([sql, None])
    except sqlite3.Error as e:
        out["reads"].append([sql, str(e)])
print(json.dumps(out))
"""


def test_chmod_0444_file_writes_fail_clearly_reads_work():
    """A file its user may not write (chmod 0444; as root the check runs as 'nobody', since
    root ignores file modes). Rollback-journal mode: a WAL reader would need to write -shm."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="tinyq-ro-")
    try:
        os.chmod(d, 0o755)
        # The checkout may sit in a folder 'nobody' cannot enter (CI clones into mktemp -d):
        # give the child its own readable copy of the extension.
        ext_copy = os.path.join(d, "tinyq.so")
        shutil.copy(EXT + ".so", ext_copy)
        os.chmod(ext_copy, 0o755)
        path = os.path.join(d, "ro.db")
        held = make_store(path, "delete")
        os.chmod(path, 0o444)
        before = open(path, "rb").read()
        cmd = ["/usr/bin/python3", "-c", RO_CHILD, path, ext_copy[:-3], json.dumps(WRITES), json.dumps(READS)]
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv: a chmod 0444 file stays writable")
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        for (fn, _), (sql, msg, code) in zip(WRITES, out["writes"]):
            assert msg is not None, f"{sql} worked on a read-only file"
            assert msg.startswith(fn + ":") and "readonly" in msg, f"{sql}: {msg}"
            assert code == "SQLITE_READONLY", f"{sql}: {code}"
        assert [m for _, m in out["reads"] if m is not None] == []
        assert open(path, "rb").read() == before
        os.chmod(path, 0o644)
        rw = connect(path)
        assert one(rw, "SELECT tq_settle(?, ?, 'done')", held["id"], held["attempt"]) == 1
        rw.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_query_only_connection_writes_fail_clearly(db_path):
    make_store(db_path)
    conn = connect(db_path)
    one(conn, "PRAGMA query_only = ON")
    before = snapshot(conn)
    for fn, sql in WRITES:
        err = error_of(conn, sql)
        assert str(err).startswith(fn + ":"), f"{sql}: {err}"
    for sql in READS:
        conn.execute(sql).fetchall()
    assert snapshot(conn) == before
    conn.close()


def test_read_only_database_without_a_store_creates_nothing(tmp_path):
    path = str(tmp_path / "empty.db")
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE mine (x)")
    c.close()
    ro = raw_connect(f"file:{path}?mode=ro", uri=True)
    assert one(ro, "SELECT tq_get('x')") is None
    assert ro.execute("SELECT * FROM tq_watch(0)").fetchall() == []
    assert ro.execute("SELECT * FROM tq_jobs").fetchall() == []
    err = error_of(ro, "SELECT tq_add('q', '{}')")
    assert str(err).startswith("tq_add:") and "readonly" in str(err), str(err)
    ro.close()


# --------------------------------------------------------------------------- locked
BUSY_MS = 300


@pytest.fixture
def locked(db_path):
    """(a, b, ids): b holds the write lock (BEGIN IMMEDIATE); a has a 300 ms busy timeout."""
    a = connect(db_path, busy_ms=BUSY_MS)
    one(a, "SELECT tq_queue('q', '{\"lease\": \"1h\"}')")
    for i in range(3):
        one(a, "SELECT tq_add('q', '{}', ?)", json.dumps({"id": f"j{i}"}))
    (r,) = claim(a, "q", "w1", 1)
    b = connect(db_path)
    b.execute("BEGIN IMMEDIATE")
    yield a, b, r
    if b.in_transaction:
        b.execute("ROLLBACK")
    a.close()
    b.close()


LOCKED_CALLS = [
    ("tq_add", "SELECT tq_add('q', '{}')"),
    ("tq_add", "SELECT tq_add('q', '{}', '{\"id\": \"new\"}')"),
    ("tq_claim", "SELECT * FROM tq_claim('q', 'w2', 5)"),
    ("tq_settle", "SELECT tq_settle('j0', 1, 'done')"),
    ("tq_renew", "SELECT tq_renew('j0', 1)"),
    ("tq_step_put", "SELECT tq_step_put('j0', 1, 's', 'v')"),
    ("tq_progress", "SELECT tq_progress('j0', 1, '1')"),
    ("tq_cancel", "SELECT tq_cancel('j1')"),
    ("tq_queue", "SELECT tq_queue('q', '{\"paused\": true}')"),
    ("tq_sweep", "SELECT tq_sweep()"),
]


@pytest.mark.parametrize("fn,sql", LOCKED_CALLS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(LOCKED_CALLS)])
def test_locked_past_busy_timeout_is_database_is_locked_and_changes_nothing(locked, fn, sql):
    a, b, held = locked
    before = snapshot(b)
    t = time.monotonic()
    err = error_of(a, sql)
    took = time.monotonic() - t
    assert str(err).startswith(fn + ":"), str(err)
    assert "database is locked" in str(err), str(err)
    assert err.sqlite_errorcode == sqlite3.SQLITE_BUSY, err.sqlite_errorname
    assert not a.in_transaction
    assert took >= BUSY_MS / 1000 * 0.9, f"gave up after {took:.3f}s, before the busy timeout"
    # ... and gave up at last (a wide bound: a loaded machine is slow, not stuck)
    assert took < 60, f"waited {took:.1f}s for a {BUSY_MS} ms busy timeout"
    b.execute("ROLLBACK")
    assert snapshot(b) == before
    # Once the lock is gone the same call works.
    a.execute(sql).fetchall()


def test_locked_inside_callers_transaction_keeps_the_transaction(locked):
    a, b, _ = locked
    a.execute("BEGIN")
    err = error_of(a, "SELECT tq_add('q', '{}', '{\"id\": \"in-tx\"}')")
    assert str(err).startswith("tq_add:") and "locked" in str(err), str(err)
    assert a.in_transaction, "the caller's transaction was ended by tinyq's error"
    a.execute("ROLLBACK")
    b.execute("ROLLBACK")
    assert get(a, "in-tx") is None


def test_reads_work_while_another_connection_writes(locked):
    a, _, held = locked
    assert get(a, held["id"])["state"] == "running"
    assert len(a.execute("SELECT * FROM tq_watch(0)").fetchall()) >= 4
    assert a.execute("SELECT * FROM tq_stats('q')").fetchall()[0][0] == "q"


# --------------------------------------------------------------------------- foreign tables
@pytest.mark.parametrize("table,ddl", [
    ("tinyq_jobs", "CREATE TABLE tinyq_jobs (x)"),
    ("tinyq_events", "CREATE TABLE tinyq_events (x)"),
    ("tinyq_meta", "CREATE TABLE tinyq_meta (a, b)"),
    ("tinyq_meta", "CREATE TABLE tinyq_meta (key TEXT PRIMARY KEY, value)"),
])
def test_foreign_tinyq_table_before_first_use_is_a_clear_error(db_path, table, ddl):
    conn = raw_connect(db_path)
    conn.execute(ddl)
    conn.execute(f"INSERT INTO {table} VALUES ({', '.join(['1'] * (2 if 'meta' in table else 1))})")
    theirs = conn.execute(f"SELECT * FROM {table}").fetchall()
    for fn, sql in [("tq_add", "SELECT tq_add('q', '{}')"), ("tq_claim", "SELECT * FROM tq_claim('q', 'w', 1)"),
                    ("tq_queue", "SELECT tq_queue('q', '{\"lease\": \"1m\"}')")]:
        err = error_of(conn, sql)
        assert str(err).startswith(fn + ":"), str(err)
        assert table in str(err), f"the error does not name the table {table}: {err}"
    # Nothing of tinyq's was created, and the user's table is untouched.
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'tinyq%'")}
    assert names == {table}
    assert conn.execute(f"SELECT * FROM {table}").fetchall() == theirs
    conn.close()


def test_store_of_a_newer_tinyq_is_refused_by_every_function(db_path):
    conn = connect(db_path)
    one(conn, "SELECT tq_add('q', '{}', '{\"id\": \"a\"}')")
    conn.close()
    other = sqlite3.connect(db_path)
    other.execute("UPDATE tinyq_meta SET value = 99 WHERE key = 'schema_version'")
    other.commit()
    other.close()
    conn = connect(db_path)
    before = snapshot(conn)
    for fn, sql in [("tq_add", "SELECT tq_add('q', '{}')"), ("tq_get", "SELECT tq_get('a')"),
                    ("tq_claim", "SELECT * FROM tq_claim('q', 'w', 1)"), ("tq_cancel", "SELECT tq_cancel('a')"),
                    ("tq_jobs", "SELECT * FROM tq_jobs"), ("tq_watch", "SELECT * FROM tq_watch(0)"),
                    ("tq_queue", "SELECT tq_queue('q', '{\"lease\": \"1m\"}')"), ("tq_sweep", "SELECT tq_sweep()")]:
        err = error_of(conn, sql)
        assert str(err).startswith(fn + ":"), str(err)
        assert "newer" in str(err) and "99" in str(err), str(err)
    assert snapshot(conn) == before
    assert "schema 99" in one(conn, "SELECT tq_debug()")
    conn.close()


def test_file_that_is_not_a_database(tmp_path):
    path = str(tmp_path / "garbage.db")
    with open(path, "wb") as f:
        f.write(bytes(random.Random(7).getrandbits(8) for _ in range(16384)))
    conn = raw_connect(path)
    try:
        conn.execute("SELECT 1").fetchall()
    except sqlite3.DatabaseError as e:
        # Newer SQLite (3.52 here) reads the header while preparing any top-level SELECT, even
        # SELECT 1: every statement fails with SQLite's own message, before tinyq runs.
        assert e.sqlite_errorcode == sqlite3.SQLITE_NOTADB, e.sqlite_errorname
        for sql in ["SELECT tq_add('q', '{}')", "SELECT tq_version()", "SELECT * FROM tq_jobs"]:
            err = error_of(conn, sql)
            assert "not a database" in str(err) and err.sqlite_errorcode == sqlite3.SQLITE_NOTADB, str(err)
        conn.close()
        return
    for fn, sql in [("tq_add", "SELECT tq_add('q', '{}')"), ("tq_get", "SELECT tq_get('a')"),
                    ("tq_cancel", "SELECT tq_cancel('a')"), ("tq_settle", "SELECT tq_settle('a', 1, 'done')")]:
        err = error_of(conn, sql)
        assert str(err).startswith(fn + ":") and "not a database" in str(err), str(err)
        assert err.sqlite_errorcode == sqlite3.SQLITE_NOTADB, err.sqlite_errorname
    # A table-valued function makes SQLite read the schema while preparing the statement,
    # before tinyq runs: SQLite's own message.
    for sql in ["SELECT * FROM tq_claim('q', 'w', 1)", "SELECT * FROM tq_watch(0)", "SELECT * FROM tq_jobs"]:
        err = error_of(conn, sql)
        assert "not a database" in str(err), str(err)
    assert one(conn, "SELECT tq_version()")
    conn.close()


# --------------------------------------------------------------------------- kill -9 mid-claim
CLAIM_LOOP = r"""
import json, sys, sqlite3
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
conn.enable_load_extension(True)
conn.load_extension(sys.argv[2])
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA synchronous=NORMAL")
rounds = 0
while True:
    rows = conn.execute("SELECT id, attempt FROM tq_claim('q', 'doomed', 500, '{\"lease\": \"1h\"}')").fetchall()
    conn.execute("BEGIN IMMEDIATE")
    for job_id, attempt in rows:
        assert conn.execute("SELECT tq_settle(?, ?, 'snooze', 0)", (job_id, attempt)).fetchone()[0] == 1
    conn.execute("COMMIT")
    rounds += 1
    print(json.dumps({"round": rounds, "claimed": len(rows)}), flush=True)
"""


def test_kill_9_during_batch_claims_leaves_every_job_claimable(db_path):
    """DUR-02: a process claiming 500 jobs in a loop is SIGKILLed at a random moment; the
    next process claims all 500 at once (no lease of the dead process survives it)."""
    conn = connect(db_path)
    one(conn, "SELECT tq_queue('q', '{\"lease\": \"1h\", \"attempts\": 1000000}')")
    conn.execute("BEGIN IMMEDIATE")
    for i in range(500):
        one(conn, "SELECT tq_add('q', ?, ?)", json.dumps({"n": i}), json.dumps({"id": f"j{i:03}"}))
    conn.execute("COMMIT")
    conn.close()
    rng = random.Random()
    seed = rng.randrange(10**6)
    rng.seed(seed)
    attempts_seen = {}
    for kill in range(3):
        proc = subprocess.Popen(["/usr/bin/python3", "-c", CLAIM_LOOP, db_path, EXT],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = proc.stdout.readline()       # it has done at least one whole round
            assert first, f"the claiming process died: {proc.stderr.read()}"
            time.sleep(rng.uniform(0.0, 0.4))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL
        # The next process: this one (the dead one's pid is gone and reaped).
        conn = connect(db_path)
        check_store(conn)
        rows = claim(conn, "q", "next", 1000, {"lease": "1h"})
        stuck = conn.execute("SELECT id, worker, lease_until FROM tinyq_jobs "
                             "WHERE status = 'running' AND worker <> 'next' LIMIT 5").fetchall()
        assert len(rows) == 500, (f"seed {seed}, kill {kill}: the next claim got {len(rows)} of 500 jobs; "
                                  f"still leased by the dead process: {stuck}")
        for r in rows:
            assert r["attempt"] > attempts_seen.get(r["id"], 0), "an attempt number was reused"
            attempts_seen[r["id"]] = r["attempt"]
        # Give them back for the next round.
        conn.execute("BEGIN IMMEDIATE")
        for r in rows:
            assert one(conn, "SELECT tq_settle(?, ?, 'snooze', 0)", r["id"], r["attempt"]) == 1
        conn.execute("COMMIT")
        check_store(conn)
        conn.close()


# --------------------------------------------------------------------------- a second SQLite
APSW_VENV = os.environ.get("TINYQ_APSW_VENV", "/tmp/tinyq-apsw-venv")


def apsw_python():
    """A python with apsw (a current SQLite, 3.5x) in a venv; None when pip cannot install it."""
    py = os.path.join(APSW_VENV, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import apsw"], capture_output=True).returncode == 0:
        return py
    made = subprocess.run(["/usr/bin/python3", "-m", "venv", APSW_VENV], capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        return None
    got = subprocess.run([os.path.join(APSW_VENV, "bin", "pip"), "install", "-q", "apsw"],
                         capture_output=True, text=True, timeout=600)
    return py if got.returncode == 0 else None


def test_scenarios_on_a_second_sqlite_through_apsw():
    """tests/support/run_apsw.py: add/claim/settle, order, steps, watch, limits, errors, busy,
    transactions, triggers, DIRECTONLY and many connections, on apsw's SQLite."""
    py = apsw_python()
    if py is None:
        pytest.skip(f"pip could not install apsw into {APSW_VENV}")
    proc = subprocess.run([py, os.path.join(HERE, "support", "run_apsw.py"), EXT + ".so"],
                          capture_output=True, text=True, timeout=300)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version = proc.stdout.splitlines()[0]
    assert "SQLite 3." in version and "SQLite 3.40" not in version, version
