//! The SQLite glue: everything that touches SQLite's C API. The queue's modules above it
//! see safe types only (see docs/design.md, "Layout").

#[macro_use]
pub mod ffi;
pub mod conn;
pub mod func;
pub mod stmt;
pub mod vtab;
