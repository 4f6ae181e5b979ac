//! Retention (RET-01): done jobs keep their id for `dedupe`, failed jobs their error for
//! `keep`; events live as long as the longest `keep`, starts as long as the longest rate window.

use crate::holders;
use crate::limits::windows;
use crate::options;
use crate::settings::{self, Settings};
use crate::sqlite::{Bind, Conn, Out, Result, Val};
use crate::workflows::signals;

// Limits are written `LIMIT ?N + 0`: since SQLite 3.47 or so a bare `LIMIT ?N` is planned
// with the bound value, so every new binding re-prepares the statement (~90k instructions,
// on every claim). An expression is evaluated at run time instead.
//
// A claim's sweep looks before it deletes: claims sweep on every call and usually find
// nothing, and a DELETE that removes nothing still costs several times a read. tq_sweep
// deletes at once (so on a read-only file it fails like every writer).

/// One kind of expired row: removes up to `limit` of them; returns how many.
type Kind = fn(&Conn, &Settings, i64, i64, Look) -> Result<i64>;

/// Whether to look for expired rows before deleting them.
#[derive(Clone, Copy, PartialEq)]
enum Look {
    First,
    No,
}

/// Every kind of expired row, in the order tq_sweep removes them.
const KINDS: [Kind; 4] = [settled_jobs, events, starts, signals_sent];

/// Runs `delete`, unless asked to look first and `probe` (a SELECT EXISTS, on the first
/// `probe_params`) finds nothing.
fn delete_if_any(
    conn: &Conn,
    look: Look,
    probe: &'static str,
    delete: &'static str,
    params: &[&dyn Bind],
    probe_params: usize,
) -> Result<i64> {
    if look == Look::First && conn.one_int(probe, &params[..probe_params])? != Some(1) {
        return Ok(0);
    }
    conn.exec(delete, params)
}

fn settled_jobs(conn: &Conn, q: &Settings, now: i64, limit: i64, look: Look) -> Result<i64> {
    delete_if_any(
        conn,
        look,
        // One status per SELECT: each is a seek in tinyq_jobs_held (see sql/store.sql).
        "SELECT EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'done' AND queue = ?1 AND expires_at <= ?2)
             OR EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'failed' AND queue = ?1 AND expires_at <= ?2)",
        "DELETE FROM tinyq_jobs WHERE seq IN (
             SELECT seq FROM tinyq_jobs WHERE status = 'done' AND queue = ?1 AND expires_at <= ?2
             UNION ALL
             SELECT seq FROM tinyq_jobs WHERE status = 'failed' AND queue = ?1 AND expires_at <= ?2
             LIMIT ?3 + 0)",
        &[&q.name, &now, &limit],
        2,
    )
}

/// Events go oldest first, store-wide: they are in time order, so only the head of the
/// log is looked at, up to its first event that is still young. They live as long as the
/// longest `keep` of any queue. The newest event always stays, so that seq (a rowid) never
/// goes back for watchers.
fn events(conn: &Conn, _: &Settings, now: i64, limit: i64, look: Look) -> Result<i64> {
    delete_if_any(
        conn,
        look,
        "SELECT EXISTS (SELECT 1 FROM tinyq_events WHERE seq = (SELECT min(seq) FROM tinyq_events)
                          AND seq < (SELECT max(seq) FROM tinyq_events)
                          AND at < ?1 - (SELECT max(coalesce(keep, ?2)) FROM tinyq_queues))",
        "DELETE FROM tinyq_events WHERE seq < min(
             (SELECT min(seq) FROM tinyq_events) + ?3,
             coalesce((SELECT seq FROM tinyq_events
                       WHERE at >= ?1 - (SELECT max(coalesce(keep, ?2)) FROM tinyq_queues) ORDER BY seq LIMIT 1),
                      (SELECT max(seq) FROM tinyq_events)))",
        &[&now, &settings::DEFAULT_KEEP, &limit],
        2,
    )
}

fn starts(conn: &Conn, q: &Settings, now: i64, limit: i64, look: Look) -> Result<i64> {
    delete_if_any(
        conn,
        look,
        "SELECT EXISTS (SELECT 1 FROM tinyq_starts WHERE queue = ?1 AND at <= ?2)",
        "DELETE FROM tinyq_starts WHERE rowid IN (
             SELECT rowid FROM tinyq_starts WHERE queue = ?1 AND at <= ?2 LIMIT ?3 + 0)",
        // Only starts every rate window has counted out (limits/windows.rs).
        &[&q.name, &windows::sweepable_starts(conn, q, now)?, &limit],
        2,
    )
}

/// Signals past their `keep` (SIG-01), store-wide like events.
fn signals_sent(conn: &Conn, _: &Settings, now: i64, limit: i64, look: Look) -> Result<i64> {
    delete_if_any(conn, look, signals::SWEEP_PROBE, signals::SWEEP, &[&now, &limit], 1)
}

/// Removes up to `limit` rows of one queue that are past their windows; returns how many.
pub fn queue(conn: &Conn, q: &Settings, now: i64, limit: i64) -> Result<i64> {
    let mut left = limit;
    for kind in KINDS {
        if left <= 0 {
            break;
        }
        left -= kind(conn, q, now, left, Look::No)?;
    }
    Ok(limit - left)
}

/// What a claim sweeps on the way: one kind per claim, in turn, with the budget of all
/// of them, so that each claim runs one statement for it and the store still stays bounded.
pub fn in_turn(conn: &Conn, q: &Settings, now: i64, limit: i64) -> Result<i64> {
    let turn = conn.sweep_turn.get();
    conn.sweep_turn.set(turn.wrapping_add(1));
    KINDS[turn as usize % KINDS.len()](conn, q, now, limit * KINDS.len() as i64, Look::First)
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
        let mut removed = holders::forget_dead(conn)?;
        for q in settings::all(conn)? {
            removed += queue(conn, &q, now, limit - removed)?;
            if removed >= limit {
                break;
            }
        }
        Ok(Out::Int(removed))
    })
}
