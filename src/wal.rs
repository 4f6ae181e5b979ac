//! Keeping the WAL bounded when claims are the writers.
//!
//! A claim commits inside its own statement (`SELECT * FROM tq_claim(...)`), and SQLite
//! keeps a read transaction open on `main` until that statement ends, so the automatic
//! checkpoint that follows the claim's commit fails (SQLITE_LOCKED). Where claims are the
//! only writers the WAL would grow without bound.
//!
//! So a connection that claims takes over the automatic checkpoint: tinyq's WAL hook does
//! what SQLite's own does (a PASSIVE checkpoint once a commit leaves `wal_autocheckpoint`
//! frames or more), and when that checkpoint cannot run it is owed: the next claim runs it
//! first, while it holds no transaction. A claim checkpoints only when one is due, never
//! on a schedule (that cost a claim ~14 µs on average while adds and settles checkpointed
//! anyway).
//!
//! The hook is installed only where SQLite's own is in place (`PRAGMA wal_autocheckpoint`
//! reads N > 0), with the same N; once it is, that PRAGMA reads 0 (SQLite reports the
//! threshold of its own hook only). Setting the PRAGMA puts SQLite's hook back, and a later
//! claim takes over again with the new N; setting it to 0 turns checkpoints off for good.
//! The hook itself is SQLite glue: src/sqlite/checkpoint.rs.

use crate::sqlite::{checkpoint, Conn};

/// Claims between two looks at `PRAGMA wal_autocheckpoint` once the hook is in place.
const LOOK_EVERY: u32 = 64;

/// Called by a claim before its transaction: takes over the automatic checkpoint if
/// SQLite's hook is in place, and runs a checkpoint that is owed.
pub fn before_claim(conn: &Conn) {
    if !conn.autocommit() || conn.write_in_progress() {
        return; // inside a transaction or a statement: no checkpoint can run here
    }
    let left = conn.claims_until_wal_look.get();
    if left > 0 {
        conn.claims_until_wal_look.set(left - 1);
    } else {
        conn.claims_until_wal_look.set(LOOK_EVERY);
        if let Ok(Some(frames)) = conn.one_int("PRAGMA wal_autocheckpoint", &[]) {
            if frames > 0 {
                checkpoint::take_over(conn, frames);
            }
        }
    }
    checkpoint::run_owed(conn);
}
