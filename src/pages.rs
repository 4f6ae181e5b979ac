//! Keyset pages of `tq_jobs`: the jobs of one queue in one state, in the order of the index
//! that holds them, continued after a given job (`after`), so that a page costs the same on
//! the millionth job as on the first (no OFFSET, no sort).
//!
//! A list is one or more sources (waiting = due jobs not yet moved into line, then the line);
//! each source is a partial index of `tinyq_jobs` walked in its own key order. Continuing
//! after a key (k1, k2, ... kn) is the union, in order, of one index range per key column:
//! k1..k(n-1) equal and kn after; ...; k1 after. Each range is a seek, not a scan.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::sqlite::Conn;
use crate::sqlite::{Result, Val};

struct Key {
    col: &'static str,
    desc: bool,
    nullable: bool,
}

const fn asc(col: &'static str, nullable: bool) -> Key {
    Key { col, desc: false, nullable }
}

const fn desc(col: &'static str, nullable: bool) -> Key {
    Key { col, desc: true, nullable }
}

/// One partial index of tinyq_jobs: the WHERE that selects it (?1 queue), a bound on the
/// clock (?3 now) if any, and its key.
struct Source {
    base: &'static str,
    now: Option<(&'static str, &'static str)>,
    keys: &'static [Key],
}

// The line's index leads with `parked` (due jobs set aside until their group has room):
// the line is the jobs ready to claim, then the ones set aside.
const LINE: Source = Source {
    base: "status = 'queued' AND queue = ?1",
    now: None,
    keys: &[asc("parked", false), desc("priority", false), asc("run_at", false), asc("seq", false)],
};
const DUE: Source = Source {
    base: "status = 'scheduled' AND queue = ?1",
    now: Some(("run_at", "<=")),
    keys: &[asc("run_at", false), asc("seq", false)],
};
const LATER: Source = Source {
    base: "status = 'scheduled' AND queue = ?1",
    now: Some(("run_at", ">")),
    keys: &[asc("run_at", false), asc("seq", false)],
};
// Jobs that hold or held a lease, by (expires_at, lease_until, grp, holder, seq): running
// ones soonest lease end first, settled ones newest first.
const HELD_KEYS: &[Key] =
    &[asc("expires_at", true), asc("lease_until", true), asc("grp", true), asc("holder", true), asc("seq", false)];
const HELD_DESC: &[Key] =
    &[desc("expires_at", true), desc("lease_until", true), desc("grp", true), desc("holder", true), desc("seq", false)];
const RUNNING: Source = Source { now: None, base: "status = 'running' AND queue = ?1", keys: HELD_KEYS };
const DONE: Source = Source { now: None, base: "status = 'done' AND queue = ?1", keys: HELD_DESC };
const FAILED: Source = Source { now: None, base: "status = 'failed' AND queue = ?1", keys: HELD_DESC };

fn sources(state: &str) -> &'static [Source] {
    match state {
        "waiting" => &[DUE, LINE],
        "scheduled" => &[LATER],
        "running" => &[RUNNING],
        "done" => &[DONE],
        _ => &[FAILED],
    }
}

/// Where the job `after` stands: the source it is in (or would be in) and its key values.
pub struct Cursor {
    source: usize,
    values: Vec<Val>,
}

/// The columns the cursor query reads, in its order.
const KEY_NAMES: [&str; 9] =
    ["status", "priority", "run_at", "seq", "expires_at", "lease_until", "grp", "holder", "parked"];

/// The position of job `id` in the list of `state`; None when there is no such job.
pub fn cursor(conn: &Conn, state: &str, id: &str) -> Result<Option<Cursor>> {
    let mut st = conn.query(
        "SELECT status, priority, run_at, seq, expires_at, lease_until, grp, holder, parked FROM tinyq_jobs WHERE id = ?1",
        &[&id],
    )?;
    if !st.step()? {
        return Ok(None);
    }
    let row: Vec<Val> = (0..KEY_NAMES.len() as i32).map(|i| st.val(i)).collect();
    // A job still scheduled is among the due ones; any other is placed by its key in the line.
    let source = usize::from(state == "waiting" && !matches!(&row[0], Val::Text(s) if s == "scheduled"));
    let keys = sources(state)[source].keys;
    let values = keys.iter().map(|k| row[KEY_NAMES.iter().position(|n| *n == k.col).expect("key")].clone()).collect();
    Ok(Some(Cursor { source, values }))
}

/// The SQL of a page (columns given by `select`, which reads ?3 as now) and the cursor
/// values to bind from ?10 on. Parameters: ?1 queue, ?2 group (NULL: any), ?3 now.
pub fn sql(select: &'static str, state: &str, after: Option<&Cursor>) -> (&'static str, Vec<Val>) {
    let mut arms = Vec::new();
    let mut binds = Vec::new();
    for (i, source) in sources(state).iter().enumerate() {
        match after {
            Some(c) if i < c.source => {} // before the cursor's source: all read already
            Some(c) if i == c.source => {
                for n in (0..source.keys.len()).rev() {
                    let mut eq = Vec::new();
                    for (k, v) in source.keys[..n].iter().zip(&c.values) {
                        eq.push(if v.is_null() {
                            format!("{} IS NULL", k.col)
                        } else {
                            bind(&mut binds, k.col, "=", v)
                        });
                    }
                    let k = &source.keys[n];
                    for later in beyond(k, &c.values[n], &mut binds) {
                        let mut conds = eq.clone();
                        conds.push(later);
                        arms.push(arm(select, source, &conds, n));
                    }
                }
            }
            _ => arms.push(arm(select, source, &[], 0)),
        }
    }
    (remember(arms.join(" UNION ALL ")), binds)
}

fn bind(binds: &mut Vec<Val>, col: &str, op: &str, v: &Val) -> String {
    binds.push(v.clone());
    format!("{col} {op} ?{}", 9 + binds.len())
}

/// The conditions (one range each) for the rows after value `v` of key `k`. NULL sorts first.
fn beyond(k: &Key, v: &Val, binds: &mut Vec<Val>) -> Vec<String> {
    match (k.desc, v.is_null()) {
        (false, true) => vec![format!("{} IS NOT NULL", k.col)],
        (false, false) => vec![bind(binds, k.col, ">", v)],
        (true, true) => vec![],
        (true, false) if k.nullable => vec![bind(binds, k.col, "<", v), format!("{} IS NULL", k.col)],
        (true, false) => vec![bind(binds, k.col, "<", v)],
    }
}

/// One index range, in key order from key `from` on. The LIMIT keeps SQLite from dropping
/// the ORDER BY of a subquery of a compound; the page's own LIMIT stops the stepping.
fn arm(select: &str, source: &Source, conds: &[String], from: usize) -> String {
    let order: Vec<String> =
        source.keys[from..].iter().map(|k| format!("{}{}", k.col, if k.desc { " DESC" } else { "" })).collect();
    let mut wher = format!("{} AND (?2 IS NULL OR grp = ?2)", source.base);
    if let Some((col, op)) = source.now {
        // When the cursor bounds this column, the clock is only checked (`+col`): as a second
        // range on it, SQLite may seek by the clock instead and read from there.
        let fixed = !conds.is_empty() && source.keys[..=from].iter().any(|k| k.col == col);
        let _ = write!(wher, " AND {}{col} {op} ?3", if fixed { "+" } else { "" });
    }
    for c in conds {
        wher.push_str(" AND ");
        wher.push_str(c);
    }
    format!("SELECT * FROM ({select}WHERE {wher} ORDER BY {} LIMIT 1000000000)", order.join(", "))
}

/// A generated statement as a `&'static str`, as the statement cache wants: each distinct
/// text is kept once (there are a few dozen: states x cursor positions x NULL patterns).
fn remember(sql: String) -> &'static str {
    static KNOWN: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let mut known = KNOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let map = known.get_or_insert_with(HashMap::new);
    if let Some(s) = map.get(&sql) {
        return s;
    }
    let kept: &'static str = Box::leak(sql.clone().into_boxed_str());
    map.insert(sql, kept);
    kept
}
