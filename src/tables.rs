//! The table-valued functions: tq_claim, tq_watch, tq_jobs, tq_stats, tq_schedules.

use std::rc::Rc;

use crate::claim;
use crate::conn::Conn;
use crate::ffi::{Result, Val};
use crate::options;
use crate::schema;
use crate::vtab::{Rows, TableFn};

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
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let given: Vec<Val> = filters.iter().map_while(Clone::clone).collect();
        if given.len() < 3 || given.len() > 4 || filters.iter().skip(given.len()).any(Option::is_some) {
            bail!("expects (queue, worker, n [, options])");
        }
        let jobs = claim::run(conn, &claim::parse(&given)?)?;
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
}

/// SELECT * FROM tq_watch(since [, queue]): every event after `since`, in commit order.
pub struct Watch;

impl TableFn for Watch {
    const NAME: &'static str = "tq_watch";
    const SCHEMA: &'static str =
        "CREATE TABLE x(seq INTEGER, id TEXT, queue TEXT, state TEXT, attempt INTEGER, at INTEGER, detail, since HIDDEN, of_queue HIDDEN)";
    const VISIBLE: usize = 7;
    const FILTERS: &'static [usize] = &[7, 8];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let since = match arg(filters, 0) {
            None => 0,
            Some(v) => options::int("since", v, i64::MIN, i64::MAX)?,
        };
        let queue = arg(filters, 1).map(|v| options::name("queue", v)).transpose()?;
        if !schema::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let st = match &queue {
            None => conn.query(
                "SELECT seq, id, queue, state, attempt, at, detail FROM tinyq_events WHERE seq > ?1 ORDER BY seq",
                &[&since],
            )?,
            Some(q) => conn.query(
                "SELECT seq, id, queue, state, attempt, at, detail FROM tinyq_events
                 WHERE seq > ?1 AND queue = ?2 ORDER BY seq",
                &[&since, q],
            )?,
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

const STATES: &[&str] = &["scheduled", "waiting", "running", "done", "failed", "cancelled"];

/// SELECT * FROM tq_jobs [WHERE queue = ? AND state = ?]: with both, an index is used.
pub struct Jobs;

impl TableFn for Jobs {
    const NAME: &'static str = "tq_jobs";
    const SCHEMA: &'static str = "CREATE TABLE x(id TEXT, queue TEXT, state TEXT, group_key TEXT, priority INTEGER,
        attempt INTEGER, run_at INTEGER, lease_until INTEGER, worker TEXT, payload, result, error TEXT, progress,
        created_at INTEGER, settled_at INTEGER, meta)";
    const VISIBLE: usize = 16;
    const FILTERS: &'static [usize] = &[1, 2];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let queue = arg(filters, 0).cloned().unwrap_or(Val::Null);
        let state = match arg(filters, 1) {
            None | Some(Val::Null) => None,
            Some(Val::Text(s)) if STATES.contains(&s.as_str()) => Some(s.clone()),
            Some(Val::Text(s)) => bail!("unknown state '{}' (states: {})", options::clip(s), STATES.join(", ")),
            Some(v) => bail!("state must be text, not {} (states: {})", v.kind(), STATES.join(", ")),
        };
        // `= NULL` matches nothing, as in SQL.
        if filters.iter().any(|f| matches!(f, Some(Val::Null))) || !schema::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let now = conn.now();
        let sql = match (&queue, state.as_deref()) {
            (Val::Text(_), Some("waiting")) => concat!(
                job_columns!(),
                "WHERE status = 'queued' AND queue = ?1 AND ?2 IS NOT NULL UNION ALL ",
                job_columns!(),
                "WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?3"
            ),
            (Val::Text(_), Some("scheduled")) => {
                concat!(job_columns!(), "WHERE status = 'scheduled' AND queue = ?1 AND run_at > ?3 AND ?2 IS NOT NULL")
            }
            (Val::Text(_), Some("running")) => {
                concat!(job_columns!(), "WHERE status = 'running' AND queue = ?1 AND ?2 IS NOT NULL AND ?3 IS NOT NULL")
            }
            (Val::Text(_), Some("done")) => {
                concat!(job_columns!(), "WHERE status = 'done' AND queue = ?1 AND ?2 IS NOT NULL AND ?3 IS NOT NULL")
            }
            (Val::Text(_), Some("failed")) => {
                concat!(job_columns!(), "WHERE status = 'failed' AND queue = ?1 AND ?2 IS NOT NULL AND ?3 IS NOT NULL")
            }
            _ => concat!(
                "SELECT * FROM (",
                job_columns!(),
                "ORDER BY seq) WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2)"
            ),
        };
        Ok(Rows::query(conn.query(sql, &[&queue, &state, &now])?))
    }
}

/// SELECT * FROM tq_stats([queue]): per queue, counts by state and what limits see.
pub struct Stats;

impl TableFn for Stats {
    const NAME: &'static str = "tq_stats";
    const SCHEMA: &'static str = "CREATE TABLE x(queue TEXT, scheduled INTEGER, waiting INTEGER, running INTEGER,
        leases INTEGER, done INTEGER, failed INTEGER, oldest_waiting_ms INTEGER, started_in_window INTEGER,
        paused INTEGER, of_queue HIDDEN)";
    const VISIBLE: usize = 10;
    const FILTERS: &'static [usize] = &[10];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let queue = arg(filters, 0).map(|v| options::name("queue", v)).transpose()?;
        if !schema::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let st = conn.query(
            "SELECT q.name,
                (SELECT count(*) FROM tinyq_jobs WHERE status = 'scheduled' AND queue = q.name AND run_at > ?1),
                (SELECT count(*) FROM tinyq_jobs WHERE status = 'queued' AND queue = q.name)
                  + (SELECT count(*) FROM tinyq_jobs WHERE status = 'scheduled' AND queue = q.name AND run_at <= ?1),
                (SELECT count(*) FROM tinyq_jobs WHERE status = 'running' AND queue = q.name),
                (SELECT count(*) FROM tinyq_jobs WHERE status = 'running' AND expires_at IS NULL AND queue = q.name AND lease_until > ?1),
                (SELECT count(*) FROM tinyq_jobs WHERE status = 'done' AND queue = q.name),
                (SELECT count(*) FROM tinyq_jobs WHERE status = 'failed' AND queue = q.name),
                ?1 - (SELECT min(run_at) FROM (
                    SELECT run_at FROM tinyq_jobs WHERE status = 'queued' AND queue = q.name
                    UNION ALL SELECT run_at FROM tinyq_jobs WHERE status = 'scheduled' AND queue = q.name AND run_at <= ?1)),
                CASE WHEN q.rate_ms IS NOT NULL OR q.group_rate_ms IS NOT NULL THEN
                    (SELECT count(*) FROM tinyq_starts WHERE queue = q.name AND at > ?1 - coalesce(q.rate_ms, q.group_rate_ms)) END,
                q.paused
             FROM tinyq_queues q WHERE ?2 IS NULL OR q.name = ?2 ORDER BY q.name",
            &[&conn.now(), &queue],
        )?;
        Ok(Rows::query(st))
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
        if !schema::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        Ok(Rows::query(conn.query(
            "SELECT name, queue, expr, tz, CASE WHEN paused = 0 THEN next_at END, last_at, last_id, paused
             FROM tinyq_schedules ORDER BY name",
            &[],
        )?))
    }
}
