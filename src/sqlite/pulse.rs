//! The pulse a blocking call (tq_wait) runs on its connection, so that the host's interrupt
//! and progress handler reach it (HOST-01).

use super::ffi::{sql, sqlite3_stmt, SQLITE_DONE, SQLITE_ROW};
use super::{Conn, Result};

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
    /// Not from the statement cache: giving a statement back resets its step count (and
    /// adds its work to the counts the cost tests read), which the pulse must keep.
    pub fn pulse(&self) -> Result<Pulse<'_>> {
        Ok(Pulse { conn: self, raw: self.new_statement(PULSE_STEPS_SQL, 0)? })
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
