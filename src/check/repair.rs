//! tq_check's recount: what can be rebuilt from the rows is, in one write transaction. A
//! store whose version is unreadable but whose tables are this version's gets its version
//! back; an older store is upgraded (store::ensure); then every trigger of a new store is
//! dropped, the counters are counted again from the rows with no trigger running (as the
//! upgrades do), each job's timeline head set to its newest event, the triggers are created again from the store script, missing or changed
//! indexes too, settings out of range go back to their defaults, and every queue's limits are rebuilt as tq_queue rebuilds them. What it
//! cannot rebuild (a missing or changed table, marks of jobs that are gone) it leaves for the operator: tq_check reports it again.

use super::counters;
use super::objects::{self, Object};
use super::ranges;
use super::Problem;
use crate::limits;
use crate::marks;
use crate::settings;
use crate::sqlite::{Conn, Result, Val};
use crate::store;

pub fn run(conn: &Conn, found: &[Problem]) -> Result<()> {
    let shape = objects::expected()?;
    conn.transaction(|| {
        if found
            .iter()
            .any(|p| p.kind == "missing" && shape.objects.iter().any(|o| o.name == p.object && o.kind == "table"))
        {
            return Ok(()); // a table is gone: nothing to count in, nor to count
        }
        let version = "SELECT value FROM tinyq_meta WHERE key = 'schema_version'";
        let stored = conn.one(version, &[])?;
        let mislabeled = found.iter().any(|p| p.kind == "schema_version" && p.detail.contains(objects::MISLABELED));
        if mislabeled || !matches!(stored, Some(Val::Int(_))) {
            if !tables_are_current(conn, found) {
                return Ok(()); // which version it is, only the operator can tell
            }
            conn.exec(
                "INSERT INTO tinyq_meta (key, value) VALUES ('schema_version', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&store::version()],
            )?;
        }
        store::ensure(conn)?; // an older store is upgraded first
        let triggers = in_store_order(shape.objects.iter().filter(|o| o.kind == "trigger").collect());
        for t in &triggers {
            conn.exec_script(&format!("DROP TRIGGER IF EXISTS {}", quoted(&t.name)))?;
        }
        conn.exec_script(&shape.recount_sql)?;
        conn.exec_script("DELETE FROM tinyq_steps WHERE job NOT IN (SELECT seq FROM tinyq_jobs)")?;
        // Each timeline's head back on its newest event: the events logged from now on link to it.
        conn.exec_script(concat!(
            "UPDATE tinyq_jobs SET last_event = latest.seq FROM ",
            counters::newest_events!(),
            " WHERE latest.id = tinyq_jobs.id AND tinyq_jobs.last_event IS NOT latest.seq"
        ))?;
        store::recut_lines(conn)?;
        for t in &triggers {
            conn.exec_script(&t.sql)?;
        }
        let broken =
            |name: &str| found.iter().any(|p| (p.kind == "missing" || p.kind == "changed") && p.object == name);
        for index in shape.objects.iter().filter(|o| o.kind == "index" && broken(&o.name)) {
            conn.exec_script(&format!("DROP INDEX IF EXISTS {}; {}", quoted(&index.name), index.sql))?;
        }
        marks::assign_slots(conn)?;
        for p in found.iter().filter(|p| p.kind == "setting") {
            if let Some(q) = &p.queue {
                ranges::reset(conn, q, &p.object)?;
            }
        }
        let now = conn.now();
        for q in settings::all(conn)? {
            limits::rebuild(conn, &q, now)?;
        }
        Ok(())
    })?;
    conn.store_ready.set(false); // read the version again
    Ok(())
}

/// Are the store's tables those of this version, as the check found them (so that its
/// unreadable version can be written back)? The check compared them (objects::check).
fn tables_are_current(conn: &Conn, found: &[Problem]) -> bool {
    let has_meta = conn.one_int("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tinyq_meta'", &[]);
    let Ok(shape) = objects::expected() else { return false };
    let table_problem = found.iter().any(|p| {
        (p.kind == "missing" || p.kind == "changed")
            && shape.objects.iter().any(|o| o.kind == "table" && o.name == p.object)
    });
    matches!(has_meta, Ok(Some(1))) && !table_problem
}

/// The objects in the order sql/store.sql creates them: SQLite fires the triggers of one
/// change newest first, and some read what an older one wrote (tinyq_jobs_lined after
/// tinyq_jobs_changed), so created again in name order they would count wrong.
fn in_store_order(mut objects: Vec<&Object>) -> Vec<&Object> {
    let at = |o: &Object| store::script().find(&format!("CREATE TRIGGER {} ", o.name)).unwrap_or(usize::MAX);
    objects.sort_by_key(|o| at(o));
    objects
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
