//! Groups with limits (LIM-02) at a cost that does not grow with their backlog (COST-01).
//!
//! In a queue with group limits, a due job of a group is `parked` (set aside) unless it is
//! its group's head: the first of the group's due jobs in claim order (JOB-01), and only
//! while the group has room. A claim walks only unparked jobs, so a full group costs it
//! nothing however many jobs it holds. Whatever changes a group's room or its due jobs
//! (a lease ends, a job comes due, a start leaves the group's rate window) marks the group
//! `dirty` (the triggers in sql/store.sql do it for every change of a job's status); the
//! next claim on the queue promotes the right head of each dirty group before it plans, in
//! its own transaction. After the clock steps back a head may not be due: it keeps its
//! place, and the claim's walk takes the group's first due job in its stead.

use crate::settings::Settings;
use crate::sqlite::Conn;
use crate::sqlite::{Bind, Result, Stmt};

/// A job's place in claim order: higher priority first, then run_at, then seq.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct Place {
    pub neg_priority: i64,
    pub run_at: i64,
    pub seq: i64,
}

impl Place {
    pub fn new(priority: i64, run_at: i64, seq: i64) -> Place {
        Place { neg_priority: -priority, run_at, seq }
    }
}

/// Does a group with these counts have room under the queue's group limits?
pub fn has_room(q: &Settings, running: i64, started: i64) -> bool {
    q.group_concurrency.is_none_or(|c| running < c) && q.group_rate.is_none_or(|(r, _)| started < r)
}

/// The first parked job of the group after `after` (or the first of all), in claim order.
pub fn next_parked(conn: &Conn, queue: &str, grp: &str, after: Option<Place>, now: i64) -> Result<Option<Place>> {
    let read = |st: &mut Stmt| -> Result<Option<Place>> {
        Ok(if st.step()? { Some(Place::new(st.int(0), st.int(1), st.int(2))) } else { None })
    };
    let Some(after) = after else {
        let mut st = conn.query(
            "SELECT priority, run_at, seq FROM tinyq_jobs
             WHERE status = 'queued' AND parked = 1 AND queue = ?1 AND grp = ?2 AND run_at <= ?3
             ORDER BY priority DESC, run_at, seq LIMIT 1",
            &[&queue, &grp, &now],
        )?;
        return read(&mut st);
    };
    // Three seeks, in claim order: SQLite seeks a row value such as (run_at, seq) > (?, ?)
    // on its first column only, which would walk every job of the same time. The first
    // seek tests the due time on ?4, not run_at: given `run_at <= ?6` beside `run_at = ?4`,
    // SQLite seeks the range and sorts every due job of that priority (a temporary b-tree).
    let priority = -after.neg_priority;
    let binds: [&dyn Bind; 6] = [&queue, &grp, &priority, &after.run_at, &after.seq, &now];
    for sql in [
        "SELECT priority, run_at, seq FROM tinyq_jobs
         WHERE status = 'queued' AND parked = 1 AND queue = ?1 AND grp = ?2 AND priority = ?3
           AND run_at = ?4 AND seq > ?5 AND ?4 <= ?6
         ORDER BY seq LIMIT 1",
        "SELECT priority, run_at, seq FROM tinyq_jobs
         WHERE status = 'queued' AND parked = 1 AND queue = ?1 AND grp = ?2 AND priority = ?3
           AND run_at > ?4 AND run_at <= ?6 AND ?5 IS NOT NULL
         ORDER BY run_at, seq LIMIT 1",
        "SELECT priority, run_at, seq FROM tinyq_jobs
         WHERE status = 'queued' AND parked = 1 AND queue = ?1 AND grp = ?2 AND priority < ?3 AND run_at <= ?6
           AND ?4 IS NOT NULL AND ?5 IS NOT NULL
         ORDER BY priority DESC, run_at, seq LIMIT 1",
    ] {
        let mut st = conn.query(sql, &binds)?;
        if let Some(p) = read(&mut st)? {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// Promotes the right head of every dirty group of the queue (see the module's comment).
/// Each dirty group costs a few index seeks, whatever its backlog.
pub fn refill_dirty(conn: &Conn, q: &Settings, now: i64) -> Result<()> {
    if !q.has_group_limits() {
        return Ok(());
    }
    let dirty = conn.rows(
        "SELECT grp, running, started, head FROM tinyq_groups INDEXED BY tinyq_groups_dirty WHERE dirty = 1 AND queue = ?1",
        &[&q.name],
        |st| (st.text(0).unwrap_or_default(), st.int(1), st.int(2), st.opt_int(3)),
    )?;
    for (grp, running, started, head) in dirty {
        refill(conn, q, &grp, running, started, head, now)?;
    }
    Ok(())
}

fn refill(conn: &Conn, q: &Settings, grp: &str, running: i64, started: i64, head: Option<i64>, now: i64) -> Result<()> {
    let first = next_parked(conn, &q.name, grp, None, now)?;
    let head_place = match head {
        Some(seq) => conn.row(
            "SELECT priority, run_at, seq FROM tinyq_jobs WHERE seq = ?1 AND status = 'queued' AND parked = 0",
            &[&seq],
            |st| Place::new(st.int(0), st.int(1), st.int(2)),
        )?,
        None => None,
    };
    // A head not due (a clock stepped back) keeps its place when it is first in claim order:
    // the claim's walk takes the group's first due job beside it (claim::plan), and the head
    // goes first again once due (JOB-01).
    let room = has_room(q, running, started);
    let mut wanted = if room { [first, head_place].into_iter().flatten().min() } else { None };
    if room && wanted.is_none() {
        // None due (a clock stepped back): the first parked job is the head all the same, so
        // that the claim's walk meets it when it comes due (the group may see no change then).
        wanted = next_parked(conn, &q.name, grp, None, i64::MAX)?;
    }
    if head_place != wanted {
        if let Some(h) = head_place {
            conn.exec("UPDATE tinyq_jobs SET parked = 1 WHERE seq = ?1", &[&h.seq])?;
        }
        if let Some(w) = wanted {
            conn.exec("UPDATE tinyq_jobs SET parked = 0 WHERE seq = ?1", &[&w.seq])?;
        }
    }
    let idle = wanted.is_none() && first.is_none() && head_place.is_none() && running == 0 && started == 0;
    // (A parked job not due by a clock moved back still needs its group's row.)
    if idle && conn.one_int(
        "SELECT EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'queued' AND parked = 1 AND queue = ?1 AND grp = ?2)",
        &[&q.name, &grp],
    )? == Some(0)
    {
        // Nothing due, running or recently started: the row goes (the store stays bounded).
        conn.exec("DELETE FROM tinyq_groups WHERE queue = ?1 AND grp = ?2", &[&q.name, &grp])?;
    } else {
        conn.exec(
            "UPDATE tinyq_groups SET head = ?3, dirty = 0 WHERE queue = ?1 AND grp = ?2",
            &[&q.name, &grp, &wanted.map(|w| w.seq)],
        )?;
    }
    Ok(())
}

/// After a change of the queue's group limits: every due job of the queue is set aside
/// again from scratch (or none, without group limits), and every group row counted anew.
/// This is the one step whose cost grows with the queue (it runs in tq_queue, not claims).
/// Returns the group rate window's edge the rows were counted at (i64::MIN without a
/// group rate), or None without group limits.
pub fn rebuild(conn: &Conn, q: &Settings, now: i64) -> Result<Option<i64>> {
    conn.exec("DELETE FROM tinyq_groups WHERE queue = ?1", &[&q.name])?;
    if !q.has_group_limits() {
        conn.exec(
            "UPDATE tinyq_jobs SET parked = 0 WHERE status = 'queued' AND parked = 1 AND queue = ?1",
            &[&q.name],
        )?;
        return Ok(None);
    }
    // Every head is set aside too; the claim after this promotes the right ones again.
    conn.exec(
        "UPDATE tinyq_jobs SET parked = 1 WHERE status = 'queued' AND parked = 0 AND queue = ?1 AND grp IS NOT NULL",
        &[&q.name],
    )?;
    let window = q.group_rate.map(|r| now - r.1);
    conn.exec(
        "INSERT INTO tinyq_groups (queue, grp, running, started, dirty)
         SELECT ?1, grp, sum(running), sum(started), 1 FROM (
             SELECT grp, 1 AS running, 0 AS started FROM tinyq_jobs
             WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND grp IS NOT NULL
             UNION ALL SELECT grp, 0, 0 FROM tinyq_jobs WHERE status = 'queued' AND parked = 1 AND queue = ?1
             UNION ALL SELECT grp, 0, 1 FROM tinyq_starts WHERE queue = ?1 AND ?2 IS NOT NULL AND at > ?2 AND grp IS NOT NULL)
         GROUP BY grp",
        &[&q.name, &window],
    )?;
    // i64::MIN: no group rate window to slide.
    Ok(Some(window.unwrap_or(i64::MIN)))
}

/// The group rate window's edge moved from `old` to `edge`: the starts between the two are
/// counted out of their groups (or, for an edge moved back, in), and those groups marked dirty.
pub fn count_passed(conn: &Conn, queue: &str, old: i64, edge: i64) -> Result<()> {
    let (lo, hi) = (old.min(edge), old.max(edge));
    let sign: i64 = if edge > old { -1 } else { 1 };
    conn.exec(
        "INSERT INTO tinyq_groups (queue, grp, started, dirty)
         SELECT ?1, grp, ?4 * count(*), 1 FROM tinyq_starts
         WHERE queue = ?1 AND at > ?2 AND at <= ?3 AND grp IS NOT NULL GROUP BY grp
         ON CONFLICT (queue, grp) DO UPDATE SET started = started + excluded.started, dirty = 1",
        &[&queue, &lo, &hi, &sign],
    )?;
    Ok(())
}

/// Counts in a start just taken in the group (with a group rate).
pub fn count_start(conn: &Conn, queue: &str, grp: &str) -> Result<()> {
    conn.exec("UPDATE tinyq_groups SET started = started + 1 WHERE queue = ?1 AND grp = ?2", &[&queue, &grp])?;
    Ok(())
}
