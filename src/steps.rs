//! Steps (JOB-06): answers kept under a job so a later attempt gets them back; and progress.

use crate::settle::{keep_lease, working_fence};
use crate::sqlite::{Conn, Out, Result, Val};
use crate::timeline::next_event_ungrouped;
use crate::{options, store};

/// tq_step_get(id, name) -> the kept answer or NULL
pub fn tq_step_get(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 2 {
        bail!("expects (id, name)");
    }
    let id = options::name("id", &args[0])?;
    let name = options::step_name("name", &args[1])?;
    if !store::exists(conn)? {
        return Ok(Out::Null);
    }
    kept_step(conn, &id, &name)
}

/// The answer kept under `name` for the job `id`, or NULL.
fn kept_step(conn: &Conn, id: &str, name: &str) -> Result<Out> {
    let kept = conn.one(
        "SELECT s.value FROM tinyq_steps s JOIN tinyq_jobs j ON s.job = j.seq WHERE j.id = ?1 AND s.name = ?2",
        &[&id, &name],
    )?;
    Ok(Out::Val(kept.unwrap_or(Val::Null)))
}

/// tq_step_put(id, attempt, name, value) -> the kept answer (the first one wins), or NULL
/// when the attempt no longer holds the job. Keeping a step also renews the lease.
pub fn tq_step_put(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 4 {
        bail!("expects (id, attempt, name, value)");
    }
    let id = options::name("id", &args[0])?;
    let attempt = options::int("attempt", &args[1], 1, i64::MAX)?;
    let name = options::name("name", &args[2])?;
    if args[3].is_null() {
        // NULL is the answer for "this attempt lost the job", and tq_step_get's "none kept".
        bail!("value must not be NULL: NULL is what a lost attempt gets back (keep 'null' or '' instead)");
    }
    let value = options::data("value", &args[3], false)?;
    conn.write_tx(|| {
        if !keep_lease(conn, &id, attempt)? {
            return Ok(Out::Null);
        }
        // No RETURNING: SQLite runs it through an ephemeral table, opened and closed on
        // every call, which cost more than the insert itself (a group commit makes a
        // thousand of these calls in one statement).
        let added = conn.exec(
            "INSERT INTO tinyq_steps (job, name, value, attempt, created_at)
             SELECT seq, ?3, ?4, ?2, ?5 FROM tinyq_jobs WHERE id = ?1
             ON CONFLICT (job, name) DO NOTHING",
            &[&id, &attempt, &name, &value, &conn.now()],
        )?;
        if added > 0 {
            return Ok(Out::Val(value));
        }
        kept_step(conn, &id, &name)
    })
}

/// tq_progress(id, attempt, value) -> 1 or 0; watchers see it as a `progress` event.
pub fn tq_progress(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 3 {
        bail!("expects (id, attempt, value)");
    }
    let id = options::name("id", &args[0])?;
    let attempt = options::int("attempt", &args[1], 1, i64::MAX)?;
    let value = options::data("value", &args[2], true)?;
    conn.write_one(|| {
        let n = conn.exec(
            concat!(
                "UPDATE tinyq_jobs SET",
                next_event_ungrouped!(),
                ", progress = ?3, changed_at = ?4 WHERE",
                working_fence!()
            ),
            &[&id, &attempt, &value, &conn.now()],
        )?;
        Ok(Out::Int(n.min(1)))
    })
}
