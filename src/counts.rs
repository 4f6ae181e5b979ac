//! Counters a claim reads instead of counting rows (COST-01): jobs per stored status and
//! running leases (kept by the triggers in sql/store.sql), and starts inside the rate
//! windows (kept here). Each start is counted in once, when it is taken, and counted out
//! once, by the first claim after it leaves the window: that claim moves the window's edge
//! and counts the starts it passes over, so a claim's work is the starts that left since
//! the previous one, not the starts inside the window.

use crate::queues::Settings;
use crate::sqlite::Conn;
use crate::sqlite::Result;

/// The queue-wide window tq_stats reports and `rate` limits: the rate's, else the group rate's.
pub fn queue_window(q: &Settings) -> Option<i64> {
    q.rate.or(q.group_rate).map(|r| r.1)
}

/// The queue's counters as stored.
#[derive(Default)]
pub struct Counts {
    pub running: i64,
    pub started: i64,
    edge: Option<i64>,
    gedge: Option<i64>,
}

impl Counts {
    /// Have the groups of this queue been counted (groups::rebuild)? A store migrated
    /// from an older schema has not, until its first claim.
    pub fn groups_built(&self) -> bool {
        self.gedge.is_some()
    }
}

pub fn load(conn: &Conn, queue: &str) -> Result<Counts> {
    let mut st = conn.query("SELECT running, started, edge, gedge FROM tinyq_counts WHERE queue = ?1", &[&queue])?;
    Ok(if st.step()? {
        Counts { running: st.int(0), started: st.int(1), edge: st.opt_int(2), gedge: st.opt_int(3) }
    } else {
        Counts::default()
    })
}

/// Brings the rate counters to `now` (in the claim's transaction): starts that left a
/// window since the last claim are counted out, once each; a clock moved back counts them
/// in again, and the starts it dates in the future are dated now, so they leave the window
/// one window from now instead of when the clock is back past them (a rate-limited queue
/// would start nothing until then). Groups whose count fell are marked dirty.
pub fn slide(conn: &Conn, q: &Settings, now: i64) -> Result<Counts> {
    if !q.counts_starts() && q.concurrency.is_none() {
        return Ok(Counts::default()); // no queue-wide limit reads them
    }
    let mut c = load(conn, &q.name)?;
    if !q.counts_starts() {
        return Ok(c);
    }
    let mut moved_back = false;
    if let Some(window) = queue_window(q) {
        let edge = now - window;
        moved_back |= c.edge.is_some_and(|old| old > edge);
        c.started = started_in_window(conn, &q.name, c.started, c.edge, edge)?;
        c.edge = Some(edge);
    }
    if let Some((_, window)) = q.group_rate {
        let edge = now - window;
        moved_back |= c.gedge.is_some_and(|old| old > edge);
        match c.gedge {
            // Not built yet: claim::run rebuilds first (groups::rebuild sets gedge).
            None => {}
            Some(old) if old == edge => {}
            Some(old) => {
                let (lo, hi) = (old.min(edge), old.max(edge));
                let sign: i64 = if edge > old { -1 } else { 1 };
                conn.exec(
                    "INSERT INTO tinyq_groups (queue, grp, started, dirty)
                     SELECT ?1, grp, ?4 * count(*), 1 FROM tinyq_starts
                     WHERE queue = ?1 AND at > ?2 AND at <= ?3 AND grp IS NOT NULL GROUP BY grp
                     ON CONFLICT (queue, grp) DO UPDATE SET started = started + excluded.started, dirty = 1",
                    &[&q.name, &lo, &hi, &sign],
                )?;
            }
        }
        c.gedge = Some(edge);
    }
    if moved_back {
        // Every start re-dated stays inside both windows (now > edge), so no count changes.
        conn.exec("UPDATE tinyq_starts SET at = ?2 WHERE queue = ?1 AND at > ?2", &[&q.name, &now])?;
    }
    conn.exec(
        "UPDATE tinyq_counts SET started = ?2, edge = ?3, gedge = ?4 WHERE queue = ?1",
        &[&q.name, &c.started, &c.edge, &c.gedge],
    )?;
    Ok(c)
}

/// The queue's starts inside the window whose edge is `edge`, from `started`, the count
/// stored at the edge `old`: the starts between the two edges are counted out (or, for an
/// edge moved back, in). Read-only: slide stores it; tq_stats and tq_wait only read it.
pub fn started_in_window(conn: &Conn, queue: &str, started: i64, old: Option<i64>, edge: i64) -> Result<i64> {
    Ok(match old {
        None => conn
            .one_int("SELECT count(*) FROM tinyq_starts WHERE queue = ?1 AND at > ?2", &[&queue, &edge])?
            .unwrap_or(0),
        Some(old) if old == edge => started,
        Some(old) => {
            let (lo, hi) = (old.min(edge), old.max(edge));
            let passed = conn
                .one_int(
                    "SELECT count(*) FROM tinyq_starts WHERE queue = ?1 AND at > ?2 AND at <= ?3",
                    &[&queue, &lo, &hi],
                )?
                .unwrap_or(0);
            if edge > old {
                started - passed
            } else {
                started + passed
            }
        }
    })
}

/// The counters as a claim at `now` would find them, without writing (for tq_wait): the
/// queue-wide window brought to `now`.
pub fn current(conn: &Conn, q: &Settings, now: i64) -> Result<Counts> {
    let mut c = load(conn, &q.name)?;
    if let Some(window) = queue_window(q) {
        c.started = started_in_window(conn, &q.name, c.started, c.edge, now - window)?;
    }
    Ok(c)
}

/// Have starts left the group rate window since the last claim? Then a group may have room
/// that its stored count does not show yet (the next claim counts them out).
pub fn group_window_moved(conn: &Conn, q: &Settings, now: i64) -> Result<bool> {
    let (Some((_, window)), Some(gedge)) = (q.group_rate, load(conn, &q.name)?.gedge) else {
        return Ok(false);
    };
    Ok(conn.one_int(
        "SELECT EXISTS (SELECT 1 FROM tinyq_starts WHERE queue = ?1 AND at > ?2 AND at <= ?3 AND grp IS NOT NULL)",
        &[&q.name, &gedge, &(now - window)],
    )? == Some(1))
}

/// Counts in the starts a claim just took.
pub fn count_in(conn: &Conn, q: &Settings, groups: &[Option<String>], now: i64) -> Result<()> {
    if !q.counts_starts() || groups.is_empty() {
        return Ok(());
    }
    for grp in groups {
        conn.exec("INSERT INTO tinyq_starts (queue, grp, at) VALUES (?1, ?2, ?3)", &[&q.name, grp, &now])?;
        if q.group_rate.is_some() && grp.is_some() {
            conn.exec("UPDATE tinyq_groups SET started = started + 1 WHERE queue = ?1 AND grp = ?2", &[&q.name, grp])?;
        }
    }
    conn.exec("UPDATE tinyq_counts SET started = started + ?2 WHERE queue = ?1", &[&q.name, &(groups.len() as i64)])?;
    Ok(())
}

/// The oldest start the sweep may remove: one that every window has counted out.
pub fn sweepable_starts(conn: &Conn, q: &Settings, now: i64) -> Result<i64> {
    let c = load(conn, &q.name)?;
    let mut cut = now - q.longest_window();
    if queue_window(q).is_some() {
        cut = cut.min(c.edge.unwrap_or(i64::MIN));
    }
    if q.group_rate.is_some() {
        cut = cut.min(c.gedge.unwrap_or(i64::MIN));
    }
    Ok(cut)
}

/// After a change of the queue's rate settings: the counters start again from the log.
pub fn rebuild(conn: &Conn, q: &Settings, now: i64) -> Result<()> {
    conn.exec("UPDATE tinyq_counts SET started = 0, edge = NULL, gedge = NULL WHERE queue = ?1", &[&q.name])?;
    crate::groups::rebuild(conn, q, now)?;
    slide(conn, q, now)?;
    Ok(())
}
