//! A private in-memory database, for what tinyq must learn from SQLite itself rather than
//! from its own reading of SQL: tq_check builds a new store there to see each object as
//! SQLite keeps it (src/check/).

use std::ffi::c_int;

use super::ffi::{sql, sqlite3};
use super::{Conn, Error, Result, SQLITE_OK};

const SQLITE_OPEN_READWRITE: c_int = 0x02;
const SQLITE_OPEN_CREATE: c_int = 0x04;
const SQLITE_OPEN_MEMORY: c_int = 0x80;

/// Runs `f` on a new, empty in-memory database, closed after it (tinyq is not loaded there).
pub fn with_memory_db<T>(f: impl FnOnce(&Conn) -> Result<T>) -> Result<T> {
    let mut db: *mut sqlite3 = std::ptr::null_mut();
    // SAFETY: open_v2 writes a connection (or null) to `db`; it is closed below, after the
    // `Conn` over it and every statement it prepared (none is cached: tq_statements is not
    // registered there, so each is finalized when given back) are gone.
    unsafe {
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_MEMORY;
        let rc = sql!(open_v2(c":memory:".as_ptr(), &raw mut db, flags, std::ptr::null()));
        if rc != SQLITE_OK || db.is_null() {
            sql!(close(db));
            return Err(Error { code: rc, msg: "cannot open an in-memory database".into() });
        }
        let conn = Conn::new(db);
        let r = f(&conn);
        conn.clear_cache();
        drop(conn);
        sql!(close(db));
        r
    }
}
