"""HOST-01: a waiting tq_wait is not ended by another process's lock. A waiter whose
connection has no busy timeout (the sqlite3 shell's default; Python's with timeout=0) looks
at the store while another process writes: in rollback-journal mode (journal_mode=DELETE) a
writer that holds the lock makes that look fail with SQLITE_BUSY ("database is locked").
That look saw nothing yet: the wait looks again at its next wake-up, returns 1 once the job
it waits for is there, and 0 at its deadline if the lock was never free.

Real processes: a waiter with busy_timeout 0, and a writer that holds the write lock most of
the time (BEGIN EXCLUSIVE, an add to another queue, a pause, COMMIT, again) or all along.
Both waiters: inotify (Linux's) and the portable one (TINYQ_WAKE=poll).
"""
import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from helpers import EXT, add, connect, one

WAKES = ["inotify", "poll"]

WAITER = """
import json, sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)   # no busy timeout
conn.enable_load_extension(True)
conn.load_extension(sys.argv[2])
# A program's first statement reads the schema (SQLite 3.52 does so even for SELECT 1): done
# here, before the other process takes the lock, as any program has run a query before it waits.
conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
print(json.dumps({"ready": True}), flush=True)
sys.stdin.readline()                # go
print(json.dumps({"going": True}), flush=True)
if len(sys.argv) > 4:               # the host's bound: the progress handler stops it then
    stop_at = time.monotonic() + float(sys.argv[4])
    conn.set_progress_handler(lambda: time.monotonic() > stop_at, 1000)
began = time.monotonic()
try:
    out = {"r": conn.execute(sys.argv[3]).fetchone()[0]}
except sqlite3.Error as e:
    out = {"error": str(e)}
out["took"] = round(time.monotonic() - began, 2)
print(json.dumps(out), flush=True)
"""

# Holds the write lock most of the time: BEGIN EXCLUSIVE, an add to queue 'other', 20 ms,
# COMMIT, 10 ms free, again, until the file argv[2] exists. After commit number argv[3] (-1: never),
# the same transaction adds job w1 to queue 'wake'. Prints each commit's number.
CHURN = """
import os, sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
conn.enable_load_extension(True)
conn.load_extension(sys.argv[4])
stop, wake_after = sys.argv[2], int(sys.argv[3])
i = 0
while not os.path.exists(stop):
    conn.execute("BEGIN EXCLUSIVE")
    conn.execute("SELECT tq_add('other', '{}')").fetchone()
    if i == wake_after:
        conn.execute("SELECT tq_add('wake', '{}', '{\\"id\\": \\"w1\\"}')").fetchone()
    time.sleep(0.02)
    conn.execute("COMMIT")
    print(i, flush=True)
    i += 1
    # The lock free for a while, as between any writer's transactions: a writer that takes
    # it again at once starves every reader in rollback-journal mode (SQLite has no queue),
    # and a polling waiter, looking every 3 ms, would meet the gap only by chance.
    time.sleep(0.01)
"""

# Holds the write lock until its stdin closes, then rolls back (nothing changes).
HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def store(db_path, journal):
    conn = connect(db_path)
    conn.execute(f"PRAGMA journal_mode={journal}")
    assert one(conn, "PRAGMA journal_mode") == journal
    add(conn, "other", id="o0")      # the store exists; the waited-for queue stays empty
    return conn


def spawn(code, *args, wake="inotify", stdin=None):
    env = dict(os.environ)
    env.pop("TINYQ_WAKE", None)
    if wake == "poll":
        env["TINYQ_WAKE"] = "poll"
    return subprocess.Popen(["/usr/bin/python3", "-c", code, *args], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def sleeping(pid):
    """Is the process's main thread asleep?"""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


def ready_waiter(db_path, statement, wake, *bound):
    """A waiting process that has read the schema and waits for go() to begin its wait."""
    proc = spawn(WAITER, db_path, EXT, statement, *bound, wake=wake, stdin=subprocess.PIPE)
    assert json.loads(proc.stdout.readline()) == {"ready": True}, proc.stderr.read()
    return proc


def go(proc):
    """Begins the wait; returns once the process is asleep inside it (it has looked at the
    store once by then)."""
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline()) == {"going": True}, proc.stderr.read()
    while proc.poll() is None and not sleeping(proc.pid):
        time.sleep(0.01)
    return proc


def waiter(db_path, statement, wake, *bound):
    """A waiting process, asleep inside its wait."""
    return go(ready_waiter(db_path, statement, wake, *bound))


def result(proc):
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return json.loads(line)


def end(*procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.parametrize("journal", ["delete", "wal"])
@pytest.mark.parametrize("wake", WAKES)
def test_HOST_01_a_wait_without_busy_timeout_outlasts_another_process_writing(db_path, tmp_path, wake, journal):
    """The writer commits every ~20 ms, holding the lock between; the waiter (60 s, no busy
    timeout) must still be waiting after 30 of those commits, and wake with 1 once the
    writer's 31st transaction adds the job it waits for (the writer goes on meanwhile)."""
    conn = store(db_path, journal)
    stop = str(tmp_path / "stop")
    w = waiter(db_path, "SELECT tq_wait('wake', '60s')", wake)
    churn = spawn(CHURN, db_path, stop, "30", EXT)
    try:
        for i in range(30):          # 30 commits to another queue, the lock held between
            assert churn.stdout.readline().strip() == str(i), churn.stderr.read()
        assert w.poll() is None, result(w)   # still waiting: the commits were no error
        out = result(w)
    finally:
        open(stop, "w").close()
        churn.wait(timeout=60)
        end(w, churn)
    assert churn.returncode == 0, churn.stderr.read()
    assert out.get("r") == 1, out       # woken by the add, well before its 60 s
    assert one(conn, "SELECT count(*) FROM tq_jobs WHERE queue = 'wake'") == 1
    conn.close()


WAITS = ["SELECT tq_wait('wake', '2s')", "SELECT tq_wait_any('[\"wake\", \"more\"]', '2s')"]


@pytest.mark.parametrize("statement", WAITS)
@pytest.mark.parametrize("wake", WAKES)
def test_HOST_01_a_wait_that_never_gets_to_look_returns_nothing_at_its_deadline(db_path, wake, statement):
    """Another process holds the write lock (rollback-journal mode) from before the wait
    began to after it ended: the waiter never reads the store, and its 2 s end as a wait
    that saw nothing (0, '[]'), not with "database is locked"."""
    store(db_path, "delete").close()
    w = ready_waiter(db_path, statement, wake)
    hold = spawn(HOLD, db_path, stdin=subprocess.PIPE)
    try:
        assert hold.stdout.readline().strip() == "locked", hold.stderr.read()
        out = result(go(w))
    finally:
        hold.stdin.close()
        hold.wait(timeout=60)
        end(w, hold)
    assert hold.returncode == 0, hold.stderr.read()
    assert out.get("r") in (0, "[]"), out
    assert out["took"] >= 1.9, out  # it waited out its timeout


@pytest.mark.parametrize("wake", WAKES)
def test_HOST_01_a_wait_whose_first_look_met_a_lock_looks_again_once_it_is_free(db_path, wake):
    """A job is queued already, but another process holds the lock as the wait begins; it
    then rolls back, which changes nothing in the store (no commit, no new data_version):
    the waiter must look again on its own, and return 1 well before its 60 s."""
    conn = store(db_path, "delete")
    add(conn, "wake", id="w1")
    w = ready_waiter(db_path, "SELECT tq_wait('wake', '60s')", wake)
    hold = spawn(HOLD, db_path, stdin=subprocess.PIPE)
    try:
        assert hold.stdout.readline().strip() == "locked", hold.stderr.read()
        go(w)
        assert w.poll() is None, result(w)   # its look met the lock: no answer yet
        hold.stdin.close()
        assert hold.wait(timeout=60) == 0, hold.stderr.read()
        out = result(w)
    finally:
        end(w, hold)
    assert out.get("r") == 1 and out["took"] < 30, out
    conn.close()


@pytest.mark.parametrize("wake", WAKES)
def test_HOST_01_a_wait_locked_out_of_the_store_still_ends_when_the_host_asks(db_path, wake):
    """Another process holds the write lock all along: the waiter's progress handler asks to
    stop after 0.5 s, and its 60 s wait ends with "interrupted" (not "database is locked",
    not after 60 s)."""
    store(db_path, "delete").close()
    w = ready_waiter(db_path, "SELECT tq_wait('wake', '60s')", wake, "0.5")
    hold = spawn(HOLD, db_path, stdin=subprocess.PIPE)
    try:
        assert hold.stdout.readline().strip() == "locked", hold.stderr.read()
        go(w)
        out = result(w)
    finally:
        hold.stdin.close()
        hold.wait(timeout=60)
        end(w, hold)
    assert "interrupted" in out.get("error", ""), out
    assert out["took"] < 30, out
