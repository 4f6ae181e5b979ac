//! The WAL hook that takes over SQLite's automatic checkpoint (why: see src/wal.rs).
//! A checkpoint that cannot run inside a claim's statement is owed, by database handle,
//! and the next claim runs it. The hook keeps no pointer to tinyq's connection state: its
//! threshold is its argument, so it stays valid whatever is unloaded or re-registered
//! (the library itself is never unloaded: see build.rs).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;

use super::ffi::{sql, sqlite3};
use super::{guard, Conn, SQLITE_OK};

/// Database handles (as addresses) whose last automatic checkpoint could not run.
static OWED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Installs tinyq's hook in place of SQLite's: a PASSIVE checkpoint once a commit leaves
/// `frames` frames or more in the WAL.
pub fn take_over(conn: &Conn, frames: i64) {
    let threshold = usize::try_from(frames).unwrap_or(usize::MAX);
    // SAFETY: the hook reads its argument as a number, never as a pointer.
    unsafe { sql!(wal_hook(conn.db, Some(on_commit), threshold as *mut c_void)) };
}

/// Runs the checkpoint this connection owes, if it owes one.
pub fn run_owed(conn: &Conn) {
    if take_owed(conn.db) {
        // The call SQLite's own hook makes: PASSIVE, it waits for no one.
        // SAFETY: a live connection and a NUL-terminated schema name.
        unsafe { sql!(wal_checkpoint(conn.db, c"main".as_ptr())) };
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
        if usize::try_from(frames).unwrap_or(0) >= threshold as usize {
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
    OWED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
