//! The store's objects against a new store's: every tinyq_* table, index and trigger that
//! sql/store.sql creates, as SQLite keeps it (built once in a private in-memory database,
//! so objects added to the script later are checked with no change here), and the
//! schema_version in tinyq_meta.

use std::sync::OnceLock;

use super::Problem;
use crate::sqlite::{with_memory_db, Conn, Result, Val};
use crate::store;

/// One object of a store, as sqlite_master has it.
#[derive(Debug)]
pub struct Object {
    pub kind: String,
    pub name: String,
    pub sql: String,
}

/// What a new store of this version is: its objects, the job statuses tinyq_counts has a
/// counter for, and the SQL that compares (and rebuilds) those counters.
pub struct Shape {
    pub objects: Vec<Object>,
    pub counted: Vec<String>,
    pub counts_sql: &'static str,
    pub recount_sql: String,
}

const OBJECTS: &str =
    checking!("SELECT type, name, sql FROM sqlite_master WHERE substr(name, 1, 6) = 'tinyq_' ORDER BY name");

fn objects(conn: &Conn) -> Result<Vec<Object>> {
    conn.rows(OBJECTS, &[], |st| Object {
        kind: st.text(0).unwrap_or_default(),
        name: st.text(1).unwrap_or_default(),
        sql: st.text(2).unwrap_or_default(),
    })
}

/// The new store's shape, built at the first call (the script is part of this build).
pub fn expected() -> Result<&'static Shape> {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    if let Some(s) = SHAPE.get() {
        return Ok(s);
    }
    let (objects, columns) = with_memory_db(|db| {
        db.exec_script(store::script())?;
        let columns =
            db.rows("SELECT name FROM pragma_table_info('tinyq_counts')", &[], |st| st.text(0).unwrap_or_default())?;
        Ok((objects(db)?, columns))
    })?;
    let jobs = objects.iter().find(|o| o.name == "tinyq_jobs").map_or("", |o| o.sql.as_str());
    let statuses = statuses(jobs);
    let counted: Vec<String> = columns.into_iter().filter(|c| statuses.contains(c)).collect();
    let (counts_sql, recount_sql) = counts_sql(&counted);
    Ok(SHAPE.get_or_init(|| Shape { objects, counted, counts_sql, recount_sql }))
}

/// The statuses tinyq_jobs' CHECK allows (`status = 'queued' OR ...`).
fn statuses(jobs_sql: &str) -> Vec<String> {
    jobs_sql.split("status = '").skip(1).filter_map(|rest| rest.split_once('\'').map(|(s, _)| s.to_string())).collect()
}

/// The query that sets each queue's stored counters beside its rows' counts, and the script
/// that rebuilds them (both once per process: the counted statuses are this build's).
fn counts_sql(counted: &[String]) -> (&'static str, String) {
    let list = |f: &dyn Fn(&str) -> String| counted.iter().map(|s| f(s)).collect::<Vec<_>>().join(", ");
    let query = format!(
        checking!("SELECT q.queue, c.queue IS NOT NULL, EXISTS (SELECT 1 FROM tinyq_queues WHERE name = q.queue), {}, {}
         FROM (SELECT name AS queue FROM tinyq_queues UNION SELECT queue FROM tinyq_jobs UNION SELECT queue FROM tinyq_counts) q
         LEFT JOIN tinyq_counts c ON c.queue = q.queue
         LEFT JOIN (SELECT queue, {} FROM tinyq_jobs GROUP BY queue) j ON j.queue = q.queue
         ORDER BY q.queue"),
        list(&|s| format!("c.\"{s}\"")),
        list(&|s| format!("ifnull(j.\"{s}\", 0)")),
        list(&|s| format!("sum(status = '{s}') AS \"{s}\"")),
    );
    let recount = format!(
        "INSERT OR IGNORE INTO tinyq_queues (name) SELECT DISTINCT queue FROM tinyq_jobs;
         INSERT OR IGNORE INTO tinyq_counts (queue) SELECT name FROM tinyq_queues;
         UPDATE tinyq_counts SET {};",
        list(&|s| format!(
            "\"{s}\" = (SELECT count(*) FROM tinyq_jobs WHERE queue = tinyq_counts.queue AND status = '{s}')"
        )),
    );
    (Box::leak(query.into_boxed_str()), recount)
}

/// An object's SQL as compared: whitespace runs as one space, and identifiers without
/// their double quotes (an ALTER TABLE ... RENAME quotes the names it rewrites).
fn normalized(sql: &str) -> String {
    let words = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(words.len());
    let mut rest = words.as_str();
    while let Some(i) = rest.find('"') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.find('"') {
            Some(j) if j > 0 && after[..j].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
                out.push_str(&after[..j]);
                rest = &after[j + 1..];
            }
            _ => {
                out.push('"');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// What a schema_version problem says when the number alone is wrong (repair.rs writes it).
pub const MISLABELED: &str = "but its objects are those of a store of";

/// The store's version, as far as checking goes.
pub enum Version {
    /// No tinyq object at all: nothing to check.
    NoStore,
    /// This version's store.
    Current,
    /// tinyq_meta lacks a readable version, or an older one than its objects' (reported):
    /// the objects are compared with this version's.
    Unknown,
    /// An older or newer store (reported): its objects are another version's.
    Other,
}

pub fn check_version(conn: &Conn, problems: &mut Vec<Problem>) -> Result<Version> {
    let ours = store::version();
    if conn.one_int(checking!("SELECT count(*) FROM sqlite_master WHERE substr(name, 1, 6) = 'tinyq_'"), &[])?
        == Some(0)
    {
        return Ok(Version::NoStore);
    }
    if conn.one_int("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tinyq_meta'", &[])?.is_none() {
        return Ok(Version::Unknown); // reported as a missing table
    }
    let object = "tinyq_meta.schema_version";
    let stored = conn.one("SELECT value FROM tinyq_meta WHERE key = 'schema_version'", &[])?;
    let (version, detail) = match stored {
        Some(Val::Int(v)) if v == ours => return Ok(Version::Current),
        Some(Val::Int(v)) if (1..ours).contains(&v) => {
            let mut differences = vec![];
            if check(conn, expected()?, &mut differences)? && differences.is_empty() {
                // Its objects are this version's: only the number is wrong.
                let detail = format!("{v}, {MISLABELED} {ours}: an upgrade would fail");
                problems.push(Problem::new("schema_version", None, object, detail));
                return Ok(Version::Unknown);
            }
            (
                Version::Other,
                format!("{v}: a store of an older tinyq, upgraded to {ours} by the first write (a recount writes)"),
            )
        }
        Some(Val::Int(v)) if v > ours => {
            (Version::Other, format!("{v}: newer than this tinyq ({ours}); check it with a tinyq of that version"))
        }
        None => (Version::Unknown, format!("absent: readers see no store and writers fail (this tinyq writes {ours})")),
        Some(v) => (
            Version::Unknown,
            format!(
                "{} ({}), not a version: readers see no store and writers fail (this tinyq writes {ours})",
                shown(&v),
                v.kind()
            ),
        ),
    };
    problems.push(Problem::new("schema_version", None, object, detail));
    Ok(version)
}

/// A stored value as a problem's detail shows it: quoted text cut short, or its SQL form.
pub fn shown(v: &Val) -> String {
    match v {
        Val::Text(s) => crate::options::quote(s),
        Val::Int(i) => i.to_string(),
        Val::Real(f) => f.to_string(),
        other => other.kind().to_string(),
    }
}

/// Compares the store's tinyq_* objects with a new store's; true when every table is as
/// a new store has it (so that the counters can be read).
pub fn check(conn: &Conn, shape: &Shape, problems: &mut Vec<Problem>) -> Result<bool> {
    let stored = objects(conn)?;
    let mut tables_sound = true;
    for want in &shape.objects {
        let found = stored.iter().find(|o| o.name == want.name);
        let (kind, detail) = match found {
            None => ("missing", format!("a new store's {} is absent{}", want.kind, consequence(&want.kind))),
            Some(o) if o.kind != want.kind => {
                ("changed", format!("a {} where a new store has a {}", o.kind, want.kind))
            }
            Some(o) if normalized(&o.sql) != normalized(&want.sql) => {
                ("changed", format!("the {} differs from a new store's{}", want.kind, consequence(&want.kind)))
            }
            Some(_) => continue,
        };
        tables_sound &= want.kind != "table";
        problems.push(Problem::new(kind, None, want.name.as_str(), detail));
    }
    for extra in stored.iter().filter(|o| !shape.objects.iter().any(|w| w.name == o.name)) {
        let detail =
            format!("a {} a store of schema {} does not have (tinyq leaves it alone)", extra.kind, store::version());
        problems.push(Problem::new("extra", None, extra.name.as_str(), detail));
    }
    Ok(tables_sound)
}

fn consequence(kind: &str) -> &'static str {
    match kind {
        "trigger" => ": the counters and events it keeps go wrong",
        "index" => ": claims and lists scan instead of seeking",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::{normalized, statuses};

    #[test]
    fn quotes_and_spaces_do_not_count() {
        assert_eq!(normalized("CREATE  INDEX x ON \"tinyq_jobs\"\n (a)"), "CREATE INDEX x ON tinyq_jobs (a)");
        assert_eq!(normalized("SELECT '\"a b\"'"), "SELECT '\"a b\"'");
        assert_eq!(normalized("a \"\" b \"unclosed"), "a \"\" b \"unclosed");
    }

    #[test]
    fn statuses_come_from_the_check_constraint() {
        let sql = "status TEXT NOT NULL CHECK (status = 'queued' OR status = 'done'), x";
        assert_eq!(statuses(sql), ["queued", "done"]);
    }
}
