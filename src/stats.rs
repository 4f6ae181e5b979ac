//! tq_stats and tq_get's `ahead`, read from the counters (counts.rs) rather than by
//! counting waiting jobs (COST-01).
//!
//! What the counters cannot know by themselves is the clock: a scheduled job whose time
//! has come is waiting before the next claim moves it, a lease that ran out is no longer
//! live before the next claim reaps it, a start leaves the window before the next claim
//! counts it out. Each of those is counted over its own index range, so the cost is the
//! number of such rows since the queue's last claim, never the number of waiting jobs.

use crate::counts;
use crate::queues;
use crate::sqlite::Conn;
use crate::sqlite::{Result, Val};

/// One row of tq_stats.
pub fn queue_row(conn: &Conn, name: &str, now: i64) -> Result<Vec<Val>> {
    let q = queues::load(conn, name)?;
    let mut st = conn.query(
        "SELECT scheduled, queued, running, done, failed, started, edge FROM tinyq_counts WHERE queue = ?1",
        &[&name],
    )?;
    let (scheduled, queued, running, done, failed, started, edge) = if st.step()? {
        (st.int(0), st.int(1), st.int(2), st.int(3), st.int(4), st.int(5), st.opt_int(6))
    } else {
        (0, 0, 0, 0, 0, 0, None)
    };
    drop(st);
    let due = due_scheduled(conn, name, now)?;
    let expired = conn
        .one_int(
            "SELECT count(*) FROM tinyq_jobs WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until <= ?2",
            &[&name, &now],
        )?
        .unwrap_or(0);
    let oldest = conn.one_int(
        // The oldest due job: per distinct priority (few), the first of the claim index.
        "WITH RECURSIVE pr(parked, p) AS (
             SELECT 0, (SELECT max(priority) FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 0)
             UNION ALL
             SELECT 1, (SELECT max(priority) FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 1)
             UNION ALL
             SELECT pr.parked, (SELECT max(priority) FROM tinyq_jobs
                                WHERE status = 'queued' AND queue = ?1 AND parked = pr.parked AND priority < pr.p)
             FROM pr WHERE pr.p IS NOT NULL)
         SELECT min(t) FROM (
             SELECT (SELECT min(run_at) FROM tinyq_jobs
                     WHERE status = 'queued' AND queue = ?1 AND parked = pr.parked AND priority = pr.p) AS t
             FROM pr WHERE pr.p IS NOT NULL
             UNION ALL
             SELECT min(run_at) FROM tinyq_jobs WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?2)",
        &[&name, &now],
    )?;
    let in_window = match counts::queue_window(&q) {
        None => Val::Null,
        Some(window) => Val::Int(counts::started_in_window(conn, name, started, edge, now - window)?),
    };
    Ok(vec![
        Val::Text(name.to_string()),
        Val::Int(scheduled - due),
        Val::Int(queued + due),
        Val::Int(running),
        Val::Int(running - expired),
        Val::Int(done),
        Val::Int(failed),
        oldest.map_or(Val::Null, |t| Val::Int(now - t)),
        in_window,
        Val::Int(q.paused as i64),
    ])
}

/// Scheduled jobs whose time has come (waiting, not yet moved in line by a claim).
fn due_scheduled(conn: &Conn, queue: &str, now: i64) -> Result<i64> {
    Ok(conn
        .one_int(
            "SELECT count(*) FROM tinyq_jobs WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?2",
            &[&queue, &now],
        )?
        .unwrap_or(0))
}

/// The names tq_stats reports: one queue, or every queue.
pub fn queue_names(conn: &Conn, queue: Option<&str>) -> Result<Vec<String>> {
    let mut st = conn.query("SELECT name FROM tinyq_queues WHERE ?1 IS NULL OR name = ?1 ORDER BY name", &[&queue])?;
    let mut names = vec![];
    while st.step()? {
        names.push(st.text(0).unwrap_or_default());
    }
    Ok(names)
}

/// How many waiting jobs of the queue start before (priority, run_at, seq), per JOB-01.
///
/// (Each side is a UNION of index ranges: SQLite seeks a row value such as (run_at, seq)
/// on its first column only.) The waiting jobs are counted (tinyq_counts), so the count ahead is also the total less
/// the count behind. Both sides are walked together, a row at a time, and the first to
/// end gives the answer: the cost is that of the shorter side, min(ahead, behind): flat
/// for the first and the last jobs in line, at most half the line in the middle.
pub fn ahead(conn: &Conn, queue: &str, priority: i64, run_at: i64, seq: i64, now: i64) -> Result<i64> {
    let binds: [&dyn crate::sqlite::Bind; 5] = [&queue, &priority, &run_at, &seq, &now];
    let mut before = conn.query(
        "SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 0 AND priority > ?2
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 0 AND priority = ?2 AND run_at < ?3
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 0 AND priority = ?2 AND run_at = ?3 AND seq < ?4
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 1 AND priority > ?2
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 1 AND priority = ?2 AND run_at < ?3
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 1 AND priority = ?2 AND run_at = ?3 AND seq < ?4
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?5
                                              AND (priority > ?2 OR (priority = ?2 AND (run_at < ?3 OR (run_at = ?3 AND seq < ?4))))",
        &binds,
    )?;
    let mut after = conn.query(
        "SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 0 AND priority < ?2
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 0 AND priority = ?2 AND run_at > ?3
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 0 AND priority = ?2 AND run_at = ?3 AND seq > ?4
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 1 AND priority < ?2
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 1 AND priority = ?2 AND run_at > ?3
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 1 AND priority = ?2 AND run_at = ?3 AND seq > ?4
         UNION ALL SELECT 1 FROM tinyq_jobs WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?5
                                              AND (priority < ?2 OR (priority = ?2 AND (run_at > ?3 OR (run_at = ?3 AND seq > ?4))))",
        &binds,
    )?;
    let (mut a, mut b) = (0, 0);
    loop {
        if !before.step()? {
            return Ok(a);
        }
        a += 1;
        if !after.step()? {
            drop((before, after));
            let queued = conn.one_int("SELECT queued FROM tinyq_counts WHERE queue = ?1", &[&queue])?.unwrap_or(0);
            let waiting = queued + due_scheduled(conn, queue, now)?;
            return Ok(waiting - 1 - b);
        }
        b += 1;
    }
}
