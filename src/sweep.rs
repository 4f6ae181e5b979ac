//! Retention (RET-01): done jobs keep their id for `dedupe`, failed jobs their error for
//! `keep`; events live as long as the longest `keep`, starts as long as the longest rate window.

use crate::conn::Conn;
use crate::ffi::{Out, Result, Val};
use crate::queues::{self, Settings};
use crate::options;

/// One kind of expired row: removes up to `limit` of them; returns how many.
type Kind = fn(&Conn, &Settings, i64, i64) -> Result<i64>;

/// Every kind of expired row, in the order tq_sweep removes them.
const KINDS: [Kind; 4] = [settled_jobs, events, tombstones, starts];

fn settled_jobs(conn: &Conn, q: &Settings, now: i64, limit: i64) -> Result<i64> {
    conn.exec(
        "DELETE FROM tinyq_jobs WHERE seq IN (
             SELECT seq FROM tinyq_jobs WHERE status IN ('done', 'failed') AND queue = ?1 AND expires_at <= ?2 LIMIT ?3)",
        &[&q.name, &now, &limit],
    )
}

/// Events go oldest first, store-wide: they are in time order, so only the head of the
/// log is looked at, up to its first event that is still young. They live as long as the
/// longest `keep` of any queue. The newest event always stays, so that seq (a rowid) never
/// goes back for watchers. One range of rowids: a claim with nothing to remove reads a row.
fn events(conn: &Conn, _: &Settings, now: i64, limit: i64) -> Result<i64> {
    conn.exec(
        "DELETE FROM tinyq_events WHERE seq < min(
             (SELECT min(seq) FROM tinyq_events) + ?2,
             coalesce((SELECT seq FROM tinyq_events
                       WHERE at >= ?1 - (SELECT max(coalesce(keep, ?3)) FROM tinyq_queues) ORDER BY seq LIMIT 1),
                      (SELECT max(seq) FROM tinyq_events)))",
        &[&now, &limit, &crate::queues::DEFAULT_KEEP],
    )
}

/// A tombstone outlives any worker of the cancelled attempt: it is kept for `keep`.
fn tombstones(conn: &Conn, q: &Settings, now: i64, limit: i64) -> Result<i64> {
    conn.exec(
        "DELETE FROM tinyq_tombstones WHERE id IN (SELECT id FROM tinyq_tombstones WHERE at < ?1 LIMIT ?2)",
        &[&(now - q.keep()), &limit],
    )
}

fn starts(conn: &Conn, q: &Settings, now: i64, limit: i64) -> Result<i64> {
    conn.exec(
        "DELETE FROM tinyq_starts WHERE rowid IN (
             SELECT rowid FROM tinyq_starts WHERE queue = ?1 AND at <= ?2 LIMIT ?3)",
        &[&q.name, &(now - q.longest_window()), &limit],
    )
}

/// Removes up to `limit` rows of one queue that are past their windows; returns how many.
pub fn queue(conn: &Conn, q: &Settings, now: i64, limit: i64) -> Result<i64> {
    let mut left = limit;
    for kind in KINDS {
        if left <= 0 {
            break;
        }
        left -= kind(conn, q, now, left)?;
    }
    Ok(limit - left)
}

/// What a claim sweeps on the way: one kind per claim, in turn, with the budget of all
/// four, so that each claim runs one statement for it and the store still stays bounded.
pub fn in_turn(conn: &Conn, q: &Settings, now: i64, limit: i64) -> Result<i64> {
    let turn = conn.sweep_turn.get();
    conn.sweep_turn.set(turn.wrapping_add(1));
    KINDS[turn as usize % KINDS.len()](conn, q, now, limit * KINDS.len() as i64)
}

/// tq_sweep([limit]) -> rows removed, across every queue.
pub fn tq_sweep(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() > 1 {
        bail!("expects ([limit])");
    }
    let limit = match args.first() {
        None | Some(Val::Null) => i64::MAX,
        Some(v) => options::int("limit", v, 1, i64::MAX)?,
    };
    conn.write_tx(|| {
        let now = conn.now();
        let mut removed = crate::holders::forget_dead(conn)?;
        for q in queues::all(conn)? {
            removed += queue(conn, &q, now, limit - removed)?;
            if removed >= limit {
                break;
            }
        }
        Ok(Out::Int(removed))
    })
}
