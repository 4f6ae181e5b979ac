//! Waiting for work (tq_wait) without holding a lock: poll PRAGMA data_version, which
//! changes when another connection commits, and wake when a job's time comes.

use std::time::Duration;

use crate::claim;
use crate::limits::windows;
use crate::schedule;
use crate::settings;
use crate::sqlite::Conn;
use crate::sqlite::Error;
use crate::sqlite::{Out, Result, Val};
use crate::{options, store, time};

/// The longest a single tq_wait may block.
const MAX_WAIT_MS: i64 = 3_600_000;
/// How often a waiter looks for another connection's commit: often at first (a worker
/// that just found the queue empty is likely to get work soon), then less, since each
/// wake-up costs CPU. Median wake-up delay stays well under the 5 ms target either way.
fn poll_interval(waited_ms: i64) -> Duration {
    Duration::from_millis(if waited_ms < 100 { 1 } else { 3 })
}

/// Could a claim on `queue` take a job now? (Read-only: the same plan a claim makes.)
fn claimable(conn: &Conn, queue: &str, now: i64) -> Result<bool> {
    let q = settings::load(conn, queue)?;
    if q.paused {
        return Ok(false);
    }
    // The counters as the claim would slide them to now: starts may have left a window.
    if !claim::plan(conn, &q, &windows::current(conn, &q, now)?, now, 1)?.is_empty()
        || windows::group_window_moved(conn, &q, now)?
    {
        return Ok(true);
    }
    // Due but not yet moved in line, or a lease that ran out: the next claim takes them
    // (the claim's own probe). With limits, such a job may still not fit; that claim tells.
    let pending = claim::Pending::probe(conn, &q, now)?;
    Ok(pending.due || pending.expired || schedule::next_at(conn, queue)?.is_some_and(|t| t <= now))
}

/// When something in the queue next becomes due by the clock alone: a scheduled job, the
/// end of a lease, or a start leaving the rate window.
fn next_due(conn: &Conn, queue: &str, now: i64) -> Result<Option<i64>> {
    let q = settings::load(conn, queue)?;
    let window = q.longest_window();
    let rate_frees = if q.counts_starts() {
        conn.one_int("SELECT min(at) FROM tinyq_starts WHERE queue = ?1 AND at > ?2", &[&queue, &(now - window)])?
            .map(|at| at + window)
    } else {
        None
    };
    let clock = conn.one_int(
        "SELECT min(t) FROM (
             SELECT min(run_at) AS t FROM tinyq_jobs WHERE status = 'scheduled' AND queue = ?1 AND run_at > ?2
             UNION ALL
             SELECT min(lease_until) FROM tinyq_jobs WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until > ?2)",
        &[&queue, &now],
    )?;
    Ok([clock, rate_frees, schedule::next_at(conn, queue)?].into_iter().flatten().min())
}

/// tq_wait(queue, timeout) -> 1 when a job may be claimable, 0 when the timeout passed.
pub fn tq_wait(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 2 {
        bail!("expects (queue, timeout)");
    }
    let queue = options::name("queue", &args[0])?;
    let timeout = time::parse_duration(&args[1]).map_err(|e| Error::bad(format!("timeout: {e}")))?;
    if timeout > MAX_WAIT_MS {
        bail!("timeout must be at most 1h, not {timeout}ms");
    }
    if !conn.autocommit() {
        bail!("call it outside a transaction: inside one it would hold its snapshot while it waits");
    }
    if conn.write_in_progress() || conn.any_running(|_, readonly| !readonly) {
        bail!("call it from a statement that writes nothing (SELECT tq_wait(...)): inside a writing statement it would hold the write lock while it waits");
    }
    let start = time::system_ms();
    let version = |c: &Conn| c.one_int("PRAGMA data_version", &[]);
    let seen = version(conn)?;
    let mut wake_at = start + timeout;
    if store::exists(conn)? {
        let now = conn.now();
        if claimable(conn, &queue, now)? {
            return Ok(Out::Int(1));
        }
        if let Some(due) = next_due(conn, &queue, now)? {
            // `due` is on tinyq's clock (maybe pinned); the wait runs on the system clock.
            // Read both together so the wake is never early.
            let offset = conn.now() - time::system_ms();
            wake_at = wake_at.min(due - offset + 1);
            if due <= now {
                return Ok(Out::Int(1));
            }
        }
    }
    loop {
        let wall = time::system_ms();
        if version(conn)? != seen {
            return Ok(Out::Int(1));
        }
        if wall >= wake_at {
            return Ok(Out::Int(i64::from(wall < start + timeout)));
        }
        std::thread::sleep(poll_interval(wall - start).min(Duration::from_millis((wake_at - wall) as u64)));
    }
}
