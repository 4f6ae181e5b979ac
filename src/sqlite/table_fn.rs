//! What a table-valued function is to tinyq: the rows it gives and the trait each table
//! implements (vtab.rs turns it into SQLite's callbacks), and tq_statements.

use std::ffi::c_int;
use std::rc::Rc;

use super::{Conn, Result, Stmt, Val};

/// Where a table function's rows come from.
pub enum Rows {
    Listed(std::vec::IntoIter<Vec<Val>>),
    /// Streamed from a statement whose columns are the table's visible columns.
    Query(Stmt<'static>),
}

impl Rows {
    pub fn list(rows: Vec<Vec<Val>>) -> Rows {
        Rows::Listed(rows.into_iter())
    }

    /// Streams `st`.
    pub fn query(st: Stmt<'_>) -> Rows {
        // SAFETY: the cursor keeps the `Rc<Conn>` alive and drops the rows first.
        Rows::Query(unsafe { std::mem::transmute::<Stmt<'_>, Stmt<'static>>(st) })
    }

    /// The listed rows not handed out yet (a query's are not kept: none).
    pub(super) fn rest(&mut self) -> Vec<Vec<Val>> {
        match self {
            Rows::Listed(it) => it.collect(),
            Rows::Query(_) => vec![],
        }
    }

    pub(super) fn next(&mut self, width: usize) -> Result<Option<Vec<Val>>> {
        match self {
            Rows::Listed(it) => Ok(it.next()),
            Rows::Query(st) => {
                Ok(if st.step()? { Some((0..width as c_int).map(|i| st.val(i)).collect()) } else { None })
            }
        }
    }
}

/// One table function. Its columns are `COLUMNS`; the ones listed in `FILTERS` (usually
/// HIDDEN argument columns) are passed to `rows` from `=` constraints, in that order.
pub trait TableFn: 'static {
    const NAME: &'static str;
    /// Visible columns, then hidden ones, as in CREATE TABLE.
    const SCHEMA: &'static str;
    const VISIBLE: usize;
    const FILTERS: &'static [usize];
    /// Hidden columns that `rows` fills (after the visible ones in each row), not arguments.
    const OUTPUT_HIDDEN: &'static [usize] = &[];
    const DIRECT_ONLY: bool;
    /// Also create it as a table in `temp` (see `register`).
    const IN_TEMP: bool = false;
    /// Its rows are leased as they are made (tq_claim): a constraint on a column that is not
    /// an argument, or an OFFSET, is refused when the statement is prepared (it would drop
    /// rows already leased), and the statement's LIMIT, when SQLite passes it, comes to
    /// `rows` as one more filter after FILTERS' (None: no LIMIT SQLite could pass).
    const LEASES: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows>;
    /// The rows SQLite never reached (no column read, not stepped past) when it stopped
    /// early: a LIMIT it did not pass, an error in a later column. Called when the cursor
    /// closes or filters again; errors are the table's to report, so there are none.
    fn unreached(_conn: &Rc<Conn>, _filters: &[Option<Val>], _rows: Vec<Vec<Val>>) {}
    /// Called when SQLite disconnects the table (the connection is closing).
    fn disconnect(_conn: &Conn) {}
    fn connect(_conn: &Conn) {}
}

/// `tq_statements`: the prepared statements this connection keeps. Its disconnect, which
/// SQLite runs at close before it checks for unfinalized statements, finalizes them.
pub struct Statements;

impl TableFn for Statements {
    const NAME: &'static str = "tq_statements";
    // The counters are the sums over every run on this connection of what SQLite's
    // sqlite3_stmt_status reports: virtual machine steps, steps of full scans, sorts.
    const SCHEMA: &'static str =
        "CREATE TABLE x(sql TEXT, cached INTEGER, vm_steps INTEGER, fullscan_steps INTEGER, sorts INTEGER)";
    const VISIBLE: usize = 5;
    const FILTERS: &'static [usize] = &[];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, _: &[Option<Val>]) -> Result<Rows> {
        Ok(Rows::list(
            conn.statements()
                .into_iter()
                .map(|(s, n, [vm, scan, sort])| {
                    vec![Val::Text(s), Val::Int(n), Val::Int(vm), Val::Int(scan), Val::Int(sort)]
                })
                .collect(),
        ))
    }
    fn connect(conn: &Conn) {
        conn.cache_hooked.set(true);
    }
    fn disconnect(conn: &Conn) {
        conn.cache_hooked.set(false);
        conn.clear_cache();
    }
}
