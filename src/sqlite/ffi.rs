//! The raw SQLite API as tinyq uses it: the routines table SQLite hands the entry point,
//! and the conversions between SQLite's values and tinyq's. Every function here that takes
//! a raw pointer is `unsafe`: its caller vouches for the pointer.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

pub use sqlite_loadable::ext::{
    sqlite3, sqlite3_api_routines, sqlite3_context, sqlite3_index_info,
    sqlite3_index_info_sqlite3_index_constraint as sqlite3_index_constraint, sqlite3_module, sqlite3_stmt,
    sqlite3_value, sqlite3_vtab, sqlite3_vtab_cursor,
};

use super::{Error, Out, Val};

pub const SQLITE_ROW: c_int = 100;
pub const SQLITE_DONE: c_int = 101;

const SQLITE_INTEGER: c_int = 1;
const SQLITE_FLOAT: c_int = 2;
const SQLITE_TEXT: c_int = 3;
const SQLITE_BLOB: c_int = 4;

/// SQLITE_TRANSIENT: SQLite copies the bytes before the call returns.
pub fn transient() -> Option<unsafe extern "C" fn(*mut c_void)> {
    // SAFETY: SQLite defines SQLITE_TRANSIENT as the pointer value -1; it is never called.
    unsafe { std::mem::transmute::<isize, Option<unsafe extern "C" fn(*mut c_void)>>(-1) }
}

static API: AtomicPtr<sqlite3_api_routines> = AtomicPtr::new(std::ptr::null_mut());

/// Keeps the routines pointer from the entry point (SQLITE_EXTENSION_INIT2).
///
/// # Safety
/// `api` is null or SQLite's routines table, at least as long as the one tinyq is built
/// against (see `load::check_version`), alive for the life of the process.
pub unsafe fn set_api(api: *mut sqlite3_api_routines) {
    if !api.is_null() {
        API.store(api, Ordering::Release);
    }
}

/// The routines of the SQLite that loaded us. tinyq never calls the copy of SQLite that
/// sqlite3ext-sys compiles in: every call goes through this table.
pub fn api() -> &'static sqlite3_api_routines {
    let p = API.load(Ordering::Acquire);
    assert!(!p.is_null(), "tinyq: SQLite API used before the entry point ran");
    // SAFETY: set_api's caller vouched that the table lives for the life of the process.
    unsafe { &*p }
}

/// Calls one routine of the API table: `sql!(step(stmt))`. Glue only: the macro is not
/// exported, and calling a routine is `unsafe`.
macro_rules! sql {
    ($name:ident ( $($arg:expr),* $(,)? )) => {
        ($crate::sqlite::ffi::api().$name.expect(concat!("SQLite lacks ", stringify!($name))))($($arg),*)
    };
}
pub(crate) use sql;

impl Val {
    /// Copies a value SQLite passed to a function.
    ///
    /// # Safety
    /// `v` is a live value SQLite handed to the current callback.
    pub unsafe fn from_raw(v: *mut sqlite3_value) -> Val {
        match sql!(value_type(v)) {
            SQLITE_INTEGER => Val::Int(sql!(value_int64(v))),
            SQLITE_FLOAT => Val::Real(sql!(value_double(v))),
            SQLITE_TEXT => {
                let p = sql!(value_text(v));
                let n = usize::try_from(sql!(value_bytes(v))).unwrap_or(0);
                let bytes = if p.is_null() { &[][..] } else { std::slice::from_raw_parts(p, n) };
                match std::str::from_utf8(bytes) {
                    Ok(s) => Val::Text(s.to_owned()),
                    Err(_) => Val::BadText(bytes.to_vec()),
                }
            }
            SQLITE_BLOB => {
                let p = sql!(value_blob(v)).cast::<u8>();
                let n = usize::try_from(sql!(value_bytes(v))).unwrap_or(0);
                Val::Blob(if p.is_null() { vec![] } else { std::slice::from_raw_parts(p, n).to_vec() })
            }
            _ => Val::Null,
        }
    }
}

/// Hands a function's result to SQLite.
///
/// # Safety
/// `ctx` is the live context of the current function or column callback.
pub unsafe fn set_result(ctx: *mut sqlite3_context, out: Out) {
    match out {
        Out::Null | Out::Val(Val::Null) => sql!(result_null(ctx)),
        Out::Int(i) | Out::Val(Val::Int(i)) => sql!(result_int64(ctx, i)),
        Out::Val(Val::Real(f)) => sql!(result_double(ctx, f)),
        Out::Text(s) | Out::Val(Val::Text(s)) => {
            sql!(result_text64(ctx, s.as_ptr().cast::<c_char>(), s.len() as u64, transient(), 1));
        }
        Out::Val(Val::Blob(b) | Val::BadText(b)) => {
            sql!(result_blob64(ctx, b.as_ptr().cast::<c_void>(), b.len() as u64, transient()));
        }
    }
}

/// Hands a function's error to SQLite.
///
/// # Safety
/// `ctx` is the live context of the current function callback.
pub unsafe fn set_error(ctx: *mut sqlite3_context, err: &Error) {
    let len = c_int::try_from(err.msg.len()).unwrap_or(c_int::MAX);
    sql!(result_error(ctx, err.msg.as_ptr().cast::<c_char>(), len));
    sql!(result_error_code(ctx, err.code));
}

/// A copy of a C string SQLite owns.
///
/// # Safety
/// `p` is null or a NUL-terminated string that stays valid during the call.
pub unsafe fn c_text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

/// A string SQLite may free with sqlite3_free (for zErrMsg).
pub fn sqlite_string(s: &str) -> *mut c_char {
    // SAFETY: api() is the table set_api's caller vouched for.
    unsafe { sqlite_string_in(api(), s) }
}

/// `sqlite_string` through a given routines table. sqlite3_malloc, not malloc64: the
/// load-time check reports through this, and every table has malloc.
///
/// # Safety
/// `api` is a routines table SQLite passed to an entry point.
pub unsafe fn sqlite_string_in(api: &sqlite3_api_routines, s: &str) -> *mut c_char {
    let (Some(malloc), Ok(size)) = (api.malloc, c_int::try_from(s.len() + 1)) else { return std::ptr::null_mut() };
    let p = malloc(size).cast::<u8>();
    if !p.is_null() {
        std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
        *p.add(s.len()) = 0;
    }
    p.cast::<c_char>()
}

/// The version of the SQLite that loaded tinyq, as text ("3.46.1").
pub fn libversion() -> String {
    // SAFETY: sqlite3_libversion returns a static string.
    unsafe { c_text(sql!(libversion())) }
}
