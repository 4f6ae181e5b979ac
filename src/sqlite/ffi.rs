//! The raw SQLite API as tinyq uses it: the routines pointer SQLite hands the entry point,
//! values in and out of functions, errors with their codes, and the panic guard that keeps
//! a bug from aborting the host (ERR-02).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};

pub use sqlite_loadable::ext::{
    sqlite3, sqlite3_api_routines, sqlite3_context, sqlite3_index_info, sqlite3_module, sqlite3_stmt, sqlite3_value,
    sqlite3_vtab, sqlite3_vtab_cursor,
};

pub const SQLITE_OK: c_int = 0;
pub const SQLITE_ERROR: c_int = 1;
pub const SQLITE_INTERNAL: c_int = 2;
pub const SQLITE_ROW: c_int = 100;
pub const SQLITE_DONE: c_int = 101;

const SQLITE_INTEGER: c_int = 1;
const SQLITE_FLOAT: c_int = 2;
const SQLITE_TEXT: c_int = 3;
const SQLITE_BLOB: c_int = 4;

/// SQLITE_TRANSIENT: SQLite copies the bytes before the call returns.
pub fn transient() -> Option<unsafe extern "C" fn(*mut c_void)> {
    // SAFETY: SQLite defines SQLITE_TRANSIENT as the pointer value -1.
    unsafe { std::mem::transmute::<isize, Option<unsafe extern "C" fn(*mut c_void)>>(-1) }
}

static API: AtomicPtr<sqlite3_api_routines> = AtomicPtr::new(std::ptr::null_mut());

/// Keeps the routines pointer from the entry point (SQLITE_EXTENSION_INIT2).
pub fn set_api(api: *mut sqlite3_api_routines) {
    if !api.is_null() {
        API.store(api, Ordering::Release);
    }
}

/// The routines of the SQLite that loaded us. tinyq never calls the copy of SQLite that
/// sqlite3ext-sys compiles in: every call goes through this table.
pub fn api() -> &'static sqlite3_api_routines {
    let p = API.load(Ordering::Acquire);
    assert!(!p.is_null(), "tinyq: SQLite API used before the entry point ran");
    // SAFETY: SQLite keeps the routines table alive for the life of the process.
    unsafe { &*p }
}

/// Calls one routine of the API table: `sql!(step(stmt))`.
#[macro_export]
macro_rules! sql {
    ($name:ident ( $($arg:expr),* $(,)? )) => {
        (crate::ffi::api().$name.expect(concat!("SQLite lacks ", stringify!($name))))($($arg),*)
    };
}

/// A SQL value, owned.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Val {
    /// Copies a value SQLite passed to a function.
    pub fn from_raw(v: *mut sqlite3_value) -> Val {
        unsafe {
            match sql!(value_type(v)) {
                SQLITE_INTEGER => Val::Int(sql!(value_int64(v))),
                SQLITE_FLOAT => Val::Real(sql!(value_double(v))),
                SQLITE_TEXT => {
                    let p = sql!(value_text(v));
                    let n = sql!(value_bytes(v)) as usize;
                    let bytes = if p.is_null() { &[][..] } else { std::slice::from_raw_parts(p, n) };
                    match std::str::from_utf8(bytes) {
                        Ok(s) => Val::Text(s.to_owned()),
                        Err(_) => Val::Blob(bytes.to_vec()),
                    }
                }
                SQLITE_BLOB => {
                    let p = sql!(value_blob(v)) as *const u8;
                    let n = sql!(value_bytes(v)) as usize;
                    Val::Blob(if p.is_null() { vec![] } else { std::slice::from_raw_parts(p, n).to_vec() })
                }
                _ => Val::Null,
            }
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Val::Null)
    }

    /// The name of this value's type, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Val::Null => "NULL",
            Val::Int(_) => "an integer",
            Val::Real(_) => "a real",
            Val::Text(_) => "text",
            Val::Blob(_) => "a blob",
        }
    }

    /// This value as JSON: text that parses as JSON is embedded, other text is a string.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Val::Null => serde_json::Value::Null,
            Val::Int(i) => (*i).into(),
            Val::Real(f) => serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into),
            Val::Text(s) => serde_json::from_str(s).unwrap_or_else(|_| s.clone().into()),
            Val::Blob(_) => serde_json::Value::Null,
        }
    }
}

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
}

/// `Err(Error::bad(format!(...)))`.
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => { return Err(crate::ffi::Error::bad(format!($($t)*))) };
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
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            Err(Error { code: SQLITE_INTERNAL, msg: format!("internal error ({what})") })
        }
    }
}

/// What a scalar function returns.
pub enum Out {
    Null,
    Int(i64),
    Text(String),
    Val(Val),
}

pub fn set_result(ctx: *mut sqlite3_context, out: Out) {
    unsafe {
        match out {
            Out::Null | Out::Val(Val::Null) => sql!(result_null(ctx)),
            Out::Int(i) | Out::Val(Val::Int(i)) => sql!(result_int64(ctx, i)),
            Out::Val(Val::Real(f)) => sql!(result_double(ctx, f)),
            Out::Text(s) | Out::Val(Val::Text(s)) => {
                sql!(result_text64(ctx, s.as_ptr() as *const c_char, s.len() as u64, transient(), 1))
            }
            Out::Val(Val::Blob(b)) => {
                sql!(result_blob64(ctx, b.as_ptr() as *const c_void, b.len() as u64, transient()))
            }
        }
    }
}

pub fn set_error(ctx: *mut sqlite3_context, err: &Error) {
    unsafe {
        sql!(result_error(ctx, err.msg.as_ptr() as *const c_char, err.msg.len() as c_int));
        sql!(result_error_code(ctx, err.code));
    }
}

/// A copy of a C string SQLite owns.
pub fn c_text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p).to_string_lossy().into_owned() }
}

/// A string SQLite may free with sqlite3_free (for zErrMsg).
pub fn sqlite_string(s: &str) -> *mut c_char {
    unsafe {
        let p = sql!(malloc64((s.len() + 1) as u64)) as *mut u8;
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
            *p.add(s.len()) = 0;
        }
        p as *mut c_char
    }
}
