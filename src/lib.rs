//! tinyq: a durable job queue inside a SQLite file. This file is the registration list;
//! each concept lives in its own module (see docs/design.md).

#[macro_use]
pub mod ffi;
pub mod claim;
pub mod conn;
pub mod cron;
pub mod func;
pub mod holders;
pub mod jobs;
pub mod options;
pub mod queues;
pub mod random;
pub mod schedules;
pub mod schema;
pub mod settle;
pub mod steps;
pub mod stmt;
pub mod sweep;
pub mod tables;
pub mod time;
pub mod vtab;
pub mod wal;
pub mod watch;

use std::ffi::{c_char, c_int};
use std::rc::Rc;

use conn::Conn;
use ffi::{sqlite3, sqlite3_api_routines, Out, Result, Val};
use func::{DIRECT_ONLY, INNOCUOUS, TRIGGERS};

/// Every scalar function: name, number of arguments (-1: checked by the function), flags.
const SCALARS: &[(&str, c_int, c_int, func::Body)] = &[
    ("tq_add", -1, TRIGGERS, jobs::tq_add),
    ("tq_cancel", -1, TRIGGERS, jobs::tq_cancel),
    ("tq_get", -1, INNOCUOUS, jobs::tq_get),
    ("tq_retry", -1, DIRECT_ONLY, jobs::tq_retry),
    ("tq_renew", -1, DIRECT_ONLY, settle::tq_renew),
    ("tq_settle", -1, DIRECT_ONLY, settle::tq_settle),
    ("tq_step_get", -1, INNOCUOUS, steps::tq_step_get),
    ("tq_step_put", -1, DIRECT_ONLY, steps::tq_step_put),
    ("tq_progress", -1, DIRECT_ONLY, steps::tq_progress),
    ("tq_wait", -1, DIRECT_ONLY, watch::tq_wait),
    ("tq_schedule", -1, DIRECT_ONLY, schedules::tq_schedule),
    ("tq_unschedule", -1, DIRECT_ONLY, schedules::tq_unschedule),
    ("tq_queue", 1, INNOCUOUS, queues::tq_queue),
    ("tq_queue", 2, DIRECT_ONLY, queues::tq_queue),
    ("tq_queue", -1, DIRECT_ONLY, queues::tq_queue),
    ("tq_sweep", -1, DIRECT_ONLY, sweep::tq_sweep),
    ("tq_clock", -1, DIRECT_ONLY, tq_clock),
    ("tq_now", -1, INNOCUOUS, tq_now),
    ("tq_version", -1, INNOCUOUS, tq_version),
    ("tq_debug", -1, INNOCUOUS, tq_debug),
];

fn register(db: *mut sqlite3) -> Result<()> {
    let conn = Rc::new(Conn::new(db));
    for &(name, n, flags, body) in SCALARS {
        func::register(db, &conn, name, n, flags, body)?;
    }
    vtab::register::<tables::Claim>(db, &conn)?;
    vtab::register::<tables::Watch>(db, &conn)?;
    vtab::register::<tables::Jobs>(db, &conn)?;
    vtab::register::<tables::Stats>(db, &conn)?;
    vtab::register::<tables::Schedules>(db, &conn)?;
    vtab::register::<vtab::Statements>(db, &conn)?;
    Ok(())
}

/// The entry point SQLite finds for `.load ./dist/tinyq`.
///
/// # Safety
/// Called by SQLite with a live connection and its routines table.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_tinyq_init(
    db: *mut sqlite3,
    err: *mut *mut c_char,
    api: *mut sqlite3_api_routines,
) -> c_int {
    ffi::set_api(api);
    sqlite_loadable::ext::faux_sqlite_extension_init2(api);
    match ffi::guard(|| register(db)) {
        Ok(()) => 0,
        Err(e) => {
            if !err.is_null() {
                *err = ffi::sqlite_string(&format!("tinyq: {}", e.msg));
            }
            e.code
        }
    }
}

fn no_args(args: &[Val]) -> Result<()> {
    if !args.is_empty() {
        bail!("takes no arguments");
    }
    Ok(())
}

/// tq_clock([ms]): pins this connection's clock (REP-01); NULL unpins. Returns the pin.
fn tq_clock(conn: &Conn, args: &[Val]) -> Result<Out> {
    match args {
        [] => {}
        [Val::Null] => conn.clock.set(None),
        [v] => conn.clock.set(Some(time::parse_time(v).map_err(ffi::Error::bad)?)),
        _ => bail!("expects ([ms or ISO-8601 time, or NULL])"),
    }
    Ok(conn.clock.get().map_or(Out::Null, Out::Int))
}

fn tq_now(conn: &Conn, args: &[Val]) -> Result<Out> {
    no_args(args)?;
    Ok(Out::Int(conn.now()))
}

fn tq_version(_: &Conn, args: &[Val]) -> Result<Out> {
    no_args(args)?;
    Ok(Out::Text(env!("CARGO_PKG_VERSION").into()))
}

fn tq_debug(conn: &Conn, args: &[Val]) -> Result<Out> {
    no_args(args)?;
    let sqlite = ffi::c_text(unsafe { sql!(libversion()) });
    let schema = match schema::stored_version(conn)? {
        0 => "none".to_string(),
        v => v.to_string(),
    };
    Ok(Out::Text(format!(
        "tinyq {} (commit {}) sqlite {sqlite} schema {schema} (this build writes schema {})",
        env!("CARGO_PKG_VERSION"),
        option_env!("TINYQ_COMMIT").unwrap_or("unknown"),
        schema::version()
    )))
}
