//! The counters against the rows they count: tinyq_counts per stored status, the rate
//! windows' starts, tinyq_groups (running leases, starts, set-aside jobs), the buckets and
//! spans of long lines (tq_get's `ahead`), the steps of jobs that are gone, the slots of
//! JOB-05 and the heads of the jobs' timelines. Each is what a trigger in sql/store.sql, or
//! the statement that changes the row, keeps in step.

use super::objects::Shape;
use super::Problem;
use crate::limits::{counts, windows};
use crate::marks;
use crate::settings::{self, Settings};
use crate::sqlite::{Conn, Result};

/// A job's claim-order key, as sql/store.sql computes it for the buckets.
macro_rules! line_key {
    () => {
        "printf('%08x%d%016x%016x', 2147483647 - priority, run_at >= 0, run_at, seq)"
    };
}

pub fn check(conn: &Conn, shape: &Shape, problems: &mut Vec<Problem>) -> Result<()> {
    statuses(conn, shape, problems)?;
    lines(conn, problems)?;
    buckets(conn, problems)?;
    spans(conn, problems)?;
    for q in settings::all(conn)? {
        limits(conn, &q, problems)?;
    }
    let orphans =
        conn.one_int(checking!("SELECT count(*) FROM tinyq_steps WHERE job NOT IN (SELECT seq FROM tinyq_jobs)"), &[])?;
    if let Some(n @ 1..) = orphans {
        let detail = format!("{n} steps of jobs that are gone (a later job with the same seq would read them)");
        problems.push(Problem::new("steps", None, "tinyq_steps", detail));
    }
    timelines(conn, problems)?;
    let (ids, n) = wrong_slots(conn, 3)?;
    if n > 0 {
        let detail = format!(
            "{n} jobs hold a slot that is not their id's (such as {}): a later job of the same id may repeat an attempt (JOB-05)",
            ids.iter().map(|i| crate::options::quote(i)).collect::<Vec<_>>().join(", ")
        );
        problems.push(Problem::new("slots", None, "tinyq_jobs.slot", detail));
    }
    Ok(())
}

/// tinyq_counts: a row per queue, each status counter equal to its jobs.
fn statuses(conn: &Conn, shape: &Shape, problems: &mut Vec<Problem>) -> Result<()> {
    let k = shape.counted.len() as i32;
    let rows = conn.rows(shape.counts_sql, &[], |st| {
        let queue = st.text(0).unwrap_or_default();
        let stored: Vec<Option<i64>> = (0..k).map(|i| st.opt_int(3 + i)).collect();
        let counted: Vec<i64> = (0..k).map(|i| st.int(3 + k + i)).collect();
        (queue, st.int(1) != 0, st.int(2) != 0, stored, counted)
    })?;
    for (queue, has_counts, has_queue, stored, counted) in rows {
        let q = Some(queue.as_str());
        if !has_queue {
            problems.push(Problem::new("queues", q, "tinyq_queues", "no row: the queue has jobs but no settings row"));
        }
        if !has_counts {
            let detail = "no row: its counters are not kept (limits and tq_stats read 0)";
            problems.push(Problem::new("counts", q, "tinyq_counts", detail));
            continue;
        }
        for ((status, stored), counted) in shape.counted.iter().zip(stored).zip(counted) {
            if stored != Some(counted) {
                let stored = stored.map_or("NULL".into(), |n| n.to_string());
                let detail = format!("{stored} {status} jobs counted, {counted} in tinyq_jobs");
                problems.push(Problem::new("counts", q, format!("tinyq_counts.{status}"), detail));
            }
        }
    }
    Ok(())
}

/// A line over 1024 jobs is cut into buckets, and `spill` says whether it is; the first
/// bucket (no row: `front` jobs) ends where the first row starts (next_*).
fn lines(conn: &Conn, problems: &mut Vec<Problem>) -> Result<()> {
    let rows = conn.rows(
        checking!(
            "SELECT c.queue, c.spill IS NULL, b.key IS NOT NULL,
                (SELECT count(*) FROM tinyq_jobs j WHERE j.status = 'queued' AND j.queue = c.queue),
                c.front IS NULL AND c.next_priority IS NULL AND c.next_run_at IS NULL AND c.next_seq IS NULL,
                (c.next_priority, c.next_run_at, c.next_seq) IS (b.priority, b.run_at, b.seq)
         FROM tinyq_counts c LEFT JOIN tinyq_buckets b ON b.queue = c.queue
              AND b.key = (SELECT min(key) FROM tinyq_buckets WHERE queue = c.queue)
         ORDER BY c.queue"
        ),
        &[],
        |st| {
            (st.text(0).unwrap_or_default(), st.int(1) != 0, st.int(2) != 0, st.int(3), st.int(4) != 0, st.int(5) != 0)
        },
    )?;
    for (queue, spill_null, has_buckets, queued, first_null, first_ends_right) in rows {
        let q = Some(queue.as_str());
        if spill_null && has_buckets {
            let detail = "NULL while the line has buckets: its changes are not counted in them";
            problems.push(Problem::new("buckets", q, "tinyq_counts.spill", detail));
        } else if !spill_null && !has_buckets {
            let detail = "set while the line has no buckets: its changes look for buckets that are not there";
            problems.push(Problem::new("buckets", q, "tinyq_counts.spill", detail));
        }
        if !has_buckets && queued > 1024 {
            let detail = format!("a line of {queued} waiting jobs has no buckets (a line over 1024 jobs is cut)");
            problems.push(Problem::new("buckets", q, "tinyq_buckets", detail));
        }
        if !has_buckets && !first_null {
            let detail = "set while the line has no buckets (a line of one bucket is counted by `queued` alone)";
            problems.push(Problem::new("buckets", q, "tinyq_counts.front", detail));
        } else if has_buckets && !first_ends_right {
            let detail = "next_priority, next_run_at and next_seq are not where the first bucket row starts";
            problems.push(Problem::new("buckets", q, "tinyq_counts.next_seq", detail));
        }
    }
    Ok(())
}

/// Each bucket counts the queued jobs from its key to the next bucket's; the first, before
/// every row, is counted by tinyq_counts.front.
fn buckets(conn: &Conn, problems: &mut Vec<Problem>) -> Result<()> {
    let rows = conn.rows(
        checking!(
            "WITH b AS (SELECT queue, key, n, row_number() OVER (PARTITION BY queue ORDER BY key) AS i FROM tinyq_buckets
                        UNION ALL SELECT queue, '', front, 0 FROM tinyq_counts
                        WHERE queue IN (SELECT queue FROM tinyq_buckets)),
                  k AS (SELECT queue, ",
            line_key!(),
            " AS key, 0 AS mark FROM tinyq_jobs
                        WHERE status = 'queued' AND queue IN (SELECT queue FROM tinyq_buckets)
                        UNION ALL SELECT queue, key, 1 FROM tinyq_buckets),
                  placed AS (SELECT queue, mark, sum(mark) OVER (PARTITION BY queue ORDER BY key, mark DESC
                                                                  ROWS UNBOUNDED PRECEDING) AS i FROM k),
                  counted AS (SELECT queue, i, sum(1 - mark) AS jobs FROM placed GROUP BY queue, i
                              UNION ALL SELECT queue, 0, 0 FROM tinyq_buckets GROUP BY queue),
                  per AS (SELECT queue, i, sum(jobs) AS jobs FROM counted GROUP BY queue, i)
             SELECT c.queue, b.key, b.n, c.jobs FROM per c LEFT JOIN b ON b.queue = c.queue AND b.i = c.i
             WHERE b.n IS NOT c.jobs OR (c.i = 0 AND c.jobs = 0) ORDER BY c.queue, b.key"
        ),
        &[],
        |st| (st.text(0).unwrap_or_default(), st.text(1), st.opt_int(2), st.int(3)),
    )?;
    for (queue, key, n, jobs) in rows {
        let detail = match key.as_deref() {
            Some("") => format!(
                "the first bucket counts {} waiting jobs (tinyq_counts.front), {jobs} are before its end",
                show(n)
            ),
            Some(key) => format!("bucket '{key}' counts {} waiting jobs, {jobs} are in its range", show(n)),
            None => format!("{jobs} waiting jobs are in a bucket that is not counted"),
        };
        let object = if key.as_deref() == Some("") { "tinyq_counts.front" } else { "tinyq_buckets" };
        problems.push(Problem::new("buckets", Some(&queue), object, detail));
    }
    let misplaced = conn.rows(
        checking!("SELECT queue, key FROM tinyq_buckets WHERE key IS NOT ", line_key!(), " ORDER BY queue, key"),
        &[],
        |st| (st.text(0).unwrap_or_default(), st.text(1).unwrap_or_default()),
    )?;
    for (queue, key) in misplaced {
        let detail = format!("bucket '{key}' does not start at the job its priority, run_at and seq name");
        problems.push(Problem::new("buckets", Some(&queue), "tinyq_buckets", detail));
    }
    Ok(())
}

/// Each span holds the buckets from its key to the next span's, and their jobs.
fn spans(conn: &Conn, problems: &mut Vec<Problem>) -> Result<()> {
    let rows = conn.rows(
        checking!("WITH s AS (SELECT queue, key, n, buckets, row_number() OVER (PARTITION BY queue ORDER BY key) AS i FROM tinyq_spans),
              k AS (SELECT queue, key, n, 0 AS mark FROM tinyq_buckets UNION ALL SELECT queue, key, 0, 1 FROM tinyq_spans),
              placed AS (SELECT queue, n, mark, sum(mark) OVER (PARTITION BY queue ORDER BY key, mark DESC
                                                                 ROWS UNBOUNDED PRECEDING) AS i FROM k),
              counted AS (SELECT queue, i, sum(n * (1 - mark)) AS n, sum(1 - mark) AS buckets FROM placed GROUP BY queue, i)
         SELECT c.queue, s.key, s.n, s.buckets, c.n, c.buckets FROM counted c LEFT JOIN s ON s.queue = c.queue AND s.i = c.i
         WHERE s.n IS NOT c.n OR s.buckets IS NOT c.buckets OR c.buckets = 0 ORDER BY c.queue, s.key"),
        &[],
        |st| (st.text(0).unwrap_or_default(), st.text(1), st.opt_int(2), st.opt_int(3), st.int(4), st.int(5)),
    )?;
    for (queue, key, n, buckets, jobs, holds) in rows {
        let detail = match key {
            None => format!("{holds} buckets come before the line's first span (the span '' is missing)"),
            Some(key) => format!(
                "span '{key}' counts {} buckets and {} jobs; its range holds {holds} buckets and {jobs} jobs",
                show(buckets),
                show(n)
            ),
        };
        problems.push(Problem::new("spans", Some(&queue), "tinyq_spans", detail));
    }
    Ok(())
}

fn show(n: Option<i64>) -> String {
    n.map_or("NULL".into(), |n| n.to_string())
}

/// The queue's rate window and its groups, as its limits read them.
fn limits(conn: &Conn, q: &Settings, problems: &mut Vec<Problem>) -> Result<()> {
    let c = counts::load(conn, &q.name)?;
    let (edge, gedge) = c.edges();
    let queue = Some(q.name.as_str());
    if let (Some(_), Some(edge)) = (windows::queue_window(q), edge) {
        let inside = windows::started_in_window(conn, &q.name, 0, None, edge)?;
        if inside != c.started {
            let detail = format!("{} starts counted in the rate window, {inside} in tinyq_starts", c.started);
            problems.push(Problem::new("window", queue, "tinyq_counts.started", detail));
        }
    }
    if !q.has_group_limits() {
        let parked = conn.one_int(
            checking!("SELECT count(*) FROM tinyq_jobs WHERE status = 'queued' AND parked = 1 AND queue = ?1"),
            &[&q.name],
        )?;
        if let Some(n @ 1..) = parked {
            let detail = format!("{n} waiting jobs set aside in a queue without group limits: no claim takes them");
            problems.push(Problem::new("parked", queue, "tinyq_jobs.parked", detail));
        }
        return Ok(());
    }
    let Some(gedge) = gedge else { return Ok(()) }; // not counted yet: the next claim counts them
    let running = conn.rows(
        checking!(
            "SELECT grp, running, n FROM (SELECT grp, running, (SELECT count(*) FROM tinyq_jobs j
             WHERE j.status = 'running' AND j.queue = ?1 AND j.grp = g.grp) AS n FROM tinyq_groups g WHERE queue = ?1)
         WHERE running IS NOT n
         UNION ALL SELECT grp, NULL, count(*) FROM tinyq_jobs j WHERE status = 'running' AND queue = ?1
             AND grp IS NOT NULL AND NOT EXISTS (SELECT 1 FROM tinyq_groups g WHERE g.queue = ?1 AND g.grp = j.grp)
             GROUP BY grp
         ORDER BY 1"
        ),
        &[&q.name],
        |st| (st.text(0).unwrap_or_default(), st.opt_int(1), st.int(2)),
    )?;
    for (grp, stored, n) in running {
        let detail = format!("group '{grp}': {} running counted, {n} running in tinyq_jobs", show(stored));
        problems.push(Problem::new("groups", queue, "tinyq_groups.running", detail));
    }
    let stranded = conn.rows(
        checking!(
            "SELECT ifnull(grp, ''), count(*) FROM tinyq_jobs j WHERE status = 'queued' AND parked = 1 AND queue = ?1
             AND (grp IS NULL OR NOT EXISTS (SELECT 1 FROM tinyq_groups g WHERE g.queue = ?1 AND g.grp = j.grp))
         GROUP BY grp ORDER BY 1"
        ),
        &[&q.name],
        |st| (st.text(0).unwrap_or_default(), st.int(1)),
    )?;
    for (grp, n) in stranded {
        let detail =
            format!("group '{grp}': {n} waiting jobs set aside, and no row for the group: no claim takes them");
        problems.push(Problem::new("groups", queue, "tinyq_groups", detail));
    }
    if q.group_rate.is_some() {
        let started = conn.rows(
            checking!(
                "SELECT grp, started, n FROM (SELECT grp, started, (SELECT count(*) FROM tinyq_starts s
                 WHERE s.queue = ?1 AND s.grp = g.grp AND s.at > ?2) AS n FROM tinyq_groups g WHERE queue = ?1)
             WHERE started IS NOT n ORDER BY grp"
            ),
            &[&q.name, &gedge],
            |st| (st.text(0).unwrap_or_default(), st.opt_int(1), st.int(2)),
        )?;
        for (grp, stored, n) in started {
            let detail =
                format!("group '{grp}': {} starts counted in the group rate window, {n} in tinyq_starts", show(stored));
            problems.push(Problem::new("groups", queue, "tinyq_groups.started", detail));
        }
    }
    Ok(())
}

/// SQL: each id's newest kept event (a job's `last_event`, the head of its timeline, is
/// its id's newest: an id added again logs after its earlier job's events).
macro_rules! newest_events {
    () => {
        "(SELECT id, max(seq) AS seq FROM tinyq_events GROUP BY id) AS latest"
    };
}
pub(super) use newest_events;

/// Schema 7: every job's `last_event` is its newest kept event (timeline.rs; a statement
/// that logged an event without setting it, or a trigger dropped, breaks the chain there).
fn timelines(conn: &Conn, problems: &mut Vec<Problem>) -> Result<()> {
    let wrong = conn.row(
        checking!(
            "SELECT count(*), min(tinyq_jobs.id) FROM tinyq_jobs JOIN ",
            newest_events!(),
            " ON latest.id = tinyq_jobs.id WHERE tinyq_jobs.last_event IS NOT latest.seq"
        ),
        &[],
        |st| (st.int(0), st.text(1).unwrap_or_default()),
    )?;
    if let Some((n @ 1.., id)) = wrong {
        let detail = format!(
            "{n} jobs (such as {}) whose last_event is not their newest event: their timelines (tq_watch's `job`) miss events",
            crate::options::quote(&id)
        );
        problems.push(Problem::new("timelines", None, "tinyq_jobs.last_event", detail));
    }
    Ok(())
}

/// The jobs whose stored slot is not their id's (ids, at most `most`), and how many in all.
fn wrong_slots(conn: &Conn, most: usize) -> Result<(Vec<String>, i64)> {
    let mut st = conn.query(checking!("SELECT id, slot FROM tinyq_jobs"), &[])?;
    let (mut ids, mut n) = (vec![], 0);
    while st.step()? {
        let id = st.text(0).unwrap_or_default();
        if marks::slot(&id) != st.opt_int(1) {
            n += 1;
            if ids.len() < most {
                ids.push(id);
            }
        }
    }
    Ok((ids, n))
}
