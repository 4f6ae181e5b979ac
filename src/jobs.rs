//! Jobs: add (idempotent by id), get (with `ahead`), cancel, retry.

use serde_json::json;

use crate::keys;
use crate::options::{self, Moment, Options};
use crate::row::{group_limited, OnConflict, Row};
use crate::settings;
use crate::sqlite::Conn;
use crate::sqlite::{Out, Result, Val};
use crate::stats;
use crate::timeline::next_event;
use crate::workflows::deps::{self, After, End};
use crate::{expiry, json, random, store};

/// Arguments of `tq_add`, checked before anything is written.
struct NewJob {
    queue: String,
    payload: Val,
    id: Option<String>,
    at: Option<i64>,
    delay: Option<i64>,
    priority: i64,
    group: Option<String>,
    attempts: Option<i64>,
    meta: Option<String>,
    expires: Option<Moment>,
    on_conflict: OnConflict,
    after: Option<After>,
}

/// The job options a schedule also gives its jobs (CRON-01), besides those of tq_add alone.
pub const JOB_OPTIONS: &[&str] = &["priority", "group", "attempts", "meta"];

/// The job options a schedule shares with tq_add.
pub struct JobOptions {
    pub priority: i64,
    pub group: Option<String>,
    pub attempts: Option<i64>,
    pub meta: Option<String>,
}

/// Reads the job options a schedule shares with tq_add.
pub fn job_options(opts: &Options) -> Result<JobOptions> {
    Ok(JobOptions {
        priority: opts.int("priority", i32::MIN as i64, i32::MAX as i64)?.unwrap_or(0),
        group: opts.text("group")?,
        attempts: opts.int("attempts", 1, 1_000_000)?,
        meta: opts.object("meta")?,
    })
}

fn parse_add(args: &[Val]) -> Result<NewJob> {
    if args.len() < 2 || args.len() > 3 {
        bail!("expects (queue, payload [, options])");
    }
    let opts = Options::parse(
        args.get(2),
        &[&["id", "at", "delay"], JOB_OPTIONS, expiry::OPTIONS, keys::OPTIONS, deps::OPTIONS].concat(),
    )?;
    let JobOptions { priority, group, attempts, meta } = job_options(&opts)?;
    let mut job = NewJob {
        queue: options::name("queue", &args[0])?,
        payload: options::data("payload", &args[1], false)?,
        id: opts.text("id")?,
        at: opts.time("at")?,
        delay: opts.duration("delay")?,
        priority,
        group,
        attempts,
        meta,
        expires: expiry::parse(&opts)?,
        on_conflict: OnConflict::Keep,
        after: deps::parse(&opts)?,
    };
    if job.at.is_some() && job.delay.is_some() {
        bail!("give option \"at\" or \"delay\", not both");
    }
    job.on_conflict = keys::parse(&opts, job.id.as_deref(), job.at, job.delay)?;
    if job.id.as_deref().is_some_and(|id| id.starts_with("tq_")) {
        bail!("option \"id\" must not start with 'tq_': that prefix is reserved for generated ids");
    }
    if let (Some(after), Some(id)) = (&job.after, &job.id) {
        deps::refuse_self("option \"after\"", id, &after.ids)?;
    }
    if let Some(id) = job.id.as_deref().filter(|id| is_schedule_id(id)) {
        bail!(
            "option \"id\" must not end in '@' and a UTC time ('{}'): that form is reserved for the jobs of schedules",
            options::clip(id)
        );
    }
    Ok(job)
}

/// Does `id` have the form of a schedule's job id, `<name>@<due time in ISO-8601 UTC>`
/// (src/schedule/, which adds such jobs through `insert`)? Any UTC spelling of the time
/// counts, so that no chosen id can take a schedule's due time (CRON-01).
fn is_schedule_id(id: &str) -> bool {
    id.rsplit_once('@').is_some_and(|(_, at)| {
        chrono::DateTime::parse_from_rfc3339(at).is_ok_and(|t| t.offset().local_minus_utc() == 0)
    })
}

/// tq_add(queue, payload [, options]) -> id
pub fn tq_add(conn: &Conn, args: &[Val]) -> Result<Out> {
    let job = parse_add(args)?;
    // Each statement here is atomic on its own: the INSERT, and the DELETE of a row that is
    // past its window (which any sweep may remove), so no transaction is needed. That keeps
    // an add inside a trigger or the caller's transaction to one statement. A job with
    // `after` writes its edges too, and a grouped one may mark its group (mark_group), in
    // one transaction.
    let add = || {
        let now = conn.now();
        let run_at = job.at.unwrap_or(now + job.delay.unwrap_or(0));
        let id = match &job.id {
            Some(id) => id.clone(),
            None => generated_id(conn, now)?,
        };
        let deps = match &job.after {
            Some(after) => Some(deps::find(conn, "option \"after\"", &after.ids)?),
            None => None,
        };
        let waits = deps.as_ref().map(|d| d.iter().filter(|d| d.status != "done").count() as i64).filter(|w| *w > 0);
        let row = Row {
            id: &id,
            queue: &job.queue,
            group: &job.group,
            priority: job.priority,
            run_at,
            budget: job.attempts,
            payload: &job.payload,
            meta: &job.meta,
            start_by: expiry::bound(job.expires.as_ref(), run_at, now)?,
            on_conflict: job.on_conflict,
            waits,
            after_failed: deps::stored_policy(job.after.as_ref()),
        };
        let Some(deps) = deps else {
            insert(conn, &row, now)?;
            return Ok(Out::Text(id));
        };
        // `after` applies to the job this add creates; a replace keeps the present job's.
        let before = conn.one_int("SELECT seq FROM tinyq_jobs WHERE id = ?1", &[&id])?;
        insert(conn, &row, now)?;
        let after = conn.one_int("SELECT seq FROM tinyq_jobs WHERE id = ?1", &[&id])?;
        if let Some(seq) = after.filter(|s| Some(*s) != before) {
            deps::link(conn, seq, &deps)?;
            deps::settle_failed(conn, seq, &deps, now)?;
        }
        Ok(Out::Text(id))
    };
    if job.after.is_some() || job.group.is_some() {
        conn.write_tx(add)
    } else {
        conn.write_one(add)
    }
}

/// Adds the job unless its id is present; a present job stays (DEDUPE: its meta included),
/// or is replaced per `on_conflict` (keys.rs). Returns whether the job was written. One
/// statement, or two when the id's holder is past its window.
pub fn insert(conn: &Conn, job: &Row, now: i64) -> Result<bool> {
    if keys::write(conn, job, now)? > 0 {
        mark_group(conn, job)?;
        return Ok(true);
    }
    // The id is taken: if by a job past its retention window, it is free again (RET-01).
    let freed = conn.exec(
        "DELETE FROM tinyq_jobs WHERE id = ?1 AND status IN ('done', 'failed') AND expires_at <= ?2",
        &[&job.id, &now],
    )?;
    if freed > 0 && keys::write(conn, job, now)? > 0 {
        mark_group(conn, job)?;
        return Ok(true);
    }
    keys::check_same_queue(conn, job)?;
    Ok(false)
}

/// A job written set aside (due, grouped, in a queue with group limits) marks its group,
/// so that the next claim promotes the group's head (limits/groups.rs). Here rather than in
/// a trigger on every insert (schema 9): an ungrouped add pays nothing for it. A replace
/// marks its groups in its own trigger too (tinyq_jobs_replaced); twice is the same.
fn mark_group(conn: &Conn, job: &Row) -> Result<()> {
    if job.group.is_none() {
        return Ok(());
    }
    conn.exec(
        "INSERT INTO tinyq_groups (queue, grp, dirty) SELECT queue, grp, 1 FROM tinyq_jobs WHERE id = ?1 AND parked = 1
         ON CONFLICT (queue, grp) DO UPDATE SET dirty = 1",
        &[&job.id],
    )?;
    Ok(())
}

fn generated_id(conn: &Conn, now: i64) -> Result<String> {
    // With a pinned clock the draw is seeded by the event log's position, which only grows
    // (every add logs an event), so no two adds draw alike (REP-01).
    let salt = match conn.clock.get() {
        Some(_) => conn.one_int("SELECT max(seq) FROM tinyq_events", &[])?.unwrap_or(0) as u64,
        None => 0,
    };
    Ok(random::job_id(now, random::draw(conn, salt * 2), random::draw(conn, salt * 2 + 1)))
}

/// The state a user sees, from the stored status and the clock.
pub fn derived_state(status: &str, run_at: i64, now: i64) -> &str {
    match status {
        "queued" => "waiting",
        "scheduled" if run_at <= now => "waiting",
        s => s,
    }
}

/// tq_get(id) -> JSON object or NULL
pub fn tq_get(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 1 {
        bail!("expects (id)");
    }
    let id = options::name("id", &args[0])?;
    if !store::exists(conn)? {
        return Ok(Out::Null);
    }
    let now = conn.now();
    let found = conn.row(
        "SELECT seq, id, queue, status, grp, priority, attempt, tries, budget, run_at, lease_until, deadline,
                worker, payload, result, error, progress, created_at, settled_at, meta, start_by, signal
         FROM tinyq_jobs WHERE id = ?1",
        &[&id],
        |st| {
            let (queue, status) = (st.text(2).unwrap_or_default(), st.text(3).unwrap_or_default());
            let place = (st.int(5), st.int(9), st.int(0));
            let job = json!({
                "id": st.text(1),
                "queue": queue,
                "state": derived_state(&status, place.1, now),
                "group": st.text(4),
                "priority": place.0,
                "attempt": st.int(6),
                "tries": st.int(7),
                "attempts": st.opt_int(8), // NULL: the queue's, filled in below
                "run_at": place.1,
                "lease_until": st.opt_int(10),
                "deadline": st.opt_int(11),
                "worker": st.text(12),
                "error": st.text(15),
                "created_at": st.int(17),
                "settled_at": st.opt_int(18),
                "expires": st.opt_int(20),
            });
            // Written as stored (json.rs): [payload, meta, result, progress].
            let stored = [st.val(13), st.val(19), st.val(14), st.val(16)];
            (job, stored, queue, status, place, st.text(21))
        },
    )?;
    let Some((mut obj, stored, queue, status, place, signal)) = found else { return Ok(Out::Null) };
    if status == "blocked" {
        obj["blocked_on"] = deps::blocked_on(conn, place.2, signal, place.1)?;
    }
    if obj["attempts"].is_null() {
        obj["attempts"] = settings::load(conn, &queue)?.attempts().into();
    }
    if obj["state"] == "waiting" {
        obj["ahead"] = stats::ahead(conn, &queue, place, status == "queued", now)?.into();
    }
    obj["payload_type"] = json::kind(&stored[0]).into();
    let [payload, meta, result, progress] = &stored;
    Ok(Out::Text(json::object(
        obj,
        &[("payload", payload), ("meta", meta), ("result", result), ("progress", progress)],
    )))
}

/// tq_cancel(id) -> 1 or 0. The job is marked (watchers see `cancelled`) and removed.
pub fn tq_cancel(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 1 {
        bail!("expects (id)");
    }
    let id = options::name("id", &args[0])?;
    conn.write_tx(|| {
        // Marking it logs the `cancelled` event (trigger); then it is gone, with its steps.
        // (A trigger doing the delete would cost every UPDATE of tinyq_jobs ~5 µs.)
        let now = conn.now();
        let marked = conn.exec(
            concat!(
                "UPDATE tinyq_jobs SET",
                next_event!(),
                ", status = 'cancelled', changed_at = ?2, note = NULL
             WHERE id = ?1 AND status IN ('scheduled', 'queued', 'running', 'blocked')"
            ),
            &[&id, &now],
        )?;
        if marked > 0 {
            // Its dependents follow their `after_failed` (DEP-01), and it goes with them.
            match conn.one_int("SELECT seq FROM tinyq_jobs WHERE id = ?1 AND linked IS NOT NULL", &[&id])? {
                Some(seq) => deps::ended(conn, seq, End::Cancelled, now)?,
                None => {
                    conn.exec("DELETE FROM tinyq_jobs WHERE id = ?1", &[&id])?;
                }
            }
        }
        Ok(Out::Int(marked.min(1)))
    })
}

/// tq_retry(id) -> 1 or 0: a failed job waits again with a fresh budget (and without its
/// `expires` once that has passed: EXP-01 is about starting late by itself, not when asked).
pub fn tq_retry(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 1 {
        bail!("expects (id)");
    }
    let id = options::name("id", &args[0])?;
    conn.write_tx(|| {
        let now = conn.now();
        let n = conn.exec(
            concat!(
                "UPDATE tinyq_jobs SET",
                next_event!(),
                ", status = 'queued', tries = 0, run_at = ?2, lease_until = NULL, deadline = NULL,
                 holder = NULL, settled_at = NULL, expires_at = NULL, changed_at = ?2, note = 'retry',
                 -- an `expires` already past would end it again at once: a retry runs it
                 start_by = CASE WHEN start_by > ?2 THEN start_by END,
                 parked = grp IS NOT NULL AND ",
                group_limited!("tinyq_jobs.queue"),
                "
             WHERE id = ?1 AND status = 'failed'"
            ),
            &[&id, &now],
        )?;
        Ok(Out::Int(n.min(1)))
    })
}
