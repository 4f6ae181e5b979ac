//! tinyq: a durable job queue inside a SQLite file. This file is the registration list;
//! each concept lives in its own module, above the SQLite glue in sqlite/ (see
//! docs/design.md, "Layout").
//!
//! Built by default as the loadable extension (`.load tinyq`). A Rust program links it in
//! instead with the `rusqlite` feature and no default features: `tinyq::register(&conn)`
//! on one connection, or `tinyq::auto_extension()` for every connection opened after it.
//! `tinyq::sqlite3_tinyq_init` is the entry point for any other host.
#![deny(unsafe_code)] // unsafe lives in sqlite/ only, which allows it for itself

// Each build calls one SQLite: loadable, the one that loads it; rusqlite, the program's.
#[cfg(all(feature = "loadable", feature = "rusqlite"))]
compile_error!(
    "tinyq: the `rusqlite` feature links tinyq to the program's SQLite; turn off the default `loadable` \
     feature (default-features = false), whose sqlite-loadable would bring a second SQLite"
);
#[cfg(not(any(feature = "loadable", feature = "rusqlite")))]
compile_error!("tinyq: enable one of its features: `loadable` (the default) or `rusqlite`");

#[macro_use]
mod sqlite;
mod check;
mod claim;
mod expiry;
mod held;
mod holders;
mod jobs;
mod json;
mod keys;
mod limits;
mod marks;
mod options;
mod pages;
mod queues;
mod random;
mod row;
mod schedule;
mod settings;
mod settle;
mod stats;
mod steps;
mod store;
mod sweep;
mod tables;
mod text;
mod time;
mod timeline;
mod wait;
mod wake;
mod wal;
mod workflows;

use std::ffi::c_int;
use std::rc::Rc;

pub use sqlite::sqlite3_tinyq_init;
#[cfg(feature = "rusqlite")]
pub use sqlite::{auto_extension, register};

use sqlite::{register_function, register_table, Conn, Out, Result, Val, DIRECT_ONLY, INNOCUOUS, TRIGGERS};

/// Every scalar function: name, number of arguments (-1: checked by the function), flags.
const SCALARS: &[(&str, c_int, c_int, sqlite::Body)] = &[
    ("tq_add", -1, TRIGGERS, jobs::tq_add),
    ("tq_cancel", -1, TRIGGERS, jobs::tq_cancel),
    ("tq_get", -1, INNOCUOUS, jobs::tq_get),
    ("tq_retry", -1, DIRECT_ONLY, jobs::tq_retry),
    ("tq_signal", -1, TRIGGERS, workflows::signals::tq_signal),
    ("tq_renew", -1, DIRECT_ONLY, settle::tq_renew),
    ("tq_settle", -1, DIRECT_ONLY, settle::tq_settle),
    ("tq_step_get", -1, INNOCUOUS, steps::tq_step_get),
    ("tq_step_put", -1, DIRECT_ONLY, steps::tq_step_put),
    ("tq_progress", -1, DIRECT_ONLY, steps::tq_progress),
    ("tq_wait", -1, DIRECT_ONLY, wait::tq_wait),
    ("tq_wait_any", -1, DIRECT_ONLY, wait::tq_wait_any),
    ("tq_schedule", -1, DIRECT_ONLY, schedule::tq_schedule),
    ("tq_schedule_get", -1, INNOCUOUS, schedule::tq_schedule_get),
    ("tq_unschedule", -1, DIRECT_ONLY, schedule::tq_unschedule),
    ("tq_queue", 1, INNOCUOUS, queues::tq_queue),
    ("tq_queue", 2, DIRECT_ONLY, queues::tq_queue),
    ("tq_queue", -1, DIRECT_ONLY, queues::tq_queue),
    ("tq_sweep", -1, DIRECT_ONLY, sweep::tq_sweep),
    ("tq_clock", -1, DIRECT_ONLY, tq_clock),
    ("tq_now", -1, INNOCUOUS, tq_now),
    ("tq_version", -1, INNOCUOUS, tq_version),
    ("tq_debug", -1, INNOCUOUS, tq_debug),
    ("tq_check", -1, DIRECT_ONLY, check::tq_check),
];

/// Registers everything on a connection: sqlite/load.rs calls this.
fn register_all(conn: &Rc<Conn>) -> Result<()> {
    refuse_temp_shadows(conn)?;
    for &(name, n, flags, body) in SCALARS {
        register_function(conn, name, n, flags, body)?;
    }
    register_table::<tables::Claim>(conn)?;
    register_table::<tables::Watch>(conn)?;
    register_table::<tables::Jobs>(conn)?;
    register_table::<tables::Stats>(conn)?;
    register_table::<tables::Schedules>(conn)?;
    register_table::<tables::Steps>(conn)?;
    register_table::<tables::Deps>(conn)?;
    register_table::<sqlite::Statements>(conn)?;
    Ok(())
}

/// tinyq's SQL names its tables unqualified, and SQLite finds a TEMP object of the same
/// name first: a `temp.tinyq_jobs` (or a TEMP table named like one of tinyq's tables)
/// would silently take the store's place. Refused at load, where it is seen (tinyq's own
/// `temp.tq_claim`, from an earlier load on this connection, is no shadow).
fn refuse_temp_shadows(conn: &Conn) -> Result<()> {
    const SHADOWS: &str = "SELECT type, name FROM temp.sqlite_master
         WHERE (name LIKE 'tinyq\\_%' ESCAPE '\\' OR name LIKE 'tq\\_%' ESCAPE '\\')
           AND coalesce(sql, '') NOT LIKE 'CREATE VIRTUAL TABLE % USING tinyq\\_%' ESCAPE '\\'";
    let shadows = conn
        .rows(SHADOWS, &[], |st| format!("{} temp.{}", st.text(0).unwrap_or_default(), st.text(1).unwrap_or_default()));
    conn.forget(SHADOWS);
    // A schema that cannot be read (a file that is not a database, a read-only WAL file
    // before its reader is set up) is no shadow: the calls that need the store will say.
    let Ok(shadows) = shadows else { return Ok(()) };
    if let Some(first) = shadows.first() {
        bail!("the {first} would hide tinyq's own (names tinyq_* and tq_* are tinyq's): drop it, then load tinyq");
    }
    Ok(())
}

fn no_args(args: &[Val]) -> Result<()> {
    if !args.is_empty() {
        bail!("takes no arguments");
    }
    Ok(())
}

/// tq_clock([ms]): pins this connection's clock (REP-01); NULL unpins. Returns the pin.
fn tq_clock(conn: &Conn, args: &[Val]) -> Result<Out> {
    if !args.is_empty() && conn.read_only() {
        // A pool of read-only connections (Datasette's) would show a clock pinned on one of
        // them to some requests and not to others (HOST-01).
        bail!("cannot pin the clock of a read-only connection: pin it on the connection that writes");
    }
    match args {
        [] => {}
        [Val::Null] => conn.clock.set(None),
        [v] => conn.clock.set(Some(time::parse_time(v).map_err(sqlite::Error::bad)?)),
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
    let sqlite = sqlite::libversion();
    let schema = match store::stored_version(conn)? {
        0 => "none".to_string(),
        v => v.to_string(),
    };
    Ok(Out::Text(format!(
        "tinyq {} (commit {}) sqlite {sqlite} schema {schema} (this build writes schema {})",
        env!("CARGO_PKG_VERSION"),
        option_env!("TINYQ_COMMIT").unwrap_or("unknown"),
        store::version()
    )))
}
