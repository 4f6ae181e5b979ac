//! Keys (KEY-01): what tq_add does when its chosen id is present, by its `on_conflict`:
//! - `keep` (the default, DEDUPE): nothing;
//! - `replace`: a job that has not started (scheduled, waiting or blocked) takes the new
//!   payload, meta, priority, group, attempts, time and expiry; a running, done or failed one
//!   stays. A blocked job stays blocked on what it waits for (its `after` list is the one it
//!   was created with; a replace's `after` is not applied), and a signal wait keeps its timeout;
//! - `debounce`: as replace, and its time becomes now + `delay` at every add, never later
//!   than `max_wait` after the add that created it.
//!
//! Each is one statement (an upsert), atomic under the write lock: adds from any number of
//! processes leave one job, holding what the last one committed. Watchers see a replace
//! as an event of the job's state with the detail {"replaced":true}, and the counters,
//! buckets and group heads follow it (the trigger tinyq_jobs_replaced, sql/store.sql).

use crate::marks;
use crate::options::{self, Options};
use crate::row::{insert_job, OnConflict, Row};
use crate::sqlite::{Bind, Conn, Result};

/// The options of tq_add that say what a present id does.
pub const OPTIONS: &[&str] = &["on_conflict", "max_wait"];

/// Reads `on_conflict` and `max_wait`, given the add's `id`, `at` and `delay`.
pub fn parse(opts: &Options, id: Option<&str>, at: Option<i64>, delay: Option<i64>) -> Result<OnConflict> {
    let max_wait = opts.duration("max_wait")?;
    let mode = match opts.text("on_conflict")?.as_deref() {
        None | Some("keep") => OnConflict::Keep,
        Some("replace") => OnConflict::Replace,
        Some("debounce") => OnConflict::Debounce { max_wait },
        Some(other) => {
            bail!("option \"on_conflict\" must be 'keep', 'replace' or 'debounce', not '{}'", options::clip(other))
        }
    };
    if mode != OnConflict::Keep && id.is_none() {
        bail!("option \"on_conflict\" other than 'keep' needs an \"id\": a generated id never meets a present job");
    }
    if let OnConflict::Debounce { .. } = mode {
        if at.is_some() {
            bail!("option \"on_conflict\" 'debounce' sets the job's time from \"delay\": give it instead of \"at\"");
        }
        let Some(delay) = delay else {
            bail!("option \"on_conflict\" 'debounce' needs a \"delay\" (the quiet time after the last add)");
        };
        if let Some(max_wait) = max_wait.filter(|m| *m < delay) {
            bail!("option \"max_wait\" ({max_wait}ms) must not be shorter than \"delay\" ({delay}ms)");
        }
    } else if max_wait.is_some() {
        bail!("option \"max_wait\" goes with \"on_conflict\": 'debounce' only");
    }
    Ok(mode)
}

/// SQL: the new time of a replaced job: the add's (?6), no later than `max_wait` (?13, NULL
/// for none) after the job's creation.
macro_rules! new_run_at {
    () => {
        "min(?6, coalesce(tinyq_jobs.created_at + ?13, ?6))"
    };
}

/// Adds the job or, per its `on_conflict`, replaces the present job of its id, in one
/// statement. Returns the rows written (0: the id is taken by a job it leaves alone).
pub fn write(conn: &Conn, job: &Row, now: i64) -> Result<i64> {
    let status = match job.waits {
        Some(_) => "blocked",
        None if job.run_at > now => "scheduled",
        None => "queued",
    };
    let slot = marks::slot(job.id);
    let max_wait = match job.on_conflict {
        OnConflict::Debounce { max_wait } => max_wait,
        _ => None,
    };
    let values: [&dyn Bind; 15] = [
        &job.id,
        &job.queue,
        &status,
        job.group,
        &job.priority,
        &job.run_at,
        &job.budget,
        job.payload,
        job.meta,
        &now,
        &job.start_by,
        &slot,
        &max_wait,
        &job.waits,
        &job.after_failed,
    ];
    if job.on_conflict == OnConflict::Keep {
        return conn.exec(concat!(insert_job!(), " ON CONFLICT (id) DO NOTHING"), &values);
    }
    // A blocked job stays blocked (its dependencies or its signal are its own), and one that
    // waits for a signal keeps its timeout as its time.
    conn.exec(
        concat!(
            insert_job!(),
            " ON CONFLICT (id) DO UPDATE SET",
            // `grp` is named below, so the line's and the group's triggers fire (timeline.rs)
            crate::timeline::next_event_ungrouped!(),
            ", status = CASE WHEN tinyq_jobs.status = 'blocked' THEN 'blocked' WHEN ",
            new_run_at!(),
            " > ?10 THEN 'scheduled' ELSE 'queued' END,
                 run_at = CASE WHEN tinyq_jobs.signal IS NOT NULL THEN tinyq_jobs.run_at ELSE ",
            new_run_at!(),
            " END, grp = ?4, priority = ?5, budget = ?7, payload = ?8, meta = ?9, start_by = ?11, changed_at = ?10,
                 note = '{\"replaced\":true}',
                 -- the attempt that held it last cannot settle what it never ran (JOB-05)
                 lease_until = NULL,
                 parked = tinyq_jobs.status <> 'blocked' AND ?4 IS NOT NULL AND ",
            new_run_at!(),
            " <= ?10 AND ",
            crate::row::group_limited!("?2"),
            "
             WHERE (tinyq_jobs.status = 'scheduled' OR tinyq_jobs.status = 'queued' OR tinyq_jobs.status = 'blocked')
               AND tinyq_jobs.queue = ?2"
        ),
        &values,
    )
}

/// After an add that wrote nothing: an id whose job is in another queue is an error (ids
/// name one job in the whole store, and a job never moves between queues: an add that
/// silently did nothing would lose the second queue's job); a job of its queue stays.
pub fn check_same_queue(conn: &Conn, job: &Row) -> Result<()> {
    let present = conn.row("SELECT queue FROM tinyq_jobs WHERE id = ?1", &[&job.id], |st| st.text(0))?.flatten();
    let why = match job.on_conflict {
        OnConflict::Keep => "an id names one job of the store",
        _ => "on_conflict never moves a job to another queue",
    };
    match present {
        Some(queue) if queue != job.queue => bail!(
            "option \"id\": '{}' is a job of queue '{}', not '{}': {why}",
            options::clip(job.id),
            options::clip(&queue),
            options::clip(job.queue)
        ),
        _ => Ok(()),
    }
}
