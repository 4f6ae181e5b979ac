//! Per-connection state: the cache of prepared statements, transactions, and the cells in
//! which the queue's modules keep what they know about this connection (the pinned clock,
//! the store's version...; the glue never reads those). Every function registered on a
//! connection shares one `Conn`. SQLite serializes calls on a connection, so plain cells
//! suffice.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::hash::BuildHasherDefault;

use super::ffi::{c_text, sql, sqlite3, sqlite3_stmt};
use super::stmt::{AddressHasher, Bind, SqlKey, Stmt};
use super::{Error, Result, Val, SQLITE_OK};

const SQLITE_PREPARE_PERSISTENT: u32 = 0x01;

pub struct Conn {
    /// Live for as long as this `Conn` (see `new`).
    pub(super) db: *mut sqlite3,
    /// The time pinned by tq_clock, if any (REP-01).
    pub clock: Cell<Option<i64>>,
    /// Set once this connection has seen the store at the current schema version.
    pub store_ready: Cell<bool>,
    /// This process's row in tinyq_holders, once it has one.
    pub holder: Cell<Option<i64>>,
    cache: RefCell<HashMap<SqlKey, Vec<*mut sqlite3_stmt>, BuildHasherDefault<AddressHasher>>>,
    /// The work SQLite did for each of tinyq's statements on this connection, summed over
    /// every run (VM steps, full-scan steps, sorts): what tq_statements reports, so tests
    /// can check that a call's cost does not grow with the store (COST-01).
    work: RefCell<HashMap<SqlKey, [i64; 3], BuildHasherDefault<AddressHasher>>>,
    /// True while the `tq_statements` table is connected: its disconnect, which SQLite
    /// runs before checking for unfinalized statements at close, empties the cache.
    pub cache_hooked: Cell<bool>,
    /// How deeply tinyq's functions are nested right now (a trigger on tinyq's own tables
    /// that calls tinyq again recurses through nested statements, which SQLite's trigger
    /// depth limit does not see).
    pub depth: Cell<u32>,
    /// Is the database a local file (see holders::local_file)? Known after the first claim.
    pub local_file: Cell<Option<bool>>,
    /// Claims left before this connection looks at `PRAGMA wal_autocheckpoint` again
    /// (see wal.rs); 0: at the next claim.
    pub claims_until_wal_look: Cell<u32>,
    /// Which kind of expired row this connection's next claim sweeps.
    pub sweep_turn: Cell<u32>,
}

impl Conn {
    /// # Safety
    /// `db` is a live connection that outlives this `Conn`: SQLite drops the functions and
    /// tables holding it before it closes `db`.
    pub(super) unsafe fn new(db: *mut sqlite3) -> Conn {
        Conn {
            db,
            clock: Cell::new(None),
            store_ready: Cell::new(false),
            holder: Cell::new(None),
            cache: RefCell::new(HashMap::default()),
            work: RefCell::new(HashMap::default()),
            cache_hooked: Cell::new(false),
            depth: Cell::new(0),
            sweep_turn: Cell::new(0),
            claims_until_wal_look: Cell::new(0),
            local_file: Cell::new(None),
        }
    }

    /// Counts one more level of nesting; fails past a depth no sane use reaches, before
    /// the C stack runs out (ERR-02).
    pub fn enter(&self) -> Result<Depth<'_>> {
        const MAX_DEPTH: u32 = 32;
        if self.depth.get() >= MAX_DEPTH {
            return Err(Error::bad("tinyq calls nested too deeply: does a trigger on tinyq's tables call tinyq?"));
        }
        self.depth.set(self.depth.get() + 1);
        Ok(Depth(self))
    }

    /// The last error on this connection.
    pub fn error(&self) -> Error {
        unsafe { Error { code: sql!(extended_errcode(self.db)), msg: c_text(sql!(errmsg(self.db))) } }
    }

    /// A prepared statement for `sql`, from the cache when one is free.
    pub fn prepare(&self, sql: &'static str) -> Result<Stmt<'_>> {
        if let Some(raw) = self.cache.borrow_mut().get_mut(&SqlKey(sql)).and_then(Vec::pop) {
            return Ok(Stmt { conn: self, sql, raw });
        }
        let raw = self.new_statement(sql, SQLITE_PREPARE_PERSISTENT)?;
        self.hook_cache();
        Ok(Stmt { conn: self, sql, raw })
    }

    /// A new statement for `sql` (`flags`: sqlite3_prepare_v3's), the caller's to finalize.
    pub(super) fn new_statement(&self, sql: &str, flags: u32) -> Result<*mut sqlite3_stmt> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the text outlives the call; a failed prepare leaves `raw` null (finalize
        // of null is a no-op).
        let rc = unsafe {
            sql!(prepare_v3(
                self.db,
                sql.as_ptr().cast::<c_char>(),
                sql.len() as c_int,
                flags,
                &raw mut raw,
                std::ptr::null_mut()
            ))
        };
        if rc != 0 || raw.is_null() {
            let e = self.error();
            unsafe { sql!(finalize(raw)) };
            return Err(e);
        }
        Ok(raw)
    }

    /// Prepares, binds and returns a statement ready to step.
    pub fn query(&self, sql: &'static str, params: &[&dyn Bind]) -> Result<Stmt<'_>> {
        let mut st = self.prepare(sql)?;
        for (i, p) in params.iter().enumerate() {
            st.bind(i as c_int + 1, *p)?;
        }
        Ok(st)
    }

    /// Runs a statement to its end; returns the number of rows it changed.
    pub fn exec(&self, sql: &'static str, params: &[&dyn Bind]) -> Result<i64> {
        let mut st = self.query(sql, params)?;
        while st.step()? {}
        Ok(unsafe { sql!(changes64(self.db)) })
    }

    /// Every row of a query, each read by `read` (after rusqlite's `query_map`). The rows
    /// are collected, so the statement is back in the cache before the caller runs the next.
    pub fn rows<T>(&self, sql: &'static str, params: &[&dyn Bind], mut read: impl FnMut(&Stmt) -> T) -> Result<Vec<T>> {
        let mut st = self.query(sql, params)?;
        let mut rows = vec![];
        while st.step()? {
            rows.push(read(&st));
        }
        Ok(rows)
    }

    /// The first row of a query, read by `read`, if there is a row (after rusqlite's
    /// `query_row`, with no row as None).
    pub fn row<T>(&self, sql: &'static str, params: &[&dyn Bind], read: impl FnOnce(&Stmt) -> T) -> Result<Option<T>> {
        let mut st = self.query(sql, params)?;
        Ok(if st.step()? { Some(read(&st)) } else { None })
    }

    /// The first column of the first row, if there is a row.
    pub fn one(&self, sql: &'static str, params: &[&dyn Bind]) -> Result<Option<Val>> {
        self.row(sql, params, |st| st.val(0))
    }

    /// The first column of the first row as an integer (NULL and no row give None).
    pub fn one_int(&self, sql: &'static str, params: &[&dyn Bind]) -> Result<Option<i64>> {
        Ok(match self.one(sql, params)? {
            Some(Val::Int(i)) => Some(i),
            _ => None,
        })
    }

    /// Makes sure the cache's finalizer is connected before statements are kept.
    fn hook_cache(&self) {
        if self.cache_hooked.get() {
            return;
        }
        // Preparing a statement that names the eponymous table connects it.
        let text = "SELECT 1 FROM tq_statements";
        let mut raw = std::ptr::null_mut();
        unsafe {
            sql!(prepare_v2(
                self.db,
                text.as_ptr().cast::<c_char>(),
                text.len() as c_int,
                &raw mut raw,
                std::ptr::null_mut()
            ));
            sql!(finalize(raw));
        }
    }

    /// Finalizes `sql`'s cached copies and forgets its work: for a statement run once, at
    /// load, that is no part of what tq_statements shows of tinyq's work.
    pub fn forget(&self, sql: &'static str) {
        for raw in self.cache.borrow_mut().remove(&SqlKey(sql)).unwrap_or_default() {
            unsafe { sql!(finalize(raw)) };
        }
        self.work.borrow_mut().remove(&SqlKey(sql));
    }

    /// Finalizes every cached statement (the connection is closing).
    pub fn clear_cache(&self) {
        for (_, stmts) in self.cache.borrow_mut().drain() {
            for raw in stmts {
                unsafe { sql!(finalize(raw)) };
            }
        }
    }

    /// Every statement tinyq ran or keeps on this connection, for `tq_statements`: its
    /// SQL, how many prepared copies the cache holds, and the work done by all its runs.
    pub fn statements(&self) -> Vec<(String, i64, [i64; 3])> {
        let cache = self.cache.borrow();
        let work = self.work.borrow();
        let mut keys: Vec<SqlKey> = cache.keys().chain(work.keys()).copied().collect();
        keys.sort_by_key(|k| k.0);
        keys.dedup();
        keys.iter()
            .map(|k| {
                let held = cache.get(k).map_or(0, |l| l.len() as i64);
                (k.0.to_string(), held, work.get(k).copied().unwrap_or_default())
            })
            .collect()
    }

    pub(crate) fn give_back(&self, sql: &'static str, raw: *mut sqlite3_stmt) {
        // SQLITE_STMTSTATUS_VM_STEP, _FULLSCAN_STEP, _SORT; read and reset, so each run counts once.
        const COUNTERS: [c_int; 3] = [4, 1, 2];
        let mut done = [0i64; 3];
        for (slot, op) in done.iter_mut().zip(COUNTERS) {
            *slot = unsafe { sql!(stmt_status(raw, op, 1)) } as i64;
        }
        if let Ok(mut work) = self.work.try_borrow_mut() {
            let sum = work.entry(SqlKey(sql)).or_default();
            for (s, d) in sum.iter_mut().zip(done) {
                *s += d;
            }
        }
        unsafe {
            sql!(reset(raw));
            sql!(clear_bindings(raw));
        }
        if self.cache_hooked.get() {
            if let Ok(mut cache) = self.cache.try_borrow_mut() {
                cache.entry(SqlKey(sql)).or_default().push(raw);
                return;
            }
        }
        unsafe { sql!(finalize(raw)) };
    }

    /// Is a statement that writes running on this connection (a trigger, INSERT ... SELECT)?
    pub fn write_in_progress(&self) -> bool {
        const SQLITE_TXN_WRITE: c_int = 2;
        if self.autocommit() {
            // Outside BEGIN, a write transaction exists only while a writing statement runs:
            // one call instead of a walk over every prepared statement (the cache included).
            return unsafe { sql!(txn_state(self.db, std::ptr::null())) } == SQLITE_TXN_WRITE;
        }
        self.any_running(|_, readonly| !readonly)
    }

    /// Does `test` hold for a statement of this connection that is running right now
    /// (stepped, and neither done nor reset)? `test` gets the statement's SQL text (None
    /// when SQLite kept none: sqlite3_prepare v1) and whether it is read-only. What the
    /// schema runs (a trigger, a CHECK constraint) runs inside the statement that set it
    /// off, so this walk sees statements that an application, or tinyq, prepared.
    pub fn any_running(&self, mut test: impl FnMut(Option<&[u8]>, bool) -> bool) -> bool {
        // SAFETY: next_stmt walks this live connection's statements, and `test` cannot
        // finalize one (it gets bytes, not the statement); sqlite3_sql's text lives as
        // long as its statement.
        unsafe {
            let mut p = sql!(next_stmt(self.db, std::ptr::null_mut()));
            while !p.is_null() {
                if sql!(stmt_busy(p)) != 0 {
                    let text = sql!(sql(p));
                    let text = (!text.is_null()).then(|| CStr::from_ptr(text).to_bytes());
                    if test(text, sql!(stmt_readonly(p)) != 0) {
                        return true;
                    }
                }
                p = sql!(next_stmt(self.db, p));
            }
        }
        false
    }

    /// sqlite3_db_config(op, -1, &out): reads one of the connection's on/off settings.
    pub fn db_config(&self, op: c_int) -> c_int {
        let mut out: c_int = 0;
        // SAFETY: the on/off ops take (int, int*); -1 leaves the setting as it is.
        unsafe { sql!(db_config(self.db, op, -1 as c_int, &raw mut out)) };
        out
    }

    /// Is the `main` database read-only (`mode=ro`, `immutable=1`, a read-only file)?
    pub fn read_only(&self) -> bool {
        // SAFETY: the name is a NUL-terminated literal; -1 (no such database) is not read-only.
        unsafe { sql!(db_readonly(self.db, c"main".as_ptr())) == 1 }
    }

    pub fn autocommit(&self) -> bool {
        unsafe { sql!(get_autocommit(self.db)) != 0 }
    }

    /// Runs a script of several statements (sqlite3_exec); the error carries SQLite's message.
    pub fn exec_script(&self, script: &str) -> Result<()> {
        let text = CString::new(script).map_err(|_| Error::bad("a script contains NUL"))?;
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: `text` outlives the call; SQLite allocates `err`, freed here.
        unsafe {
            let rc = sql!(exec(self.db, text.as_ptr(), None, std::ptr::null_mut(), &raw mut err));
            if rc == SQLITE_OK {
                return Ok(());
            }
            let e = Error { code: sql!(extended_errcode(self.db)), msg: c_text(err) };
            sql!(free(err.cast()));
            Err(e)
        }
    }

    /// The file the `main` database is in; None in memory or a temporary database. (Only the
    /// inotify waiter asks, on Linux.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub fn file_name(&self) -> Option<String> {
        // SAFETY: sqlite3_db_filename returns null or a string alive as long as the connection.
        let name = unsafe { c_text(sql!(db_filename(self.db, c"main".as_ptr()))) };
        (!name.is_empty()).then_some(name)
    }

    /// The name of the VFS the `main` database is on ("unix", "unix-excl", dqlite's...).
    pub fn vfs_name(&self) -> Option<String> {
        const SQLITE_FCNTL_VFS_POINTER: c_int = 27;
        /// The first fields of sqlite3_vfs, as far as its name.
        #[repr(C)]
        struct VfsHead {
            version: c_int,
            size: c_int,
            max_path: c_int,
            next: *mut c_void,
            name: *const c_char,
        }
        let mut vfs: *mut VfsHead = std::ptr::null_mut();
        // SAFETY: SQLITE_FCNTL_VFS_POINTER writes a sqlite3_vfs pointer, whose leading
        // fields VfsHead mirrors; a registered VFS lives as long as the connection.
        unsafe {
            let rc = sql!(file_control(self.db, c"main".as_ptr(), SQLITE_FCNTL_VFS_POINTER, (&raw mut vfs).cast()));
            (rc == SQLITE_OK && !vfs.is_null()).then(|| c_text((*vfs).name))
        }
    }

    /// Runs `f` atomically: in its own BEGIN IMMEDIATE transaction in autocommit, in a
    /// SAVEPOINT inside the caller's transaction, or as part of a writing statement.
    pub fn transaction<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.write_in_progress() {
            // Inside a writing statement: its transaction is ours, and an error rolls it back.
            // (A BEGIN here could not COMMIT while that statement runs: HOST-01.)
            return f();
        }
        if self.autocommit() {
            self.exec("BEGIN IMMEDIATE", &[])?;
            let r = f();
            return self.end_own(r);
        }
        self.exec("SAVEPOINT tinyq", &[])?;
        let r = f().and_then(|v| self.exec("RELEASE tinyq", &[]).map(|_| v));
        if r.is_err() {
            // Undone and gone, even when the RELEASE was what failed: the caller's
            // transaction goes on as it was before the call.
            let _ = self.exec("ROLLBACK TO tinyq", &[]);
            let _ = self.exec("RELEASE tinyq", &[]);
        }
        r
    }

    /// Runs `f` on one snapshot of the store: in a read transaction of its own in
    /// autocommit, else in the transaction already there (the caller's, or a writing
    /// statement's, which holds the write lock: nothing changes under it either).
    pub fn read_snapshot<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if !self.autocommit() || self.write_in_progress() {
            return f();
        }
        self.exec("BEGIN", &[])?;
        let r = f();
        self.end_own(r)
    }

    /// Ends the transaction tinyq began in autocommit: COMMIT after `r` succeeded, else
    /// ROLLBACK. A COMMIT that fails is rolled back and its error returned: tinyq never
    /// leaves a transaction open that its caller did not begin, nor drops a COMMIT's error
    /// (HOST-01).
    fn end_own<T>(&self, r: Result<T>) -> Result<T> {
        let r = r.and_then(|v| self.exec("COMMIT", &[]).map(|_| v));
        if r.is_err() && !self.autocommit() {
            let _ = self.exec("ROLLBACK", &[]);
        }
        if !self.autocommit() {
            let why = r.err().map_or_else(String::new, |e| format!(": {}", e.msg));
            return Err(Error::bad(format!("could not end the transaction it began{why}")));
        }
        r
    }
}

/// One level of nesting, left when dropped.
pub struct Depth<'c>(&'c Conn);

impl Drop for Depth<'_> {
    fn drop(&mut self) {
        self.0.depth.set(self.0.depth.get().saturating_sub(1));
    }
}
