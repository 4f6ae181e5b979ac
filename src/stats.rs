//! tq_stats and tq_get's `ahead`, read from the counters (limits/counts.rs) rather than by
//! counting waiting jobs (COST-01).
//!
//! What the counters cannot know by themselves is the clock: a scheduled job whose time
//! has come is waiting before the next claim moves it, a lease that ran out is no longer
//! live before the next claim reaps it, a start leaves the window before the next claim
//! counts it out. Each of those is counted over its own index range, so the cost is the
//! number of such rows since the queue's last claim, never the number of waiting jobs.

use crate::limits::windows;
use crate::settings;
use crate::sqlite::Conn;
use crate::sqlite::{Result, Stmt, Val};

/// One row of tq_stats.
pub fn queue_row(conn: &Conn, name: &str, now: i64) -> Result<Vec<Val>> {
    let q = settings::load(conn, name)?;
    let (scheduled, queued, running, done, failed, started, edge, blocked) = conn
        .row(
            "SELECT scheduled, queued, running, done, failed, started, edge, blocked FROM tinyq_counts WHERE queue = ?1",
            &[&name],
            |st| (st.int(0), st.int(1), st.int(2), st.int(3), st.int(4), st.int(5), st.opt_int(6), st.int(7)),
        )?
        .unwrap_or((0, 0, 0, 0, 0, 0, None, 0));
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
    let in_window = match windows::queue_window(&q) {
        None => Val::Null,
        Some(window) => Val::Int(windows::started_in_window(conn, name, started, edge, now - window)?),
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
        Val::Int(blocked),
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
    conn.rows("SELECT name FROM tinyq_queues WHERE ?1 IS NULL OR name = ?1 ORDER BY name", &[&queue], |st| {
        st.text(0).unwrap_or_default()
    })
}

/// A job's place in claim order (JOB-01): (priority, run_at, seq), priority first, highest first.
type Place = (i64, i64, i64);

/// Before every job (a bucket starting at the front of the line) and after every job (the
/// end of the line): priorities are 32-bit, so no job has these.
const FRONT: Place = (i64::MAX, 0, 0);
const END: Place = (i64::MIN, 0, 0);

/// The queued jobs of ?1 from the place a (?2, ?3, ?4) included to b (?5, ?6, ?7) excluded,
/// in claim order: five index ranges, each empty when a and b leave it no room, in both
/// ranges of the claim index (parked or not: a join, which seeks each; `parked IN (0, 1)`
/// builds a temporary index per range and call, 20x the time). Each range is bounded by a
/// seek, so the cost is the jobs counted. (SQLite seeks a row value on its first column
/// only: hence ranges.)
const BETWEEN: &str = "
    WITH range(parked) AS (VALUES (0), (1))
    SELECT 1 FROM range CROSS JOIN tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND tinyq_jobs.parked = range.parked AND priority = ?2 AND run_at = ?3
      AND seq >= ?4 AND seq <= CASE WHEN ?5 = ?2 AND ?6 = ?3 THEN ?7 - 1 ELSE 9223372036854775807 END
    UNION ALL SELECT 1 FROM range CROSS JOIN tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND tinyq_jobs.parked = range.parked AND priority = ?2
      AND run_at > ?3 AND run_at <= CASE WHEN ?5 = ?2 THEN ?6 - 1 ELSE 9223372036854775807 END
    UNION ALL SELECT 1 FROM range CROSS JOIN tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND tinyq_jobs.parked = range.parked AND priority < ?2 AND priority > ?5
    UNION ALL SELECT 1 FROM range CROSS JOIN tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND tinyq_jobs.parked = range.parked AND priority = ?5
      AND run_at < ?6 AND ?2 > ?5
    UNION ALL SELECT 1 FROM range CROSS JOIN tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND tinyq_jobs.parked = range.parked AND priority = ?5
      AND run_at = ?6 AND seq < ?7 AND (?2 > ?5 OR ?3 < ?6)";

fn between<'c>(conn: &'c Conn, queue: &str, a: Place, b: Place) -> Result<Stmt<'c>> {
    conn.query(BETWEEN, &[&queue, &a.0, &a.1, &a.2, &b.0, &b.1, &b.2])
}

/// The sum of the first column of the rows `before` a point, where `both` is the sum over
/// both sides of it: the two walks are stepped together until one ends, so the cost is
/// twice the shorter walk; if `after` ends first, the rows before are `both` less its sum.
fn sum_before(before: &mut Stmt, after: &mut Stmt, both: i64) -> Result<i64> {
    let (mut sum_before, mut sum_after) = (0, 0);
    loop {
        if !before.step()? {
            return Ok(sum_before);
        }
        sum_before += before.int(0);
        if !after.step()? {
            return Ok(both - sum_after);
        }
        sum_after += after.int(0);
    }
}

/// Does `a` come before `b` in claim order (JOB-01: priority first, highest first)?
fn precedes(a: Place, b: Place) -> bool {
    a.0 > b.0 || (a.0 == b.0 && (a.1, a.2) < (b.1, b.2))
}

/// A queue's line as tinyq_counts keeps it: its jobs, and its first bucket's jobs and end
/// (the start of the first bucket row). A line without bucket rows is one bucket of all.
struct Line {
    total: i64,
    front: i64,
    first_end: Place,
}

fn line(conn: &Conn, queue: &str) -> Result<Line> {
    let found = conn.row(
        "SELECT queued, front, next_priority, next_run_at, next_seq FROM tinyq_counts WHERE queue = ?1",
        &[&queue],
        |st| {
            let total = st.int(0);
            match st.opt_int(1) {
                Some(front) => Line { total, front, first_end: (st.int(2), st.int(3), st.int(4)) },
                None => Line { total, front: total, first_end: END },
            }
        },
    )?;
    Ok(found.unwrap_or(Line { total: 0, front: 0, first_end: END }))
}

/// A bucket with a row that holds a job: its key, its jobs, where it starts and where the
/// next one starts; and its span's key and the next span's ('~' for none).
struct Bucket {
    key: String,
    n: i64,
    start: Place,
    end: Place,
    span: String,
    next_span: String,
}

/// One statement: the last bucket row not after `place`, the row after it, and its span.
fn bucket_of(conn: &Conn, queue: &str, place: Place) -> Result<Option<Bucket>> {
    conn.row(
        "SELECT b.key, b.n, b.priority, b.run_at, b.seq, x.priority, x.run_at, x.seq, s.key,
                ifnull((SELECT min(key) FROM tinyq_spans WHERE queue = ?1 AND key > s.key), '~')
         FROM (SELECT key, n, priority, run_at, seq FROM tinyq_buckets WHERE queue = ?1
               AND key <= printf('%08x%d%016x%016x', 2147483647 - ?2, ?3 >= 0, ?3, ?4) ORDER BY key DESC LIMIT 1) AS b
         LEFT JOIN tinyq_buckets AS x ON x.queue = ?1
               AND x.key = (SELECT min(key) FROM tinyq_buckets WHERE queue = ?1 AND key > b.key)
         JOIN tinyq_spans AS s ON s.queue = ?1
               AND s.key = (SELECT max(key) FROM tinyq_spans WHERE queue = ?1 AND key <= b.key)",
        &[&queue, &place.0, &place.1, &place.2],
        |st| Bucket {
            key: st.text(0).unwrap_or_default(),
            n: st.int(1),
            start: (st.int(2), st.int(3), st.int(4)),
            end: st.opt_int(5).map_or(END, |p| (p, st.int(6), st.int(7))),
            span: st.text(8).unwrap_or_default(),
            next_span: st.text(9).unwrap_or_default(),
        },
    )
}

/// The jobs of the bucket rows before bucket `b` (`rows` jobs in all the rows): those of the
/// spans before its span and of its span's rows before it, against those after it, summed
/// from whichever side has fewer rows (spans: one per 16k jobs or more; at most 63 rows of
/// its span).
fn rows_before(conn: &Conn, queue: &str, b: &Bucket, rows: i64) -> Result<i64> {
    let mut before = conn.query(
        "SELECT n FROM tinyq_spans WHERE queue = ?1 AND key < ?2
         UNION ALL SELECT n FROM tinyq_buckets WHERE queue = ?1 AND key >= ?2 AND key < ?3",
        &[&queue, &b.span, &b.key],
    )?;
    let mut after = conn.query(
        "SELECT n FROM tinyq_spans WHERE queue = ?1 AND key > ?2
         UNION ALL SELECT n FROM tinyq_buckets WHERE queue = ?1 AND key > ?3 AND key < ?4",
        &[&queue, &b.span, &b.key, &b.next_span],
    )?;
    sum_before(&mut before, &mut after, rows - b.n)
}

/// How many waiting jobs of the queue start before the job at `place`, per JOB-01 (`queued`:
/// the job is in line; otherwise it is scheduled and due, not yet moved in line).
///
/// A line of over 1024 jobs is cut into buckets of 1 to 1024 jobs (the long-lines block of
/// sql/store.sql): the first, where claims take their jobs, is counted in tinyq_counts; each
/// other is a row of tinyq_buckets, and the rows are counted by spans (tinyq_spans). The
/// jobs ahead are those of the buckets before the job's (none for a job of the first
/// bucket; otherwise the first's and those of the rows before: rows_before), and those of
/// its own bucket before it, counted from whichever end of the bucket is nearer: at most
/// 512 jobs. Due scheduled jobs ahead are counted over their own index range (only those
/// since the queue's last claim).
pub fn ahead(conn: &Conn, queue: &str, place: Place, queued: bool, now: i64) -> Result<i64> {
    let (priority, run_at, seq) = place;
    let line = line(conn, queue)?;
    let found = if precedes(place, line.first_end) { None } else { bucket_of(conn, queue, place)? };
    let (n, start, end) = found.as_ref().map_or((line.front, FRONT, line.first_end), |b| (b.n, b.start, b.end));
    let (mut front, mut back) =
        (between(conn, queue, start, place)?, between(conn, queue, (priority, run_at, seq.saturating_add(1)), end)?);
    // The job itself is one of the bucket's `n` when it is in line.
    let in_bucket = sum_before(&mut front, &mut back, n - i64::from(queued))?;
    drop((front, back));
    let buckets_before = match &found {
        None => 0,
        Some(b) => line.front + rows_before(conn, queue, b, line.total - line.front)?,
    };
    let due = conn
        .one_int(
            "SELECT count(*) FROM tinyq_jobs WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?5
             AND (priority > ?2 OR (priority = ?2 AND (run_at < ?3 OR (run_at = ?3 AND seq < ?4))))",
            &[&queue, &priority, &run_at, &seq, &now],
        )?
        .unwrap_or(0);
    Ok(buckets_before + in_bucket + due)
}
