//! Periodic jobs (CRON-01): tq_schedule, tq_unschedule, and what a claim does first.
//! There is no thread: the claim on a schedule's queue turns its due times into jobs, in
//! the claim's own write transaction, so two processes never add the same due time (the
//! write lock orders them and the ids `<name>@<due time>` would refuse a second one).

mod cron;
mod get;

pub use get::tq_schedule_get;

use crate::jobs;
use crate::options::{self, Options};
use crate::row::OnConflict;
use crate::row::Row;
use crate::sqlite::Conn;
use crate::sqlite::{Error, Out, Result, Stmt, Val};
use crate::store;
use cron::{Missed, Timing};

/// A schedule as stored in tinyq_schedules.
struct Schedule {
    name: String,
    queue: String,
    when: String,
    tz: String,
    payload: Val,
    priority: i64,
    group: Option<String>,
    attempts: Option<i64>,
    meta: Option<String>,
    missed: Missed,
    paused: bool,
}

/// The longest schedule name: its jobs' ids (`<name>@2026-12-01T08:00:00.500Z`, 25 bytes
/// more at most) must fit options::MAX_NAME, or the jobs could never be settled.
const MAX_SCHEDULE_NAME: usize = options::MAX_NAME - 25;
/// Longest `when`, in bytes: any real cron expression is far shorter.
const MAX_WHEN: usize = options::MAX_NAME;

fn bad(what: &str, e: String) -> Error {
    Error::bad(format!("{what}: {e}"))
}

fn parse_schedule(args: &[Val]) -> Result<Schedule> {
    if args.len() < 4 || args.len() > 5 {
        bail!("expects (name, queue, when, payload [, options])");
    }
    let opts = Options::parse(args.get(4), &[&["tz", "missed", "paused"], jobs::JOB_OPTIONS].concat())?;
    let jobs::JobOptions { priority, group, attempts, meta } = jobs::job_options(&opts)?;
    let name = options::name("name", &args[0])?;
    if name.starts_with("tq_") {
        bail!("name must not start with 'tq_': its jobs' ids would take the prefix reserved for generated ids");
    }
    if name.len() > MAX_SCHEDULE_NAME {
        // Its jobs' ids add '@' and the due time, and an id must fit the id limit.
        bail!("name is longer than {MAX_SCHEDULE_NAME} bytes (its jobs' ids add '@<time>' to it)");
    }
    let sched = Schedule {
        name,
        queue: options::name("queue", &args[1])?,
        when: match &args[2] {
            Val::Text(s) if s.len() > MAX_WHEN => bail!("when is longer than {MAX_WHEN} bytes"),
            Val::Text(s) => s.clone(),
            v => bail!("when must be text (a cron expression, '@every <duration>' or '@daily'...), not {}", v.kind()),
        },
        tz: opts.text("tz")?.unwrap_or_else(|| "UTC".into()),
        payload: options::data("payload", &args[3], false)?,
        priority,
        group,
        attempts,
        meta,
        missed: match opts.text("missed")? {
            None => Missed::Latest,
            Some(m) => Missed::parse(&m).map_err(|e| bad("option \"missed\"", e))?,
        },
        paused: opts.bool("paused")?.unwrap_or(false),
    };
    cron::parse_tz(&sched.tz).map_err(|e| bad("option \"tz\"", e))?;
    Ok(sched)
}

/// tq_schedule(name, queue, when, payload [, options]) -> JSON of the schedule.
/// Creates or replaces `name`. A replacement with the same queue, `when` and `tz` keeps its
/// next due time (declaring the same schedule at every start-up loses no run); any other
/// change, or resuming a paused one, waits for the next due time after now (so does a
/// replacement after the clock was set back past the kept due time).
pub fn tq_schedule(conn: &Conn, args: &[Val]) -> Result<Out> {
    let s = parse_schedule(args)?;
    let timing = Timing::parse(&s.when, &s.tz).map_err(|e| bad("when", e))?;
    conn.write_tx(|| {
        let now = conn.now();
        let kept = conn.one_int(
            "SELECT next_at FROM tinyq_schedules
             WHERE name = ?1 AND queue = ?2 AND expr = ?3 AND tz = ?4 AND paused = 0 AND next_at IS NOT NULL",
            &[&s.name, &s.queue, &s.when, &s.tz],
        )?;
        let first =
            timing.first(now).ok_or_else(|| Error::bad(format!("when {} matches no time", options::quote(&s.when))))?;
        // A kept due time later than the first one after now means the clock was set back
        // since: start again from now rather than wait for the clock to catch up.
        let next_at = kept.filter(|&k| k <= first).unwrap_or(first);
        conn.exec(
            "INSERT INTO tinyq_schedules (name, queue, expr, tz, payload, priority, grp, budget, meta, missed, paused,
                                          next_at, created_at, changed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13)
             ON CONFLICT (name) DO UPDATE SET
                 queue = excluded.queue, expr = excluded.expr, tz = excluded.tz, payload = excluded.payload,
                 priority = excluded.priority, grp = excluded.grp, budget = excluded.budget, meta = excluded.meta,
                 missed = excluded.missed, paused = excluded.paused, next_at = excluded.next_at,
                 changed_at = excluded.changed_at",
            &[
                &s.name,
                &s.queue,
                &s.when,
                &s.tz,
                &s.payload,
                &s.priority,
                &s.group,
                &s.attempts,
                &s.meta,
                &s.missed.name(),
                &s.paused,
                &next_at,
                &now,
            ],
        )?;
        // The schedule's queue exists from now on (tq_stats, tq_queue list it).
        conn.exec("INSERT OR IGNORE INTO tinyq_queues (name) VALUES (?1)", &[&s.queue])?;
        Ok(Out::Text(get::describe(conn, &s.name)?.unwrap_or_default()))
    })
}

/// tq_unschedule(name) -> 1 or 0. The jobs it already added stay.
pub fn tq_unschedule(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 1 {
        bail!("expects (name)");
    }
    let name = options::name("name", &args[0])?;
    if !store::exists(conn)? {
        return Ok(Out::Int(0));
    }
    conn.write_tx(|| Ok(Out::Int(conn.exec("DELETE FROM tinyq_schedules WHERE name = ?1", &[&name])?.min(1))))
}

/// Called first by every claim on `queue`, inside its write transaction: each schedule of
/// the queue whose next due time has come adds its job(s) and moves on to its next due
/// time after now. With no schedule due, this is one index seek that finds nothing.
pub fn add_due(conn: &Conn, queue: &str, now: i64) -> Result<()> {
    let due = conn.rows(
        "SELECT name, expr, tz, next_at, missed, payload, priority, grp, budget, meta FROM tinyq_schedules
         WHERE paused = 0 AND queue = ?1 AND next_at <= ?2",
        &[&queue, &now],
        |st| read_due(st, queue),
    )?;
    let due = due.into_iter().collect::<Result<Vec<_>>>()?;
    for (sched, timing, next_at) in due {
        let mut last = None;
        for at in timing.due(next_at, now, sched.missed) {
            let id = format!("{}@{}", sched.name, cron::iso(at));
            // An id still present (its job kept for its window) adds nothing: the ids guard too.
            if jobs::insert(conn, &sched.job(&id, at), now)? {
                last = Some((at, id));
            }
        }
        let (last_at, last_id) = last.unzip();
        conn.exec(
            "UPDATE tinyq_schedules SET next_at = ?2, last_at = coalesce(?3, last_at), last_id = coalesce(?4, last_id)
             WHERE name = ?1",
            &[&sched.name, &timing.after(now, next_at), &last_at, &last_id],
        )?;
    }
    Ok(())
}

/// A due schedule's row of add_due: the schedule, its timing and its next due time.
fn read_due(st: &Stmt, queue: &str) -> Result<(Schedule, Timing, i64)> {
    let name = st.text(0).unwrap_or_default();
    // Checked when stored: a failure here means the store was edited by hand.
    let broken = |e: String| Error::bad(format!("schedule '{name}' cannot be read ({e}): replace or remove it"));
    let sched = Schedule {
        queue: queue.to_string(),
        when: st.text(1).unwrap_or_default(),
        tz: st.text(2).unwrap_or_default(),
        missed: Missed::parse(&st.text(4).unwrap_or_default()).map_err(broken)?,
        payload: st.val(5),
        priority: st.int(6),
        group: st.text(7),
        attempts: st.opt_int(8),
        meta: st.text(9),
        paused: false,
        name: name.clone(),
    };
    let timing = Timing::parse(&sched.when, &sched.tz).map_err(broken)?;
    Ok((sched, timing, st.int(3)))
}

impl Schedule {
    /// The job of the due time `at`, with the id `id`.
    fn job<'a>(&'a self, id: &'a str, at: i64) -> Row<'a> {
        Row {
            id,
            queue: &self.queue,
            group: &self.group,
            priority: self.priority,
            run_at: at,
            budget: self.attempts,
            payload: &self.payload,
            meta: &self.meta,
            start_by: None,
            on_conflict: OnConflict::Keep, // CRON-01: one job per due time, its first add's
            waits: None,
            after_failed: None,
        }
    }
}

/// The next due time of the queue's live schedules (tq_wait wakes for it).
pub fn next_at(conn: &Conn, queue: &str) -> Result<Option<i64>> {
    conn.one_int("SELECT min(next_at) FROM tinyq_schedules WHERE paused = 0 AND queue = ?1", &[&queue])
}
