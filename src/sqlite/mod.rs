//! The SQLite glue: everything that touches SQLite's C API, and the only place in tinyq
//! where `unsafe` is allowed. The queue's modules above it see what this file exports:
//! safe types and functions (see docs/design.md, "Layout").
#![allow(unsafe_code)] // the glue's job: each unsafe block says why it is sound (SAFETY)

#[macro_use]
mod error;
// Where SQLite's routines come from: the table SQLite hands the loadable extension's entry
// point, or, linked into a Rust program, that program's SQLite (docs/design.md).
#[cfg_attr(feature = "loadable", path = "routines.rs")]
#[cfg_attr(not(feature = "loadable"), path = "linked.rs")]
mod api;
mod ffi;
mod value;

pub(crate) mod checkpoint;
mod conn;
mod direct;
mod func;
#[cfg(target_os = "linux")]
mod inotify;
mod load;
mod memory;
mod pulse;
mod stmt;
mod table_fn;
mod vtab;

// What the queue's modules use.
pub use conn::Conn;
pub use error::{Error, Result};
pub use ffi::libversion;
pub use func::{register as register_function, Body, DIRECT_ONLY, INNOCUOUS, TRIGGERS};
#[cfg(target_os = "linux")]
pub use inotify::{local_file, Inotify};
pub use load::sqlite3_tinyq_init;
#[cfg(feature = "rusqlite")]
pub use load::{auto_extension, register};
pub use memory::with_memory_db;
pub use stmt::{Bind, Stmt};
pub use table_fn::{Rows, Statements, TableFn};
pub use value::{Out, Val};
pub use vtab::register as register_table;

// What the glue's own modules share.
use error::{guard, prefixed, SQLITE_ERROR, SQLITE_OK};
