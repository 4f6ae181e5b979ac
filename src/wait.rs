//! Waiting for work (tq_wait) without holding a lock: look at PRAGMA data_version, which
//! changes when another connection commits, each time the store's files are written (or
//! every few ms where they cannot be watched), and wake when a job's time comes.

use std::time::Duration;

use crate::claim;
use crate::expiry;
use crate::limits::windows;
use crate::schedule;
use crate::settings;
use crate::signals;
use crate::sqlite::Conn;
use crate::sqlite::Error;
use crate::sqlite::{Out, Result, Val};
use crate::wake::Watch;
use crate::{options, store, time};

/// The longest a single tq_wait may block.
const MAX_WAIT_MS: i64 = 3_600_000;
/// How often a waiter that cannot watch the store's files (see wake.rs) looks for another
/// connection's commit: often at first (a worker that just found the queue empty is likely
/// to get work soon), then less, since each wake-up costs CPU.
fn poll_interval(waited_ms: i64) -> Duration {
    Duration::from_millis(if waited_ms < 100 { 1 } else { 3 })
}
/// After a write to the store's files, how long a watching waiter looks every ms for the
/// commit: a commit writes the -wal, then publishes itself in the -shm, which is shared
/// memory and makes no event.
const SETTLE_MS: i64 = 100;

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
    Ok(pending.due
        || pending.expired
        || pending.past_bound
        || pending.timed_out
        || schedule::next_at(conn, queue)?.is_some_and(|t| t <= now))
}

/// When something in the queue next becomes due by the clock alone: a scheduled job, the
/// end of a lease, a start leaving the rate window, or a job reaching its `expires` (the
/// claim that ends it is then due).
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
    let bound = expiry::next_bound(conn, queue, now)?;
    let timeout = signals::next_timeout(conn, queue, now)?;
    Ok([clock, rate_frees, schedule::next_at(conn, queue)?, bound, timeout].into_iter().flatten().min())
}

/// The store as a waiter finds it: None when a job of `queue` may be claimable now, else
/// when to wake by the clock alone (system ms, `end` at the latest).
fn look(conn: &Conn, queue: &str, end: i64) -> Result<Option<i64>> {
    if !store::exists(conn)? {
        return Ok(Some(end));
    }
    let now = conn.now();
    if claimable(conn, queue, now)? {
        return Ok(None);
    }
    match next_due(conn, queue, now)? {
        Some(due) if due <= now => Ok(None),
        // `due` is on tinyq's clock (maybe pinned); the wait runs on the system clock.
        // Read both together so the wake is never early.
        Some(due) => Ok(Some(end.min(due - (conn.now() - time::system_ms()) + 1))),
        None => Ok(Some(end)),
    }
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
    let end = time::system_ms() + timeout;
    let version = |c: &Conn| c.one_int("PRAGMA data_version", &[]);
    let mut seen = version(conn)?;
    let Some(mut wake_at) = look(conn, &queue, end)? else {
        return Ok(Out::Int(1));
    };
    let mut watch = Watch::arm(conn);
    // Files written just now: maybe by a commit not yet published when `seen` was read.
    let mut settle_until = watch.as_ref().map_or(0, |w| w.written_at + SETTLE_MS);
    loop {
        let wall = time::system_ms();
        let now_seen = version(conn)?;
        if now_seen != seen {
            // Another connection committed: wake if that made a job of this queue claimable,
            // not for every commit (every waiter of the store would then try a claim).
            seen = now_seen;
            settle_until = 0; // the commit the event was for is published
            match look(conn, &queue, end)? {
                Some(at) => wake_at = at,
                None => return Ok(Out::Int(1)),
            }
        }
        if wall >= wake_at {
            return Ok(Out::Int(i64::from(wall < end)));
        }
        match watch.as_mut() {
            Some(w) if wall >= settle_until => {
                if w.sleep(wake_at) {
                    settle_until = time::system_ms() + SETTLE_MS;
                }
            }
            _ => {
                let every =
                    if watch.is_some() { Duration::from_millis(1) } else { poll_interval(wall + timeout - end) };
                std::thread::sleep(every.min(Duration::from_millis((wake_at - wall) as u64)));
            }
        }
    }
}
