//! SQLite's routines in the loadable extension (the `loadable` feature, dist/tinyq.so): the
//! table SQLite hands the entry point, kept once and called through by `sql!`. The C types
//! come from sqlite-loadable (sqlite3ext-sys's bindings of sqlite3ext.h); tinyq never calls
//! the copy of SQLite that sqlite3ext-sys compiles in: every call goes through this table.

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicPtr, Ordering};

pub use sqlite_loadable::ext::{
    sqlite3, sqlite3_api_routines, sqlite3_context, sqlite3_index_info,
    sqlite3_index_info_sqlite3_index_constraint as sqlite3_index_constraint, sqlite3_module, sqlite3_stmt,
    sqlite3_value, sqlite3_vtab, sqlite3_vtab_cursor,
};

static API: AtomicPtr<sqlite3_api_routines> = AtomicPtr::new(std::ptr::null_mut());

/// Keeps the routines pointer from the entry point (SQLITE_EXTENSION_INIT2).
///
/// # Safety
/// `api` is null or SQLite's routines table, at least as long as the one tinyq is built
/// against (see `load::check_version`), alive for the life of the process.
pub unsafe fn set_api(api: *mut sqlite3_api_routines) {
    if !api.is_null() {
        API.store(api, Ordering::Release);
        sqlite_loadable::ext::faux_sqlite_extension_init2(api);
    }
}

/// The routines of the SQLite that loaded us.
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
        ($crate::sqlite::api::api().$name.expect(concat!("SQLite lacks ", stringify!($name))))($($arg),*)
    };
}
pub(crate) use sql;

/// A string SQLite may free with sqlite3_free, allocated through a given routines table.
/// sqlite3_malloc, not malloc64: the load-time check reports through this, and every
/// table has malloc.
///
/// # Safety
/// `api` is a routines table SQLite passed to an entry point.
pub unsafe fn sqlite_string_in(api: &sqlite3_api_routines, s: &str) -> *mut c_char {
    let (Some(malloc), Ok(size)) = (api.malloc, c_int::try_from(s.len() + 1)) else { return std::ptr::null_mut() };
    super::ffi::copy_c_string(malloc(size), s)
}
