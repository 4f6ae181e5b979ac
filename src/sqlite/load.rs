//! The entry point SQLite calls on `.load`, and the check that comes before anything
//! else: the routines table SQLite hands over is as long as the SQLite that made it, so
//! tinyq reads two of its oldest fields (the version) and stops, with a message, on a
//! SQLite older than the oldest it is tested on.

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

/// Fails on a SQLite older than MIN_VERSION, reading nothing past the table's oldest fields.
///
/// # Safety
/// `api` is the routines table SQLite passed to the entry point.
unsafe fn check_version(api: *const sqlite3_api_routines) -> Result<()> {
    let api = api.as_ref().ok_or_else(|| Error::bad("loaded without SQLite's routines table"))?;
    let number = api.libversion_number.map_or(0, |f| f());
    if number >= MIN_VERSION {
        return Ok(());
    }
    let text = match api.libversion {
        Some(f) => ffi::c_text(f()),
        None => version_text(number),
    };
    Err(Error {
        code: SQLITE_ERROR,
        msg: format!(
            "needs SQLite {} or newer (the oldest it is tested on), but was loaded into SQLite {text}",
            version_text(MIN_VERSION)
        ),
    })
}

/// The entry point SQLite finds for `.load ./dist/tinyq`: checks the SQLite, then runs
/// lib.rs's registration list on the connection.
///
/// # Safety
/// Called by SQLite with a live connection and its routines table.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_tinyq_init(
    db: *mut sqlite3,
    err: *mut *mut c_char,
    api: *mut sqlite3_api_routines,
) -> c_int {
    let r = guard(|| {
        check_version(api)?;
        ffi::set_api(api);
        sqlite_loadable::ext::faux_sqlite_extension_init2(api);
        crate::register(&Rc::new(Conn::new(db)))
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            if !err.is_null() {
                // Through the table given, not ffi::api(): set only once the check passed.
                if let Some(api) = api.as_ref() {
                    *err = ffi::sqlite_string_in(api, &format!("tinyq: {}", e.msg));
                }
            }
            e.code
        }
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
