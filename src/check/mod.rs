//! tq_check([options]): is this store as tinyq keeps it? After a bad migration or a hand
//! edit, an operator asks; one problem per finding, none for a sound store. It compares the
//! store's objects with a new store's (objects.rs), the counters with the rows (counters.rs)
//! and the stored settings with what tq_queue accepts (ranges.rs); with `recount`, it
//! rebuilds what tinyq can rebuild from the rows (repair.rs). Every check reads every row
//! of the tables it checks: O(rows), an operator's command, never a worker's.

/// tq_check's own statements, which read every row of what they check by design (an
/// operator's command, never a worker's): tests/test_query_plans.py allows their scans by
/// this mark.
macro_rules! checking {
    ($($sql:expr),+ $(,)?) => {
        concat!("/* tq_check reads every row */ ", $($sql),+)
    };
}

mod counters;
mod foreign;
mod objects;
mod ranges;
mod repair;

use serde_json::{json, Value};

use crate::options::Options;
use crate::sqlite::{Conn, Out, Result, Val};

/// What a problem is about and where: `kind` names the check (docs/reference.md, tq_check).
#[derive(Debug)]
pub struct Problem {
    kind: &'static str,
    queue: Option<String>,
    object: String,
    detail: String,
}

impl Problem {
    fn new(kind: &'static str, queue: Option<&str>, object: impl Into<String>, detail: impl Into<String>) -> Problem {
        Problem { kind, queue: queue.map(str::to_string), object: object.into(), detail: detail.into() }
    }

    /// The same problem (its detail may read differently once the counts moved).
    fn same(&self, other: &Problem) -> bool {
        (self.kind, &self.queue, &self.object) == (other.kind, &other.queue, &other.object)
    }

    fn to_json(&self, fixed: bool) -> Value {
        json!({"problem": self.kind, "queue": self.queue, "object": self.object, "detail": self.detail, "fixed": fixed})
    }
}

/// tq_check([options]): a JSON array of the store's problems; `{"recount": true}` repairs
/// what it can first, and each problem found says whether it is `fixed` (checked again).
pub fn tq_check(conn: &Conn, args: &[Val]) -> Result<Out> {
    let opts = match args {
        [] => Options::parse(None, &["recount"])?,
        [o] => Options::parse(Some(o), &["recount"])?,
        _ => bail!("expects ([options]), like tq_check('{{\"recount\": true}}')"),
    };
    let recount = opts.bool("recount")?.unwrap_or(false);
    if recount && conn.write_in_progress() {
        // It drops and creates triggers and indexes, which SQLite refuses while a statement writes.
        bail!(
            "recount cannot run inside a writing statement: call SELECT tq_check('{{\"recount\": true}}') on its own"
        );
    }
    let found = conn.read_snapshot(|| find(conn))?;
    let mut out: Vec<Value> = vec![];
    if recount && !found.is_empty() {
        repair::run(conn, &found)?;
        let left = conn.read_snapshot(|| find(conn))?;
        out.extend(found.iter().map(|p| p.to_json(!left.iter().any(|l| l.same(p)))));
        out.extend(left.iter().filter(|l| !found.iter().any(|p| p.same(l))).map(|l| l.to_json(false)));
    } else {
        out.extend(found.iter().map(|p| p.to_json(false)));
    }
    Ok(Out::Text(Value::Array(out).to_string()))
}

/// Every problem of the store, in the order of the checks.
fn find(conn: &Conn) -> Result<Vec<Problem>> {
    let shape = objects::expected()?;
    let mut problems = vec![];
    match objects::check_version(conn, &mut problems)? {
        // No store; or an older or newer one, whose objects differ by design.
        objects::Version::NoStore | objects::Version::Other => return Ok(problems),
        objects::Version::Current | objects::Version::Unknown => {}
    }
    let sound_tables = objects::check(conn, shape, &mut problems)?;
    foreign::check(conn, &mut problems)?;
    if sound_tables {
        counters::check(conn, shape, &mut problems)?;
        ranges::check(conn, &mut problems)?;
    }
    Ok(problems)
}
