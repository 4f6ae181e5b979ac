//! Prepared statements: borrowed from the connection's cache and given back, reset, when
//! dropped; typed binds and columns; errors with the connection's extended code.

use std::ffi::{c_char, c_int};
use std::hash::Hasher;

use super::ffi::{sql, sqlite3_stmt, transient, SQLITE_DONE, SQLITE_ROW};
use super::{Conn, Result, Val};

/// A statement's SQL, compared and hashed by address: every statement is a literal in the
/// code, so one address is one statement, and hashing the text on every call is wasted work.
#[derive(Clone, Copy)]
pub struct SqlKey(pub &'static str);

impl PartialEq for SqlKey {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}
impl Eq for SqlKey {}
impl std::hash::Hash for SqlKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_usize(self.0.as_ptr() as usize);
    }
}

#[derive(Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A prepared statement borrowed from the cache; it goes back, reset, when dropped.
pub struct Stmt<'c> {
    pub(super) conn: &'c Conn,
    pub(super) sql: &'static str,
    /// Prepared by `conn` from `sql`, used by this `Stmt` alone until it is dropped.
    pub(super) raw: *mut sqlite3_stmt,
}

impl Stmt<'_> {
    pub fn bind(&mut self, i: c_int, v: &dyn Bind) -> Result<()> {
        let rc = unsafe { v.bind_to(self.raw, i) };
        if rc != 0 {
            return Err(self.conn.error());
        }
        Ok(())
    }

    /// Steps once: true when a row is ready.
    pub fn step(&mut self) -> Result<bool> {
        match unsafe { sql!(step(self.raw)) } {
            SQLITE_ROW => Ok(true),
            SQLITE_DONE => Ok(false),
            _ => Err(self.conn.error()),
        }
    }

    pub fn val(&self, i: c_int) -> Val {
        // SAFETY: the column's value lives until the next step, and is copied now.
        unsafe { Val::from_raw(sql!(column_value(self.raw, i))) }
    }

    pub fn int(&self, i: c_int) -> i64 {
        unsafe { sql!(column_int64(self.raw, i)) }
    }

    pub fn opt_int(&self, i: c_int) -> Option<i64> {
        match self.val(i) {
            Val::Int(v) => Some(v),
            Val::Real(f) => Some(f as i64),
            _ => None,
        }
    }

    pub fn text(&self, i: c_int) -> Option<String> {
        match self.val(i) {
            Val::Text(s) => Some(s),
            Val::Null => None,
            Val::Int(v) => Some(v.to_string()),
            Val::Real(f) => Some(f.to_string()),
            Val::Blob(b) | Val::BadText(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        }
    }
}

impl Drop for Stmt<'_> {
    fn drop(&mut self) {
        self.conn.give_back(self.sql, self.raw);
    }
}

/// Anything that binds to a statement parameter.
pub trait Bind {
    /// # Safety
    /// `raw` must be a live statement.
    unsafe fn bind_to(&self, raw: *mut sqlite3_stmt, i: c_int) -> c_int;
}

impl Bind for i64 {
    unsafe fn bind_to(&self, raw: *mut sqlite3_stmt, i: c_int) -> c_int {
        sql!(bind_int64(raw, i, *self))
    }
}

impl Bind for bool {
    unsafe fn bind_to(&self, raw: *mut sqlite3_stmt, i: c_int) -> c_int {
        sql!(bind_int64(raw, i, i64::from(*self)))
    }
}

impl Bind for str {
    unsafe fn bind_to(&self, raw: *mut sqlite3_stmt, i: c_int) -> c_int {
        sql!(bind_text64(raw, i, self.as_ptr().cast::<c_char>(), self.len() as u64, transient(), 1))
    }
}

impl Bind for &str {
    unsafe fn bind_to(&self, raw: *mut sqlite3_stmt, i: c_int) -> c_int {
        (**self).bind_to(raw, i)
    }
}

impl Bind for String {
    unsafe fn bind_to(&self, raw: *mut sqlite3_stmt, i: c_int) -> c_int {
        self.as_str().bind_to(raw, i)
    }
}

impl<T: Bind> Bind for Option<T> {
    unsafe fn bind_to(&self, raw: *mut sqlite3_stmt, i: c_int) -> c_int {
        match self {
            Some(v) => v.bind_to(raw, i),
            None => sql!(bind_null(raw, i)),
        }
    }
}

impl Bind for Val {
    unsafe fn bind_to(&self, raw: *mut sqlite3_stmt, i: c_int) -> c_int {
        match self {
            Val::Null => sql!(bind_null(raw, i)),
            Val::Int(v) => v.bind_to(raw, i),
            Val::Real(f) => sql!(bind_double(raw, i, *f)),
            Val::Text(s) => s.bind_to(raw, i),
            Val::Blob(b) | Val::BadText(b) => sql!(bind_blob64(raw, i, b.as_ptr().cast(), b.len() as u64, transient())),
        }
    }
}
