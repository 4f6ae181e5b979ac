//! The store: its tables created on first use from sql/ and migrated forward by version
//! (tinyq records its version in tinyq_meta, never in PRAGMA user_version), and the write
//! transactions that create or migrate it first and hold the write lock from their first read.

use crate::marks;
use crate::sqlite::Conn;
use crate::sqlite::{Error, Result};

/// What a new store is created with, at this version.
const STORE: Step = (9, include_str!("../sql/store.sql"), None);

/// A version, the script that brings a store to it, and what tinyq does after the script.
type Step = (i64, &'static str, Option<fn(&Conn) -> Result<()>>);

/// Each migration brings a store made by an older tinyq from one version to the next.
const MIGRATIONS: &[Step] = &[
    (2, include_str!("../sql/migrate_1_to_2.sql"), None),
    (3, include_str!("../sql/migrate_2_to_3.sql"), None),
    (4, include_str!("../sql/migrate_3_to_4.sql"), None),
    (5, include_str!("../sql/migrate_4_to_5.sql"), None),
    (6, include_str!("../sql/migrate_5_to_6.sql"), Some(marks::migrate)),
    (7, include_str!("../sql/migrate_6_to_7.sql"), None),
    (8, include_str!("../sql/migrate_7_to_8.sql"), None),
    (9, include_str!("../sql/migrate_8_to_9.sql"), None),
];

pub fn version() -> i64 {
    STORE.0
}

/// The script a new store is created with (tq_check compares a store with what it makes).
pub fn script() -> &'static str {
    STORE.1
}

/// Cuts every line of over 1024 queued jobs into buckets and spans again, from the rows, by
/// the statements of the upgrade that gave them their shape (sql/migrate_7_to_8.sql, its
/// long-lines block: the ones before its first trigger that write rows). Like that upgrade,
/// this runs while the triggers of tinyq_buckets and tinyq_spans are absent (tq_check's
/// recount drops them first).
pub fn recut_lines(conn: &Conn) -> Result<()> {
    for statement in cutting_statements() {
        conn.exec_script(statement)?;
    }
    Ok(())
}

/// The statements of sql/migrate_7_to_8.sql's long-lines block that empty and fill
/// tinyq_buckets, tinyq_spans and the line columns of tinyq_counts: those that write rows,
/// before the block's first trigger.
fn cutting_statements() -> Vec<&'static str> {
    let script = MIGRATIONS.iter().find(|m| m.0 == 8).map_or("", |m| m.1);
    let block = script.split("\n-- ---- long-lines").nth(1).unwrap_or("");
    let before_triggers = block.split("\nCREATE TRIGGER").next().unwrap_or("");
    before_triggers
        .split(";\n")
        .map(|s| s.trim_start_matches(|c: char| c.is_whitespace()))
        .map(|s| {
            // Leading comment lines are not part of the statement's kind.
            let mut rest = s;
            while rest.starts_with("--") {
                rest = rest.split_once('\n').map_or("", |(_, r)| r);
            }
            rest.trim()
        })
        .filter(|s| s.starts_with("INSERT INTO") || s.starts_with("UPDATE") || s.starts_with("DELETE FROM"))
        .collect()
}

/// The schema version of the store in this database (0: there is none).
pub fn stored_version(conn: &Conn) -> Result<i64> {
    let has_meta = conn.one_int("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tinyq_meta'", &[])?;
    if has_meta.is_none() {
        return Ok(0);
    }
    let v = conn.one_int("SELECT value FROM tinyq_meta WHERE key = 'schema_version'", &[]).map_err(|e| Error {
        code: e.code,
        msg: format!("the table tinyq_meta is not tinyq's store ({}): rename it, or use another database", e.msg),
    })?;
    Ok(v.unwrap_or(0))
}

/// Is there a store at this tinyq's version? Readers use this and create nothing.
pub fn exists(conn: &Conn) -> Result<bool> {
    if conn.store_ready.get() {
        return Ok(true);
    }
    let v = stored_version(conn)?;
    check_not_newer(v)?;
    if v == version() {
        remember(conn);
    }
    Ok(v == version())
}

fn check_not_newer(v: i64) -> Result<()> {
    if v > version() {
        bail!("this store has schema version {v}, newer than this tinyq ({}); upgrade tinyq", version());
    }
    Ok(())
}

/// Creates or migrates the store if needed. Writers call this first.
pub fn ensure(conn: &Conn) -> Result<()> {
    if exists(conn)? {
        return Ok(());
    }
    conn.transaction(|| {
        let v = stored_version(conn)?; // again, now under the write lock
        check_not_newer(v)?;
        let scripts: Vec<_> = match v {
            0 => vec![STORE],
            _ => MIGRATIONS.iter().copied().filter(|m| m.0 > v).collect(),
        };
        if v > 0 && !scripts.is_empty() && conn.write_in_progress() {
            // Rebuilding a table needs DROP TABLE, which SQLite refuses while another
            // statement (the trigger's) is running.
            bail!("this store has schema version {v} and needs an upgrade to {}, which cannot run inside another statement (a trigger): call tinyq once outside one, for example SELECT tq_sweep()", version());
        }
        for (to, script, then) in scripts {
            exec_script(conn, script)?;
            if let Some(then) = then {
                then(conn).map_err(|e| Error { code: e.code, msg: format!("creating the store: {}", e.msg) })?;
            }
            conn.exec(
                "INSERT INTO tinyq_meta (key, value) VALUES ('schema_version', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&to],
            )?;
        }
        Ok(())
    })?;
    remember(conn);
    Ok(())
}

/// Caches "the store is here" only once it is committed: inside a transaction the
/// caller may still roll its creation back.
fn remember(conn: &Conn) {
    if conn.autocommit() {
        conn.store_ready.set(true);
    }
}

/// Runs a script of several statements.
fn exec_script(conn: &Conn, script: &str) -> Result<()> {
    conn.exec_script(script).map_err(|e| Error { code: e.code, msg: format!("creating the store: {}", e.msg) })
}

impl Conn {
    /// Runs `f` atomically on the store (created first if need be), holding the write lock
    /// from its first read (see docs/design.md). Writers call nothing that reads before it:
    /// within a statement, a read of `main` keeps a snapshot open until the statement ends,
    /// and a connection holding a snapshot cannot wait for the write lock.
    pub fn write_tx<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let own = self.autocommit() && !self.write_in_progress();
        let r = self.transaction(|| {
            ensure(self)?;
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_cutting_statements_are_the_upgrades_six() {
        let found = super::cutting_statements();
        assert_eq!(found.len(), 6, "{found:?}");
        assert!(found[0].starts_with("DELETE FROM tinyq_spans"));
        assert!(found[1].starts_with("DELETE FROM tinyq_buckets"));
        assert!(found[2].starts_with("UPDATE tinyq_counts SET spill = NULL"));
        assert!(found[3].starts_with("INSERT INTO tinyq_buckets"));
        assert!(found[4].starts_with("UPDATE tinyq_counts SET spill = ''"));
        assert!(found[5].starts_with("INSERT INTO tinyq_spans"));
    }
}
