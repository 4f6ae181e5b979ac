//! The raw SQLite API as tinyq uses it: the C types and `sql!`, which calls one of SQLite's
//! routines (routines.rs in the loadable build, linked.rs in a Rust program: see mod.rs),
//! and the conversions between SQLite's values and tinyq's. Every function here that takes
//! a raw pointer is `unsafe`: its caller vouches for the pointer.

use std::ffi::{c_char, c_int, c_void, CStr};

pub(crate) use super::api::sql;
pub use super::api::{
    sqlite3, sqlite3_api_routines, sqlite3_context, sqlite3_index_constraint, sqlite3_index_info, sqlite3_module,
    sqlite3_stmt, sqlite3_value, sqlite3_vtab, sqlite3_vtab_cursor,
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

/// A module with no methods, to fill in those a table leaves out (the struct has more
/// of them in a newer SQLite's bindings).
// SAFETY: every field of sqlite3_module is an integer or an Option of a function pointer,
// for which all-zero bytes are 0 and None.
pub const NO_METHODS: sqlite3_module = unsafe { std::mem::zeroed() };

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
    let Ok(size) = c_int::try_from(s.len() + 1) else { return std::ptr::null_mut() };
    // SAFETY: sqlite3_malloc returns null or `size` bytes.
    unsafe { copy_c_string(sql!(malloc(size)), s) }
}

/// Writes `s` and a NUL into `p`, unless it is null; returns `p`.
///
/// # Safety
/// `p` is null or points to at least `s.len() + 1` writable bytes.
pub unsafe fn copy_c_string(p: *mut c_void, s: &str) -> *mut c_char {
    let p = p.cast::<u8>();
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
