//! Scalar functions: tinyq's glue over sqlite3_create_function_v2, so that every call
//! catches panics, every error starts with the function's name and keeps its code, and the
//! per-connection state is released when SQLite drops the function.

use std::ffi::{c_int, c_void, CString};
use std::rc::Rc;

use super::direct::{self, Callers};
use super::ffi::{set_error, set_result, sql, sqlite3_context, sqlite3_value};
use super::{guard, prefixed, Conn, Error, Out, Result, Val};

pub type Body = fn(&Conn, &[Val]) -> Result<Out>;

const SQLITE_UTF8: c_int = 1;
pub const DIRECT_ONLY: c_int = 0x0008_0000;
pub const INNOCUOUS: c_int = 0x0020_0000;
/// Callable from triggers and views (with trusted_schema on): neither flag.
pub const TRIGGERS: c_int = 0;

struct Entry {
    name: &'static str,
    body: Body,
    conn: Rc<Conn>,
    callers: Callers,
}

/// Registers `body` as `name` with `n_args` arguments (-1: any number; the body checks).
pub fn register(conn: &Rc<Conn>, name: &'static str, n_args: c_int, flags: c_int, body: Body) -> Result<()> {
    let callers = if flags & DIRECT_ONLY != 0 {
        Callers::Direct
    } else if flags & INNOCUOUS != 0 {
        Callers::Anyone
    } else {
        Callers::Trusted
    };
    let entry = Box::into_raw(Box::new(Entry { name, body, conn: conn.clone(), callers }));
    let cname = CString::new(name).expect("function name");
    // SAFETY: SQLite owns `entry` from here and hands it to `destroy` when it drops the function.
    let rc = unsafe {
        sql!(create_function_v2(
            conn.db,
            cname.as_ptr(),
            n_args,
            SQLITE_UTF8 | flags,
            entry.cast::<c_void>(),
            Some(call),
            None,
            None,
            Some(destroy)
        ))
    };
    if rc != 0 {
        return Err(Error { code: rc, msg: format!("registering {name}") });
    }
    Ok(())
}

/// SQLite calls this for every call of a tinyq function.
unsafe extern "C" fn call(ctx: *mut sqlite3_context, argc: c_int, argv: *mut *mut sqlite3_value) {
    let entry = &*sql!(user_data(ctx)).cast::<Entry>();
    let r = guard(|| {
        // SQLite's flags do not reach every schema object on every version (SEC-01).
        direct::check(&entry.conn, entry.name, entry.callers)?;
        let _depth = entry.conn.enter()?;
        let argv = std::slice::from_raw_parts(argv, usize::try_from(argc).unwrap_or(0));
        let args: Vec<Val> = argv.iter().map(|v| Val::from_raw(*v)).collect();
        (entry.body)(&entry.conn, &args)
    });
    match r {
        Ok(out) => set_result(ctx, out),
        Err(e) => set_error(ctx, &Error { code: e.code, msg: prefixed(entry.name, &e.msg) }),
    }
}

unsafe extern "C" fn destroy(p: *mut c_void) {
    let _ = std::panic::catch_unwind(|| drop(Box::from_raw(p.cast::<Entry>())));
}
