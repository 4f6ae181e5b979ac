"""The WAL stays bounded when claims are the writers (src/wal.rs).

A claim commits inside its own statement, where SQLite's automatic checkpoint cannot run;
tinyq takes the checkpoint over on a connection that claims and runs an owed one before
the next claim. The WAL file's size is its high-water mark, so it shows the worst moment.
"""
import os

from helpers import connect, one

FRAME = 4096 + 24  # page + frame header


def wal_frames(path):
    return os.path.getsize(path + "-wal") // FRAME


def backlog(path, n):
    """n waiting jobs, added and checkpointed by another connection."""
    adder = connect(path)
    adder.execute("BEGIN")
    for i in range(n):
        adder.execute("SELECT tq_add('q', ?)", (str(i),))
    adder.execute("COMMIT")
    adder.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    adder.close()


def claim_one(conn):
    rows = conn.execute("SELECT id FROM tq_claim('q', 'w', 1, '{\"lease\": \"1h\"}')").fetchall()
    assert len(rows) == 1


def test_claims_alone_keep_the_wal_near_wal_autocheckpoint(db_path):
    backlog(db_path, 1200)
    worker = connect(db_path)
    worker.execute("PRAGMA wal_autocheckpoint = 100")
    for _ in range(1200):
        claim_one(worker)  # ~4 frames each: 4,800 frames if nothing checkpointed
    assert wal_frames(db_path) < 300, wal_frames(db_path)
    assert one(worker, "SELECT count(*) FROM tinyq_jobs WHERE status = 'running'") == 1200
    worker.close()


def test_checkpoints_turned_off_stay_off(db_path):
    backlog(db_path, 400)
    worker = connect(db_path)
    worker.execute("PRAGMA wal_autocheckpoint = 0")
    for _ in range(400):
        claim_one(worker)
    assert wal_frames(db_path) >= 400 * 3, "no checkpoint ran: the WAL holds every claim"
    worker.close()


def test_other_commits_on_a_claiming_connection_still_checkpoint(db_path):
    backlog(db_path, 1)
    worker = connect(db_path)
    worker.execute("PRAGMA wal_autocheckpoint = 100")
    claim_one(worker)  # tinyq's hook takes over from SQLite's
    assert one(worker, "PRAGMA wal_autocheckpoint") == 0  # SQLite reports only its own hook
    for i in range(1000):
        worker.execute("SELECT tq_add('other', ?)", (str(i),))  # ~4 frames each
    assert wal_frames(db_path) < 250, wal_frames(db_path)
    worker.close()


def test_a_new_wal_autocheckpoint_is_taken_up_by_later_claims(db_path):
    backlog(db_path, 900)
    worker = connect(db_path)
    worker.execute("PRAGMA wal_autocheckpoint = 100")
    claim_one(worker)
    worker.execute("PRAGMA wal_autocheckpoint = 40")  # SQLite's hook is back, with 40
    worker.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for _ in range(899):
        claim_one(worker)  # ~3,600 frames if nothing checkpointed
    # Until the next look at the setting (at most 64 claims), claims cannot checkpoint.
    assert wal_frames(db_path) < 64 * 5 + 100, wal_frames(db_path)
    worker.close()
