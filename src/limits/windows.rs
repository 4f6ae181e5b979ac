//! The rate windows (LIM-02): starts inside each window, counted from the starts log
//! (tinyq_starts: written here, trimmed by the sweep) rather than counted again at each claim (COST-01). Each
//! start is counted in once, when it is taken, and counted out once, by the first claim
//! after it leaves the window: that claim moves the window's edge and counts the starts it
//! passes over, so a claim's work is the starts that left since the previous one, not the
//! starts inside the window.

use super::counts::{self, Counts};
use super::groups;
use crate::settings::Settings;
use crate::sqlite::Conn;
use crate::sqlite::Result;

/// The queue-wide window tq_stats reports and `rate` limits: the rate's, else the group rate's.
pub fn queue_window(q: &Settings) -> Option<i64> {
    q.rate.or(q.group_rate).map(|r| r.1)
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
    let mut c = counts::load(conn, &q.name)?;
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
            // Not built yet: claim::run rebuilds first (limits::rebuild sets gedge).
            None => {}
            Some(old) if old == edge => {}
            Some(old) => groups::count_passed(conn, &q.name, old, edge)?,
        }
        c.gedge = Some(edge);
    }
    if moved_back {
        // Every start re-dated stays inside both windows (now > edge), so no count changes.
        conn.exec("UPDATE tinyq_starts SET at = ?2 WHERE queue = ?1 AND at > ?2", &[&q.name, &now])?;
    }
    counts::save_windows(conn, &q.name, &c)?;
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
    let mut c = counts::load(conn, &q.name)?;
    if let Some(window) = queue_window(q) {
        c.started = started_in_window(conn, &q.name, c.started, c.edge, now - window)?;
    }
    Ok(c)
}

/// Have starts left the group rate window since the last claim? Then a group may have room
/// that its stored count does not show yet (the next claim counts them out).
pub fn group_window_moved(conn: &Conn, q: &Settings, now: i64) -> Result<bool> {
    let (Some((_, window)), Some(gedge)) = (q.group_rate, counts::load(conn, &q.name)?.gedge) else {
        return Ok(false);
    };
    Ok(conn.one_int(
        "SELECT EXISTS (SELECT 1 FROM tinyq_starts WHERE queue = ?1 AND at > ?2 AND at <= ?3 AND grp IS NOT NULL)",
        &[&q.name, &gedge, &(now - window)],
    )? == Some(1))
}

/// Counts in the starts a claim just took (the group of each job taken).
pub fn count_in(conn: &Conn, q: &Settings, taken: &[Option<String>], now: i64) -> Result<()> {
    if !q.counts_starts() || taken.is_empty() {
        return Ok(());
    }
    for grp in taken {
        conn.exec("INSERT INTO tinyq_starts (queue, grp, at) VALUES (?1, ?2, ?3)", &[&q.name, grp, &now])?;
        if let (Some(_), Some(grp)) = (q.group_rate, grp) {
            groups::count_start(conn, &q.name, grp)?;
        }
    }
    counts::add_started(conn, &q.name, taken.len() as i64)?;
    Ok(())
}

/// The oldest start the sweep may remove: one that every window has counted out.
pub fn sweepable_starts(conn: &Conn, q: &Settings, now: i64) -> Result<i64> {
    let c = counts::load(conn, &q.name)?;
    let mut cut = now - q.longest_window();
    if queue_window(q).is_some() {
        cut = cut.min(c.edge.unwrap_or(i64::MIN));
    }
    if q.group_rate.is_some() {
        cut = cut.min(c.gedge.unwrap_or(i64::MIN));
    }
    Ok(cut)
}
