//! Table-valued functions (eponymous virtual tables), with tinyq's own glue so that every
//! callback catches panics, errors keep their SQLite code (SQLITE_BUSY stays BUSY), and the
//! table that owns the statement cache can empty it when the connection closes.

use std::ffi::{c_char, c_int, c_void, CString};
use std::rc::Rc;
use std::sync::Mutex;

use super::ffi::{
    set_result, sql, sqlite3, sqlite3_context, sqlite3_index_constraint, sqlite3_index_info, sqlite3_module,
    sqlite3_value, sqlite3_vtab, sqlite3_vtab_cursor, sqlite_string, NO_METHODS,
};
use super::table_fn::{Rows, TableFn};
use super::{guard, prefixed, Conn, Error, Out, Result, Val, SQLITE_ERROR, SQLITE_OK};

const SQLITE_INDEX_CONSTRAINT_EQ: u8 = 2;
const SQLITE_INDEX_CONSTRAINT_LIMIT: u8 = 73;
const SQLITE_INDEX_CONSTRAINT_OFFSET: u8 = 74;
const SQLITE_VTAB_INNOCUOUS: c_int = 2;
const SQLITE_VTAB_DIRECTONLY: c_int = 3;

#[repr(C)]
struct VTab {
    base: sqlite3_vtab,
    conn: Rc<Conn>,
}

#[repr(C)]
struct Cursor {
    base: sqlite3_vtab_cursor,
    rows: Option<Rows>, // dropped before conn: it may borrow it
    conn: Rc<Conn>,
    filters: Vec<Option<Val>>,
    row: Option<Vec<Val>>,
    /// SQLite read a column of `row`.
    seen: bool,
    rowid: i64,
    visible: usize,
    output_hidden: &'static [usize],
    filter_columns: &'static [usize],
}

/// A module table that lives as long as the process (SQLite keeps a pointer to it).
struct Module(&'static sqlite3_module, &'static str);
unsafe impl Send for Module {}

fn module<T: TableFn>(creatable: bool) -> &'static sqlite3_module {
    static MODULES: Mutex<Vec<(&'static str, Module)>> = Mutex::new(Vec::new());
    let mut all = MODULES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = if creatable { "temp" } else { T::NAME };
    if let Some((_, m)) = all.iter().find(|(n, k)| *n == T::NAME && k.1 == key) {
        return m.0;
    }
    let m: &'static sqlite3_module = Box::leak(Box::new(sqlite3_module {
        iVersion: 2,
        xCreate: if creatable { Some(x_connect::<T>) } else { None },
        xConnect: Some(x_connect::<T>),
        xBestIndex: Some(x_best_index::<T>),
        xDisconnect: Some(x_disconnect::<T>),
        xDestroy: Some(x_disconnect::<T>),
        xOpen: Some(x_open::<T>),
        xClose: Some(x_close::<T>),
        xFilter: Some(x_filter::<T>),
        xNext: Some(x_next),
        xEof: Some(x_eof),
        xColumn: Some(x_column),
        xRowid: Some(x_rowid),
        // read-only, no transactions of its own: none of the other methods
        ..NO_METHODS
    }));
    all.push((T::NAME, Module(m, key)));
    m
}

/// Registers `T` on the connection, as an eponymous table; with IN_TEMP, also as a table
/// `temp.NAME`, which SQLite finds first. A statement reading a table of `main` holds a
/// read snapshot of it from its first step; BEGIN IMMEDIATE from inside such a statement
/// cannot wait for the write lock (SQLite skips the busy handler for a connection holding
/// a snapshot) and fails for good once another writer commits. Reading `temp` instead
/// leaves `main` untouched until tq_claim's own transaction begins.
pub fn register<T: TableFn>(conn: &Rc<Conn>) -> Result<()> {
    create_module(conn, T::NAME, module::<T>(false))?;
    if T::IN_TEMP {
        let module_name = format!("tinyq_{}", T::NAME);
        create_module(conn, &module_name, module::<T>(true))?;
        // If this fails (the schema is locked), the eponymous table still works.
        let _ = conn.exec_script(&format!("CREATE VIRTUAL TABLE IF NOT EXISTS temp.{} USING {module_name}", T::NAME));
    }
    Ok(())
}

fn create_module(conn: &Rc<Conn>, name: &str, module: &'static sqlite3_module) -> Result<()> {
    let name = CString::new(name).expect("table name");
    let aux = Box::into_raw(Box::new(conn.clone())).cast::<c_void>();
    // SAFETY: SQLite owns `aux` from here and hands it to `drop_aux`; `module` is static.
    let rc = unsafe { sql!(create_module_v2(conn.db, name.as_ptr(), module, aux, Some(drop_aux))) };
    if rc != SQLITE_OK {
        return Err(Error { code: rc, msg: format!("registering {name:?}") });
    }
    Ok(())
}

unsafe extern "C" fn drop_aux(p: *mut c_void) {
    let _ = std::panic::catch_unwind(|| drop(Box::from_raw(p.cast::<Rc<Conn>>())));
}

/// Runs a callback body; a panic or error becomes a code (and a message on the table).
unsafe fn run(vtab: *mut sqlite3_vtab, name: &str, f: impl FnOnce() -> Result<()>) -> c_int {
    match guard(f) {
        Ok(()) => SQLITE_OK,
        Err(e) => {
            if !vtab.is_null() {
                if !(*vtab).zErrMsg.is_null() {
                    sql!(free((*vtab).zErrMsg.cast::<c_void>()));
                }
                (*vtab).zErrMsg = sqlite_string(&prefixed(name, &e.msg));
            }
            if e.code == SQLITE_OK {
                SQLITE_ERROR
            } else {
                e.code
            }
        }
    }
}

unsafe extern "C" fn x_connect<T: TableFn>(
    db: *mut sqlite3,
    aux: *mut c_void,
    _argc: c_int,
    _argv: *const *const c_char,
    pp_vtab: *mut *mut sqlite3_vtab,
    err: *mut *mut c_char,
) -> c_int {
    let r = guard(|| {
        let conn = (*aux.cast::<Rc<Conn>>()).clone();
        let schema = CString::new(T::SCHEMA).expect("schema");
        let rc = sql!(declare_vtab(db, schema.as_ptr()));
        if rc != SQLITE_OK {
            return Err(conn.error());
        }
        let flag = if T::DIRECT_ONLY { SQLITE_VTAB_DIRECTONLY } else { SQLITE_VTAB_INNOCUOUS };
        sql!(vtab_config(db, flag));
        T::connect(&conn);
        let vtab = Box::new(VTab { base: std::mem::zeroed(), conn });
        *pp_vtab = Box::into_raw(vtab).cast::<sqlite3_vtab>();
        Ok(())
    });
    match r {
        Ok(()) => SQLITE_OK,
        Err(e) => {
            *err = sqlite_string(&format!("{}: {}", T::NAME, e.msg));
            SQLITE_ERROR
        }
    }
}

unsafe extern "C" fn x_disconnect<T: TableFn>(vtab: *mut sqlite3_vtab) -> c_int {
    let _ = guard(|| {
        let vtab = Box::from_raw(vtab.cast::<VTab>());
        T::disconnect(&vtab.conn);
        Ok(())
    });
    SQLITE_OK
}

/// Passes `=` constraints on the filter columns to xFilter, in FILTERS order (and, for a
/// table that LEASES, the LIMIT after them).
unsafe extern "C" fn x_best_index<T: TableFn>(vtab: *mut sqlite3_vtab, info: *mut sqlite3_index_info) -> c_int {
    run(vtab, T::NAME, || {
        let info = &mut *info;
        let cons = std::slice::from_raw_parts(info.aConstraint, info.nConstraint as usize);
        let usage = std::slice::from_raw_parts_mut(info.aConstraintUsage, info.nConstraint as usize);
        if T::LEASES {
            refuse_filters::<T>(cons)?;
        }
        refuse_unequal_arguments::<T>(cons)?;
        let mut mask = 0;
        for (k, &col) in T::FILTERS.iter().enumerate() {
            if let Some(i) = cons
                .iter()
                .position(|c| c.iColumn as usize == col && c.op == SQLITE_INDEX_CONSTRAINT_EQ && c.usable != 0)
            {
                mask |= 1 << k;
                usage[i].argvIndex = (mask as u32).count_ones() as c_int;
                usage[i].omit = 1;
            }
        }
        if T::LEASES {
            // SQLite still applies the LIMIT itself (omit stays 0); the table claims no more.
            if let Some(i) = cons.iter().position(|c| c.op == SQLITE_INDEX_CONSTRAINT_LIMIT && c.usable != 0) {
                mask |= 1 << T::FILTERS.len();
                usage[i].argvIndex = (mask as u32).count_ones() as c_int;
            }
        }
        // A constraint that is present but not usable yet: prefer plans that make it usable.
        let wanted = T::FILTERS
            .iter()
            .filter(|&&col| cons.iter().any(|c| c.iColumn as usize == col && c.op == SQLITE_INDEX_CONSTRAINT_EQ))
            .count();
        let have = (mask as u32 & ((1 << T::FILTERS.len()) - 1)).count_ones() as usize;
        info.idxNum = mask;
        info.estimatedCost = if have == wanted { 10.0 / (1 + have) as f64 } else { 1e12 };
        info.estimatedRows = 100;
        Ok(())
    })
}

/// A table whose rows are leased takes no filter on its output and no OFFSET: either
/// would drop rows it already leased, which then run out unseen.
fn refuse_filters<T: TableFn>(cons: &[sqlite3_index_constraint]) -> Result<()> {
    for c in cons {
        if c.op == SQLITE_INDEX_CONSTRAINT_OFFSET {
            bail!("claim, then skip: an OFFSET would lease the jobs it skips; take every row it claims (LIMIT alone caps n)");
        }
        if c.op != SQLITE_INDEX_CONSTRAINT_LIMIT && !T::FILTERS.contains(&(c.iColumn as usize)) {
            let column = column_name(T::SCHEMA, c.iColumn);
            bail!("claim, then filter: a WHERE or join on its column \"{column}\" would lease jobs the statement never returns; take every row it claims (a LIMIT caps n) and filter them after");
        }
    }
    Ok(())
}

/// An argument (a hidden filter column: `since`, `queue`...) is given with `=`: any other
/// comparison would reach the rows as a filter on a column they leave NULL, and the
/// statement would quietly answer nothing (`tq_watch WHERE since > 0`).
fn refuse_unequal_arguments<T: TableFn>(cons: &[sqlite3_index_constraint]) -> Result<()> {
    for c in cons {
        let Ok(col) = usize::try_from(c.iColumn) else { continue };
        let argument = col >= T::VISIBLE && T::FILTERS.contains(&col) && !T::OUTPUT_HIDDEN.contains(&col);
        let other = ![SQLITE_INDEX_CONSTRAINT_EQ, SQLITE_INDEX_CONSTRAINT_LIMIT, SQLITE_INDEX_CONSTRAINT_OFFSET]
            .contains(&c.op);
        if argument && other {
            let column = column_name(T::SCHEMA, c.iColumn);
            bail!(
                "\"{column}\" is an argument: give it with = or in the call, {}(...), not with another comparison",
                T::NAME
            );
        }
    }
    Ok(())
}

/// The name of column `i` in a CREATE TABLE x(...) schema ("rowid" for -1).
fn column_name(schema: &str, i: c_int) -> String {
    let Ok(i) = usize::try_from(i) else { return "rowid".into() };
    let inner = schema.split_once('(').map_or("", |(_, rest)| rest.trim_end().trim_end_matches(')'));
    inner.split(',').nth(i).and_then(|c| c.split_whitespace().next()).unwrap_or("?").to_string()
}

unsafe extern "C" fn x_open<T: TableFn>(vtab: *mut sqlite3_vtab, pp: *mut *mut sqlite3_vtab_cursor) -> c_int {
    run(vtab, T::NAME, || {
        let conn = (*vtab.cast::<VTab>()).conn.clone();
        let cursor = Box::new(Cursor {
            base: std::mem::zeroed(),
            rows: None,
            conn,
            filters: vec![],
            row: None,
            seen: false,
            rowid: 0,
            visible: T::VISIBLE,
            output_hidden: T::OUTPUT_HIDDEN,
            filter_columns: T::FILTERS,
        });
        *pp = Box::into_raw(cursor).cast::<sqlite3_vtab_cursor>();
        Ok(())
    })
}

unsafe extern "C" fn x_close<T: TableFn>(cur: *mut sqlite3_vtab_cursor) -> c_int {
    let _ = guard(|| {
        let mut c = Box::from_raw(cur.cast::<Cursor>());
        hand_back::<T>(&mut c);
        Ok(())
    });
    SQLITE_OK
}

/// Gives the table the rows SQLite never reached, if it stopped before the end.
fn hand_back<T: TableFn>(c: &mut Cursor) {
    let Some(mut rows) = c.rows.take() else { return };
    let mut left: Vec<Vec<Val>> = c.row.take().filter(|_| !c.seen).into_iter().collect();
    left.extend(rows.rest());
    drop(rows);
    if !left.is_empty() {
        let conn = c.conn.clone();
        let depth = conn.enter();
        if depth.is_ok() {
            T::unreached(&conn, &c.filters, left);
        }
        drop(depth);
    }
}

unsafe extern "C" fn x_filter<T: TableFn>(
    cur: *mut sqlite3_vtab_cursor,
    idx_num: c_int,
    _idx_str: *const c_char,
    argc: c_int,
    argv: *mut *mut sqlite3_value,
) -> c_int {
    let c = &mut *cur.cast::<Cursor>();
    run(c.base.pVtab, T::NAME, || {
        hand_back::<T>(c);
        let args = std::slice::from_raw_parts(argv, argc as usize);
        let mut given = args.iter();
        let passed = T::FILTERS.len() + usize::from(T::LEASES);
        c.filters = (0..passed)
            .map(|k| if idx_num & (1 << k) != 0 { given.next().map(|v| Val::from_raw(*v)) } else { None })
            .collect();
        c.rows = None;
        c.row = None;
        c.seen = false;
        c.rowid = 0;
        let conn = c.conn.clone();
        let _depth = conn.enter()?;
        c.rows = Some(T::rows(&conn, &c.filters)?);
        advance(c)
    })
}

fn advance(c: &mut Cursor) -> Result<()> {
    c.seen = false;
    c.row = match c.rows.as_mut() {
        Some(rows) => rows.next(c.visible + c.output_hidden.len())?,
        None => None,
    };
    c.rowid += 1;
    Ok(())
}

unsafe extern "C" fn x_next(cur: *mut sqlite3_vtab_cursor) -> c_int {
    let c = &mut *cur.cast::<Cursor>();
    run(c.base.pVtab, "tinyq", || advance(c))
}

unsafe extern "C" fn x_eof(cur: *mut sqlite3_vtab_cursor) -> c_int {
    c_int::from((*cur.cast::<Cursor>()).row.is_none())
}

unsafe extern "C" fn x_column(cur: *mut sqlite3_vtab_cursor, ctx: *mut sqlite3_context, i: c_int) -> c_int {
    let c = &mut *cur.cast::<Cursor>();
    c.seen = true;
    let i = i as usize;
    let v = if i < c.visible {
        c.row.as_ref().and_then(|r| r.get(i).cloned())
    } else if let Some(k) = c.output_hidden.iter().position(|&col| col == i) {
        c.row.as_ref().and_then(|r| r.get(c.visible + k).cloned())
    } else {
        // A hidden argument column reads back the argument given.
        let k = c.filter_columns.iter().position(|&col| col == i);
        k.and_then(|k| c.filters.get(k).cloned().flatten())
    };
    set_result(ctx, Out::Val(v.unwrap_or(Val::Null)));
    SQLITE_OK
}

unsafe extern "C" fn x_rowid(cur: *mut sqlite3_vtab_cursor, rowid: *mut i64) -> c_int {
    *rowid = (*cur.cast::<Cursor>()).rowid;
    SQLITE_OK
}
