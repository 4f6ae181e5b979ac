//! The table-valued functions: tq_claim, tq_watch, tq_jobs, tq_stats, tq_schedules, tq_steps.

use std::rc::Rc;

use crate::claim;
use crate::options;
use crate::pages;
use crate::sqlite::Conn;
use crate::sqlite::{Error, Result, Val};
use crate::sqlite::{Rows, TableFn};
use crate::stats;
use crate::store;
use crate::timeline;

fn arg(filters: &[Option<Val>], i: usize) -> Option<&Val> {
    filters.get(i).and_then(Option::as_ref)
}

/// SELECT * FROM tq_claim(queue, worker, n [, options])
pub struct Claim;

impl TableFn for Claim {
    const NAME: &'static str = "tq_claim";
    const SCHEMA: &'static str =
        "CREATE TABLE x(id TEXT, attempt INTEGER, payload, group_key TEXT, lease_until INTEGER,
        deadline INTEGER, queue HIDDEN, worker HIDDEN, n HIDDEN, options HIDDEN, meta HIDDEN)";
    const VISIBLE: usize = 6;
    // `meta` is hidden so that `SELECT *` stays as it was, and declared after the arguments so
    // that they bind as before. It is a filter too only so that a fifth argument is an error
    // rather than a filter that would hide claimed jobs.
    const FILTERS: &'static [usize] = &[6, 7, 8, 9, 10];
    const OUTPUT_HIDDEN: &'static [usize] = &[10];
    const DIRECT_ONLY: bool = true;
    const IN_TEMP: bool = true;
    const LEASES: bool = true;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let (args, limit) = filters.split_at(Self::FILTERS.len());
        let given: Vec<Val> = args.iter().map_while(Clone::clone).collect();
        if given.len() < 3 || given.len() > 4 || args.iter().skip(given.len()).any(Option::is_some) {
            bail!("expects (queue, worker, n [, options])");
        }
        let mut req = claim::parse(&given)?;
        // The statement's LIMIT caps n: it returns no more rows, so no more are leased.
        match limit.first().cloned().flatten() {
            Some(Val::Int(0)) => return Ok(Rows::list(vec![])),
            Some(Val::Int(most)) if most > 0 => req.cap(most),
            _ => {}
        }
        let jobs = claim::run(conn, &req)?;
        Ok(Rows::list(
            jobs.into_iter()
                .map(|j| {
                    vec![
                        Val::Text(j.id),
                        Val::Int(j.attempt),
                        j.payload,
                        j.group.map_or(Val::Null, Val::Text),
                        Val::Int(j.lease_until),
                        Val::Int(j.deadline),
                        j.meta,
                    ]
                })
                .collect(),
        ))
    }
    /// Jobs leased for rows SQLite never reached go back in line (see claim::give_back).
    fn unreached(conn: &Rc<Conn>, filters: &[Option<Val>], rows: Vec<Vec<Val>>) {
        let Some(Some(Val::Text(queue))) = filters.first() else { return };
        let jobs: Vec<(String, i64)> = rows
            .into_iter()
            .filter_map(|row| match (row.first(), row.get(1)) {
                (Some(Val::Text(id)), Some(Val::Int(attempt))) => Some((id.clone(), *attempt)),
                _ => None,
            })
            .collect();
        // If it fails (the lock is taken past the busy timeout), the leases run out as before.
        let _ = claim::give_back(conn, queue, &jobs);
    }
}

/// SELECT * FROM tq_watch(since [, queue]): every event after `since`, in commit order.
/// `WHERE job = ?` (a hidden argument) keeps one job's events: its timeline.
pub struct Watch;

impl TableFn for Watch {
    const NAME: &'static str = "tq_watch";
    const SCHEMA: &'static str =
        "CREATE TABLE x(seq INTEGER, id TEXT, queue TEXT, state TEXT, attempt INTEGER, at INTEGER, detail,
        since HIDDEN, of_queue HIDDEN, job HIDDEN)";
    const VISIBLE: usize = 7;
    const FILTERS: &'static [usize] = &[7, 8, 9];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let since = match arg(filters, 0) {
            None => 0,
            Some(v) => options::int("since", v, i64::MIN, i64::MAX)?,
        };
        let queue = arg(filters, 1).map(|v| options::name("queue", v)).transpose()?;
        let job = arg(filters, 2).map(|v| options::name("job", v)).transpose()?;
        if !store::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let st = match (&queue, &job) {
            (None, None) => conn.query(
                "SELECT seq, id, queue, state, attempt, at, detail FROM tinyq_events WHERE seq > ?1 ORDER BY seq",
                &[&since],
            )?,
            (Some(q), None) => conn.query(
                "SELECT seq, id, queue, state, attempt, at, detail FROM tinyq_events
                 WHERE seq > ?1 AND queue = ?2 ORDER BY seq",
                &[&since, q],
            )?,
            (_, Some(id)) => match timeline::events(conn, id, since, queue.as_deref())? {
                Some(rows) => return Ok(Rows::list(rows)),
                // No job has this id (cancelled, or swept while its events are kept): the
                // events after `since` are read, as they have no chain to start from.
                None => conn.query(
                    "SELECT seq, id, queue, state, attempt, at, detail FROM tinyq_events
                 WHERE seq > ?1 AND id = ?3 AND (?2 IS NULL OR queue = ?2) ORDER BY seq",
                    &[&since, &queue, id],
                )?,
            },
        };
        Ok(Rows::query(st))
    }
}

macro_rules! job_columns {
    () => {
        "SELECT id, queue,
                CASE status WHEN 'queued' THEN 'waiting'
                            WHEN 'scheduled' THEN CASE WHEN run_at <= ?3 THEN 'waiting' ELSE 'scheduled' END
                            ELSE status END AS state,
                grp, priority, attempt, run_at, lease_until, worker, payload, result, error, progress,
                created_at, settled_at, meta
         FROM tinyq_jobs "
    };
}

const STATES: &[&str] = &["scheduled", "waiting", "running", "done", "failed", "blocked", "cancelled"];

/// Visible columns of tq_jobs; the hidden `after` and `prefix` arguments follow them.
const JOB_COLUMNS: usize = 16;

/// SELECT * FROM tq_jobs [WHERE queue = ? AND state = ? [AND group_key = ?] [AND after = ?]]:
/// with queue and state, the jobs come in the order of the index that holds them and `after`
/// (an id) continues after that job, so a page is a seek (src/pages.rs). `prefix` lists the
/// jobs whose id starts with it, in id order (then `after` continues after that id).
pub struct Jobs;

impl TableFn for Jobs {
    const NAME: &'static str = "tq_jobs";
    const SCHEMA: &'static str = "CREATE TABLE x(id TEXT, queue TEXT, state TEXT, group_key TEXT, priority INTEGER,
        attempt INTEGER, run_at INTEGER, lease_until INTEGER, worker TEXT, payload, result, error TEXT, progress,
        created_at INTEGER, settled_at INTEGER, meta, after HIDDEN, prefix HIDDEN)";
    const VISIBLE: usize = JOB_COLUMNS;
    const FILTERS: &'static [usize] = &[1, 2, 3, JOB_COLUMNS, JOB_COLUMNS + 1];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let queue = arg(filters, 0).cloned().unwrap_or(Val::Null);
        let state = match arg(filters, 1) {
            None | Some(Val::Null) => None,
            Some(Val::Text(s)) if STATES.contains(&s.as_str()) => Some(s.clone()),
            Some(Val::Text(s)) => bail!("unknown state '{}' (states: {})", options::clip(s), STATES.join(", ")),
            Some(v) => bail!("state must be text, not {} (states: {})", v.kind(), STATES.join(", ")),
        };
        let group = arg(filters, 2).cloned().unwrap_or(Val::Null);
        let after = arg(filters, 3).map(|v| options::name("after", v)).transpose()?;
        let prefix = arg(filters, 4).map(|v| options::name("prefix", v)).transpose()?;
        // `= NULL` matches nothing, as in SQL.
        if filters.iter().any(|f| matches!(f, Some(Val::Null))) || !store::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let now = conn.now();
        if let Some(prefix) = prefix {
            let st = conn.query(
                concat!(
                    "SELECT * FROM (",
                    job_columns!(),
                    "WHERE id >= ?4 AND id < ?4 || char(1114111) AND substr(id, 1, length(?4)) = ?4
                       AND (?5 IS NULL OR id > ?5) ORDER BY id)
                     WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2) AND (?6 IS NULL OR grp = ?6)"
                ),
                &[&queue, &state, &now, &prefix, &after, &group],
            )?;
            return Ok(Rows::query(st));
        }
        // A queue's blocked jobs have no index of their own in claim order: they are listed
        // by the walk below, in add order.
        if let (Val::Text(_), Some(state)) = (&queue, state.as_deref().filter(|s| *s != "cancelled" && *s != "blocked"))
        {
            let cursor = match &after {
                None => None,
                Some(id) => Some(pages::cursor(conn, state, id)?.ok_or_else(|| no_job_after(id, &queue))?),
            };
            let (sql, values) = pages::sql(job_columns!(), state, cursor.as_ref());
            let mut st = conn.query(sql, &[&queue, &group, &now])?;
            for (i, v) in values.iter().enumerate() {
                st.bind(10 + i as i32, v)?;
            }
            return Ok(Rows::query(st));
        }
        let after_seq = match &after {
            None => 0,
            Some(id) => conn
                .one_int("SELECT seq FROM tinyq_jobs WHERE id = ?1", &[id])?
                .ok_or_else(|| no_job_after(id, &queue))?,
        };
        let sql = concat!(
            "SELECT * FROM (",
            job_columns!(),
            "WHERE seq > ?4 ORDER BY seq) WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2)
               AND (?5 IS NULL OR grp = ?5)"
        );
        Ok(Rows::query(conn.query(sql, &[&queue, &state, &now, &after_seq, &group])?))
    }
}

/// `after` names no job. Without a queue, that is most likely `tq_jobs('emails')`: a table
/// function's first argument is its first hidden column (`after`), so the message says
/// where a queue goes.
fn no_job_after(id: &str, queue: &Val) -> Error {
    let id = options::clip(id);
    if queue.is_null() {
        Error::bad(format!(
            "after: no job '{id}' (`after` is the id of the last job of a page; to list a queue's jobs, \
             give the queue in WHERE: SELECT * FROM tq_jobs WHERE queue = '{id}')"
        ))
    } else {
        Error::bad(format!("after: no job '{id}' (give the id of the last job of the page)"))
    }
}

/// SELECT * FROM tq_stats([queue]): per queue, counts by state and what limits see.
pub struct Stats;

impl TableFn for Stats {
    const NAME: &'static str = "tq_stats";
    const SCHEMA: &'static str = "CREATE TABLE x(queue TEXT, scheduled INTEGER, waiting INTEGER, running INTEGER,
        leases INTEGER, done INTEGER, failed INTEGER, oldest_waiting_ms INTEGER, started_in_window INTEGER,
        paused INTEGER, blocked INTEGER, of_queue HIDDEN)";
    const VISIBLE: usize = 11;
    const FILTERS: &'static [usize] = &[11];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let queue = arg(filters, 0).map(|v| options::name("queue", v)).transpose()?;
        if !store::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let now = conn.now();
        let rows = stats::queue_names(conn, queue.as_deref())?
            .iter()
            .map(|name| stats::queue_row(conn, name, now))
            .collect::<Result<Vec<_>>>()?;
        Ok(Rows::list(rows))
    }
}

/// SELECT * FROM tq_schedules: every schedule, with the time of its next job (NULL while
/// paused).
pub struct Schedules;

impl TableFn for Schedules {
    const NAME: &'static str = "tq_schedules";
    const SCHEMA: &'static str = "CREATE TABLE x(name TEXT, queue TEXT, \"when\" TEXT, tz TEXT, next_at INTEGER,
        last_at INTEGER, last_id TEXT, paused INTEGER)";
    const VISIBLE: usize = 8;
    const FILTERS: &'static [usize] = &[];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, _: &[Option<Val>]) -> Result<Rows> {
        if !store::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        Ok(Rows::query(conn.query(
            "SELECT name, queue, expr, tz, CASE WHEN paused = 0 THEN next_at END, last_at, last_id, paused
             FROM tinyq_schedules ORDER BY name",
            &[],
        )?))
    }
}

/// SELECT * FROM tq_steps(id): the steps kept under a job (JOB-06), for operators: name,
/// the attempt that kept it, its value and when, in the order they were kept. Read-only.
pub struct Steps;

impl TableFn for Steps {
    const NAME: &'static str = "tq_steps";
    const SCHEMA: &'static str = "CREATE TABLE x(name TEXT, attempt INTEGER, value, created_at INTEGER, job HIDDEN)";
    const VISIBLE: usize = 4;
    const FILTERS: &'static [usize] = &[4];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let id = match filters.first().and_then(Option::as_ref) {
            None => bail!("expects (id): SELECT * FROM tq_steps('job-id')"),
            Some(v) => options::name("id", v)?,
        };
        if !store::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let st = conn.query(
            "SELECT s.name, s.attempt, s.value, s.created_at FROM tinyq_steps s JOIN tinyq_jobs j ON s.job = j.seq
             WHERE j.id = ?1 ORDER BY s.created_at, s.name",
            &[&id],
        )?;
        Ok(Rows::query(st))
    }
}

/// SELECT * FROM tq_deps(id): the jobs `id` waits or waited for (DEP-01), in the order they
/// were added, with their state, result and error: how a fan-in job reads its children's
/// answers. A dependency that is gone (cancelled, or swept once every dependent finished) is
/// not listed. Read-only.
pub struct Deps;

impl TableFn for Deps {
    const NAME: &'static str = "tq_deps";
    const SCHEMA: &'static str = "CREATE TABLE x(id TEXT, state TEXT, result, error TEXT, job HIDDEN)";
    const VISIBLE: usize = 4;
    const FILTERS: &'static [usize] = &[4];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let id = match filters.first().and_then(Option::as_ref) {
            None => bail!("expects (id): SELECT * FROM tq_deps('job-id')"),
            Some(v) => options::name("id", v)?,
        };
        if !store::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let st = conn.query(
            "SELECT j.id, CASE j.status WHEN 'queued' THEN 'waiting'
                             WHEN 'scheduled' THEN CASE WHEN j.run_at <= ?2 THEN 'waiting' ELSE 'scheduled' END
                             ELSE j.status END, j.result, j.error
             FROM tinyq_deps d JOIN tinyq_jobs j ON j.seq = d.dep
             WHERE d.job = (SELECT seq FROM tinyq_jobs WHERE id = ?1) ORDER BY d.dep",
            &[&id, &conn.now()],
        )?;
        Ok(Rows::query(st))
    }
}
