//! How tinyq gets onto a connection: the entry point SQLite calls on `.load` (and for
//! sqlite3_auto_extension), and, linked into a Rust program, `register` and
//! `auto_extension` over rusqlite. Each first checks the SQLite: in the loadable build the
//! routines table SQLite hands over is as long as the SQLite that made it, so tinyq reads
//! two of its oldest fields (the version) and stops, with a message, on a SQLite older than
//! the oldest it is tested on.

use std::ffi::{c_char, c_int};
use std::rc::Rc;

use super::ffi::{self, sqlite3, sqlite3_api_routines};
use super::{guard, Conn, Error, Result, SQLITE_ERROR};

/// The oldest SQLite tinyq is tested on (Debian 12's 3.40.1), as sqlite3_libversion_number.
pub const MIN_VERSION: c_int = 3_040_001;

/// "3.40.1" for 3040001.
fn version_text(n: c_int) -> String {
    format!("{}.{}.{}", n / 1_000_000, n / 1000 % 1000, n % 1000)
}

/// Fails on a SQLite older than MIN_VERSION; `text` is its own version text, if known.
fn refuse_older(number: c_int, text: Option<String>) -> Result<()> {
    if number >= MIN_VERSION {
        return Ok(());
    }
    Err(Error {
        code: SQLITE_ERROR,
        msg: format!(
            "needs SQLite {} or newer (the oldest it is tested on), but was loaded into SQLite {}",
            version_text(MIN_VERSION),
            text.unwrap_or_else(|| version_text(number))
        ),
    })
}

/// Fails on a SQLite older than MIN_VERSION, reading nothing past the table's oldest fields.
///
/// # Safety
/// `api` is the routines table SQLite passed to the entry point.
#[cfg(feature = "loadable")]
unsafe fn check_version(api: *const sqlite3_api_routines) -> Result<()> {
    let api = api.as_ref().ok_or_else(|| Error::bad("loaded without SQLite's routines table"))?;
    refuse_older(api.libversion_number.map_or(0, |f| f()), api.libversion.map(|f| ffi::c_text(f())))
}

/// Checks the SQLite that handed over `api` and keeps its routines for every later call.
///
/// # Safety
/// `api` is the routines table SQLite passed to the entry point.
#[cfg(feature = "loadable")]
unsafe fn take_routines(api: *const sqlite3_api_routines) -> Result<()> {
    check_version(api)?;
    super::api::set_api(api.cast_mut());
    Ok(())
}

/// Linked in, the routines are the program's SQLite's symbols: only the version is checked.
#[cfg(not(feature = "loadable"))]
unsafe fn take_routines(_: *const sqlite3_api_routines) -> Result<()> {
    refuse_older(ffi::sql!(libversion_number()), Some(ffi::libversion()))
}

/// The entry point's error message, which SQLite frees: allocated through the table given,
/// not the one kept, which is set only once the check passed.
///
/// # Safety
/// `api` is the routines table SQLite passed to the entry point.
#[cfg(feature = "loadable")]
unsafe fn error_message(api: *const sqlite3_api_routines, msg: &str) -> *mut c_char {
    api.as_ref().map_or(std::ptr::null_mut(), |api| super::api::sqlite_string_in(api, msg))
}

/// The entry point's error message, which SQLite frees.
#[cfg(not(feature = "loadable"))]
unsafe fn error_message(_: *const sqlite3_api_routines, msg: &str) -> *mut c_char {
    ffi::sqlite_string(msg)
}

/// Checks the SQLite, then runs lib.rs's registration list on the connection.
///
/// # Safety
/// `db` is a live connection; `api` is null or the routines table of its SQLite.
unsafe fn install(db: *mut sqlite3, api: *const sqlite3_api_routines) -> Result<()> {
    guard(|| {
        take_routines(api)?;
        crate::register_all(&Rc::new(Conn::new(db)))
    })
}

/// The entry point SQLite finds for `.load ./dist/tinyq`, and the one a host hands
/// sqlite3_auto_extension to have tinyq on every connection it opens: checks the SQLite,
/// then registers tinyq's functions and tables on the connection.
///
/// # Safety
/// Called by SQLite with a live connection and its routines table.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_tinyq_init(
    db: *mut sqlite3,
    err: *mut *mut c_char,
    api: *const sqlite3_api_routines,
) -> c_int {
    match install(db, api) {
        Ok(()) => 0,
        Err(e) => {
            if !err.is_null() {
                *err = error_message(api, &format!("tinyq: {}", e.msg));
            }
            e.code
        }
    }
}

/// Registers tinyq's functions and tables on a rusqlite connection (the `rusqlite`
/// feature). The SQLite it runs on is the program's, linked in (bundled or the system's).
#[cfg(feature = "rusqlite")]
pub fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    // SAFETY: the handle of a live connection, which SQLite closes only after it has
    // dropped tinyq's functions and tables (and with them the Conn holding the handle).
    unsafe { install(conn.handle(), std::ptr::null()) }.map_err(|e| {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(e.code), Some(format!("tinyq: {}", e.msg)))
    })
}

/// Has SQLite register tinyq on every connection the program opens from now on
/// (sqlite3_auto_extension; the `rusqlite` feature). Calling it again adds nothing.
#[cfg(feature = "rusqlite")]
pub fn auto_extension() -> rusqlite::Result<()> {
    // SAFETY: sqlite3_tinyq_init has the signature SQLite calls an auto extension with.
    match unsafe { rusqlite::ffi::sqlite3_auto_extension(Some(sqlite3_tinyq_init)) } {
        0 => Ok(()),
        code => Err(rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_text_reads_sqlite_numbers() {
        assert_eq!(version_text(MIN_VERSION), "3.40.1");
        assert_eq!(version_text(3_039_004), "3.39.4");
        assert_eq!(version_text(3_100_000), "3.100.0");
    }

    #[cfg(feature = "loadable")]
    #[test]
    fn the_check_refuses_an_older_sqlite_by_both_versions() {
        unsafe extern "C" fn old() -> c_int {
            3_031_001
        }
        unsafe extern "C" fn old_text() -> *const c_char {
            c"3.31.1".as_ptr()
        }
        // SAFETY: a table of null routines but the two the check reads.
        let mut api: sqlite3_api_routines = unsafe { std::mem::zeroed() };
        api.libversion_number = Some(old);
        api.libversion = Some(old_text);
        let e = unsafe { check_version(&raw const api) }.unwrap_err();
        assert_eq!(
            e.msg,
            "needs SQLite 3.40.1 or newer (the oldest it is tested on), but was loaded into SQLite 3.31.1"
        );
    }
}
