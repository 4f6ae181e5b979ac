"""A disk that fills up while the WAL is checkpointed, and a WAL that cannot be truncated.

Through the VFS of tests/support/cutvfs.py (files may not grow past a byte budget: SQLITE_FULL;
truncating the -wal fails: SQLITE_IOERR), the mixed workload of tests/test_powercut.py
keeps running, with synchronous=FULL. Every call either returns (acknowledged) or fails
with an error and changes nothing (the state seen through tinyq's functions is the same
as before it). While the fault lasts, a power-cut image must still hold everything
acknowledged. When space returns (or truncating works again) a checkpoint completes, the
WAL is emptied, `PRAGMA integrity_check` is ok, the invariants hold, and the store holds
exactly what was acknowledged.
"""
import os

import pytest

apsw = pytest.importorskip("apsw", reason="python3-apsw is needed (make deps)")

from support.cutvfs import CutVFS, Disk, remove, scratch_dir  # noqa: E402
from test_fuzz import check_invariants  # noqa: E402
from test_powercut import Workload, drain, fingerprint_of, recovered  # noqa: E402

MIX = ["add", "add", "trigger_add", "batch", "claim", "claim", "step", "progress", "settle",
       "settle", "cancel", "sweep", "checkpoint"]


@pytest.fixture
def store(monkeypatch):
    # apsw reports every exception a VFS method raises through sys.excepthook; the refused
    # writes are the point here, so count them quietly (Disk.refused) instead.
    monkeypatch.setattr("sys.excepthook", lambda *exc: None)
    folder = scratch_dir("tinyq-full-")
    disk = Disk()
    name = f"full-{os.path.basename(folder)}"
    vfs = CutVFS(name, disk)
    wl = Workload(folder, name, "FULL", seed=5)
    wl.setup()
    yield folder, disk, wl
    try:
        if not wl.closed:
            wl.close()
    finally:
        vfs.unregister()
        remove(folder)


def attempt(wl, name):
    """One call of the workload: True if it returned; else it failed and changed nothing."""
    before = wl.prints[-1]
    try:
        getattr(wl, name)()
    except (apsw.FullError, apsw.IOError) as e:
        for conn in (wl.prod, wl.work):
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
        assert wl.fingerprint() == before, f"{name} failed ({e}) but changed the store"
        return False
    wl.returned(name)
    return True


def check_image(wl, disk, folder, label):
    """A power cut now: the synced files hold every acknowledged call."""
    image = os.path.join(folder, f"cut-{label}")
    disk.image(image)
    conn = recovered(image, wl.t_far)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        check_invariants(conn, wl.ever_added, {}, wl.t_far)
        fp = fingerprint_of(lambda sql, *a: conn.execute(sql, a).fetchall())
        assert fp == wl.prints[-1], f"{label}: a power cut would lose acknowledged calls"
    finally:
        conn.close()


def run_mix(wl, rounds):
    ok = failed = 0
    for i in range(rounds):
        if attempt(wl, MIX[wl.rnd.randrange(len(MIX))]):
            ok += 1
        else:
            failed += 1
    return ok, failed


def test_disk_full_during_checkpoint_recovers_when_space_returns_nothing_acknowledged_lost(store):
    folder, disk, wl = store
    for c in (wl.prod, wl.work, wl.reader):
        c.execute("PRAGMA wal_autocheckpoint=0").fetchall()    # let the WAL grow first
    # Enough adds that checkpointing them grows the database by more than the 8 KB left
    # (60 came to exactly 8 KB once the store's rows grew in schema 7).
    for _ in range(200):
        wl.add()
        wl.returned("add")
    disk.space = 8 * 1024      # a few pages more, then the disk is full
    ckpt_errors = 0
    for mode in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
        try:
            wl.rows(wl.prod, f"PRAGMA wal_checkpoint({mode})")
        except apsw.FullError:
            ckpt_errors += 1
    ok, failed = run_mix(wl, 150)
    for c in (wl.prod, wl.work):        # tinyq's own checkpoints, at claims, meet it too
        c.execute("PRAGMA wal_autocheckpoint=40").fetchall()
    ok2, failed2 = run_mix(wl, 100)
    check_image(wl, disk, folder, "while-full")
    assert disk.refused["write"] > 0 and ckpt_errors > 0, "the disk never filled up"
    assert failed + failed2 > 0 and ok + ok2 > 0
    # Space returns: a checkpoint completes, the WAL is emptied, everything acknowledged is there.
    disk.space = None
    busy, log, done = wl.rows(wl.prod, "PRAGMA wal_checkpoint(TRUNCATE)")[0]
    assert busy == 0 and log == done == 0
    ok3, failed3 = run_mix(wl, 60)
    assert failed3 == 0
    check_image(wl, disk, folder, "after")
    print(f"\ndisk full during checkpoints: {ckpt_errors} of 4 explicit checkpoints and "
          f"{disk.refused['write']} writes refused; {ok + ok2} calls acknowledged, {failed + failed2} "
          f"failed cleanly while full; {ok3} after space returned; nothing acknowledged lost")
    wl.close()
    conn = recovered(os.path.dirname(wl.path), wl.t_far)
    try:
        assert fingerprint_of(lambda sql, *a: conn.execute(sql, a).fetchall()) == wl.prints[-1]
        drain(conn, wl.t_far)
    finally:
        conn.close()


def test_wal_that_cannot_be_truncated_keeps_working_and_stays_bounded(store):
    folder, disk, wl = store
    disk.no_truncate = True
    sizes, refused_ckpt = [], 0
    for round_ in range(6):
        run_mix(wl, 60)
        try:
            wl.rows(wl.prod, "PRAGMA wal_checkpoint(TRUNCATE)")
        except apsw.IOError:
            refused_ckpt += 1
        sizes.append(wal_size_of(wl))
        check_image(wl, disk, folder, f"no-truncate-{round_}")
    assert disk.refused["truncate"] > 0 and refused_ckpt > 0
    # The WAL is reset and reused from its start: it does not keep growing.
    assert max(sizes[2:]) <= 2 * max(sizes[:2]) + 64 * 4096, sizes
    disk.no_truncate = False
    busy, log, done = wl.rows(wl.prod, "PRAGMA wal_checkpoint(TRUNCATE)")[0]
    assert busy == 0 and log == done == 0 and wal_size_of(wl) == 0
    check_image(wl, disk, folder, "truncated")
    print(f"\nWAL not truncatable: {refused_ckpt} TRUNCATE checkpoints and {disk.refused['truncate']} "
          f"truncates refused; {wl.calls} calls acknowledged; WAL sizes {sizes}; truncated to 0 after")


def wal_size_of(wl):
    path = wl.path + "-wal"
    return os.path.getsize(path) if os.path.exists(path) else 0
