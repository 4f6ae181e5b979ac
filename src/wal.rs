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
//! The hook keeps no pointer to tinyq's connection state: its threshold is its argument
//! and what is owed is kept by database handle, so it stays valid whatever is unloaded or
//! re-registered (the library itself is never unloaded: see build.rs).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;

use crate::conn::Conn;
use crate::ffi::{guard, sqlite3, SQLITE_OK};

/// Database handles (as addresses) whose last automatic checkpoint could not run.
static OWED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

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
                unsafe { sql!(wal_hook(conn.db, Some(on_commit), frames as usize as *mut c_void)) };
            }
        }
    }
    if take_owed(conn.db) {
        // The call SQLite's own hook makes: PASSIVE, it waits for no one.
        unsafe { sql!(wal_checkpoint(conn.db, b"main\0".as_ptr() as *const c_char)) };
    }
}

/// SQLite calls this after every commit on a connection where tinyq took over.
unsafe extern "C" fn on_commit(
    threshold: *mut c_void,
    db: *mut sqlite3,
    schema: *const c_char,
    frames: c_int,
) -> c_int {
    let _ = guard(|| {
        // Only `main` holds tinyq's store; other schemas are checkpointed as SQLite would.
        let main = !schema.is_null() && CStr::from_ptr(schema).to_bytes() == b"main";
        if frames as usize >= threshold as usize {
            if sql!(wal_checkpoint(db, schema)) == SQLITE_OK {
                if main {
                    take_owed(db); // done: the next claim need not
                }
            } else if main {
                owe(db); // inside a claim's statement: the next claim runs it
            }
        }
        Ok(())
    });
    SQLITE_OK
}

fn owed() -> std::sync::MutexGuard<'static, Vec<usize>> {
    OWED.lock().unwrap_or_else(|e| e.into_inner())
}

fn owe(db: *mut sqlite3) {
    let mut owed = owed();
    if !owed.contains(&(db as usize)) {
        owed.push(db as usize);
    }
}

/// Forgets what `db` owed; true if it owed a checkpoint.
fn take_owed(db: *mut sqlite3) -> bool {
    let mut owed = owed();
    let before = owed.len();
    owed.retain(|&d| d != db as usize);
    owed.len() != before
}
