//! Errors as SQLite should see them (a result code and a message), and the panic guard
//! that keeps a bug from unwinding into SQLite and aborting the host (ERR-02).

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub const SQLITE_OK: c_int = 0;
pub const SQLITE_ERROR: c_int = 1;
pub const SQLITE_INTERNAL: c_int = 2;
const SQLITE_BUSY: c_int = 5;
const SQLITE_LOCKED: c_int = 6;

/// An error as SQLite should see it: a result code and a message.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub code: c_int,
    pub msg: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Bad input from the caller (SQLITE_ERROR).
    pub fn bad(msg: impl Into<String>) -> Error {
        Error { code: SQLITE_ERROR, msg: msg.into() }
    }

    /// Another connection held a lock this one needed ("database is locked", any extended
    /// code of SQLITE_BUSY or SQLITE_LOCKED): the same statement may succeed later.
    pub fn busy(&self) -> bool {
        matches!(self.code & 0xff, SQLITE_BUSY | SQLITE_LOCKED)
    }
}

/// `Err(Error::bad(format!(...)))`.
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::sqlite::Error::bad(format!($($t)*))) };
}

/// `name: msg`, unless msg already names a tinyq function (an error of a nested call).
pub fn prefixed(name: &str, msg: &str) -> String {
    if msg.starts_with("tq_") && msg.contains(": ") {
        msg.to_string()
    } else {
        format!("{name}: {msg}")
    }
}

/// Runs `f`, turning a panic into an error so that it never unwinds into SQLite.
pub fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            Err(Error { code: SQLITE_INTERNAL, msg: format!("internal error ({what})") })
        }
    }
}
