//! The pulse a blocking call (tq_wait) runs on its connection, so that the host's interrupt
//! and progress handler reach it (HOST-01).

use std::ffi::{c_char, c_int};

use super::ffi::{sql, sqlite3_stmt, SQLITE_DONE, SQLITE_ROW};
use super::{Conn, Result, SQLITE_OK};

/// A statement that a call which blocks (tq_wait) runs on its own connection every few
/// tens of ms: SQLite looks at sqlite3_interrupt and calls the connection's progress
/// handler only while statements run, so a host that bounds a query's time (Datasette)
/// stays in charge (HOST-01). It reads no table, so it takes no lock.
pub struct Pulse<'c> {
    conn: &'c Conn,
    /// Prepared by `conn`, finalized on drop; its VM step count is never reset, so SQLite,
    /// which calls the progress handler every N steps counted over a statement's runs,
    /// calls it every run for N up to 2,000 and every few runs above.
    raw: *mut sqlite3_stmt,
}

/// About 2,000 VM steps (17 per row), twice the N of Datasette's progress handler, for
/// about 50 µs.
const PULSE_STEPS_SQL: &str =
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 120) SELECT count(*) FROM n";

impl Conn {
    pub fn pulse(&self) -> Result<Pulse<'_>> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the text outlives the call; a failed prepare leaves `raw` null.
        let rc = unsafe {
            sql!(prepare_v2(
                self.db,
                PULSE_STEPS_SQL.as_ptr().cast::<c_char>(),
                PULSE_STEPS_SQL.len() as c_int,
                &raw mut raw,
                std::ptr::null_mut()
            ))
        };
        if rc != SQLITE_OK || raw.is_null() {
            return Err(self.error());
        }
        Ok(Pulse { conn: self, raw })
    }
}

impl Pulse<'_> {
    /// Runs the statement once: Err (SQLITE_INTERRUPT, "interrupted") when the connection
    /// was interrupted or its progress handler asked to stop.
    pub fn beat(&mut self) -> Result<()> {
        // SAFETY: `raw` is this connection's live statement, used by this Pulse alone.
        unsafe {
            let mut rc = sql!(step(self.raw));
            while rc == SQLITE_ROW {
                rc = sql!(step(self.raw));
            }
            let r = if rc == SQLITE_DONE { Ok(()) } else { Err(self.conn.error()) };
            sql!(reset(self.raw));
            r
        }
    }
}

impl Drop for Pulse<'_> {
    fn drop(&mut self) {
        unsafe { sql!(finalize(self.raw)) };
    }
}
