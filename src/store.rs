//! Writing to the store: every writer runs in a transaction that creates or migrates the
//! store first (schema.rs) and holds the write lock from its first read.

use crate::schema;
use crate::sqlite::{Conn, Result};

impl Conn {
    /// Runs `f` atomically on the store (created first if need be), holding the write lock
    /// from its first read (see docs/design.md). Writers call nothing that reads before it:
    /// within a statement, a read of `main` keeps a snapshot open until the statement ends,
    /// and a connection holding a snapshot cannot wait for the write lock.
    pub fn write_tx<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let own = self.autocommit() && !self.write_in_progress();
        let r = self.transaction(|| {
            schema::ensure(self)?;
            if !own {
                // In the caller's transaction: an UPDATE takes the write lock even when it
                // matches nothing.
                self.exec("UPDATE tinyq_meta SET value = value WHERE 0", &[])?;
            }
            f()
        });
        if own && r.is_ok() {
            self.store_ready.set(true); // our transaction committed with the store in it
        }
        r
    }

    /// For a writer that is one statement (atomic by itself, and taking the write lock
    /// before it reads): no transaction of its own, once the store is known to exist.
    pub fn write_one<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.store_ready.get() {
            f()
        } else {
            self.write_tx(f)
        }
    }
}
