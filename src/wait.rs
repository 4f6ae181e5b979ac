//! Waiting for work (tq_wait) without holding a lock: look at PRAGMA data_version, which
//! changes when another connection commits, each time the store's files are written (or
//! every few ms where they cannot be watched), and wake when a job's time comes.

use std::time::Duration;

use crate::claim;
use crate::expiry;
use crate::limits::windows;
use crate::schedule;
use crate::settings;
use crate::sqlite::Conn;
use crate::sqlite::Error;
use crate::sqlite::{Out, Result, Val};
use crate::wake::Watch;
use crate::workflows::signals;
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
/// How often a waiter runs a statement on its connection, so that SQLite looks at
/// sqlite3_interrupt and the progress handler and the wait ends soon after either asks
/// (HOST-01): about 0.3% of a core while idle.
const PULSE_MS: i64 = 40;

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

/// A queue with no job in line, scheduled, running, waiting for a signal (with its
/// timeout) or blocked with an `expires` (it ends at its bound: EXP-01), and no live
/// schedule: no job of it is claimable, and none becomes so by the clock alone (rate and
/// group windows, leases, bounds and timeouts all need such a job); only a commit can
/// change that, and the waiter looks again after each. Six index seeks: a waiter of many
/// queues looks at the idle ones at little cost.
fn quiet(conn: &Conn, queue: &str) -> Result<bool> {
    let busy = conn.one_int(
        "SELECT EXISTS (SELECT 1 FROM tinyq_jobs WHERE queue = ?1 AND status = 'queued')
             OR EXISTS (SELECT 1 FROM tinyq_jobs WHERE queue = ?1 AND status = 'scheduled')
             OR EXISTS (SELECT 1 FROM tinyq_jobs WHERE queue = ?1 AND status = 'running')
             OR EXISTS (SELECT 1 FROM tinyq_jobs WHERE queue = ?1 AND signal IS NOT NULL)
             OR EXISTS (SELECT 1 FROM tinyq_jobs WHERE queue = ?1 AND start_by IS NOT NULL
                          AND (status = 'scheduled' OR status = 'queued' OR status = 'blocked'))
             OR EXISTS (SELECT 1 FROM tinyq_schedules WHERE queue = ?1 AND paused = 0)",
        &[&queue],
    )?;
    Ok(busy == Some(0))
}

/// The store as a waiter finds it: the queues of `queues` of which a job may be claimable
/// now (empty: none), and else when to wake by the clock alone (system ms, `end` at the
/// latest).
fn look(conn: &Conn, queues: &[String], end: i64) -> Result<(Vec<String>, i64)> {
    if !store::exists(conn)? {
        return Ok((Vec::new(), end));
    }
    let now = conn.now();
    let mut ready = Vec::new();
    let mut due_at: Option<i64> = None;
    for queue in queues {
        if quiet(conn, queue)? {
            continue;
        }
        if claimable(conn, queue, now)? {
            ready.push(queue.clone());
            continue;
        }
        match next_due(conn, queue, now)? {
            Some(due) if due <= now => ready.push(queue.clone()),
            Some(due) => due_at = Some(due_at.map_or(due, |d| d.min(due))),
            None => {}
        }
    }
    // `due` is on tinyq's clock (maybe pinned); the wait runs on the system clock. Read
    // both together so the wake is never early.
    let wake_at = due_at.map_or(end, |due| end.min(due - (conn.now() - time::system_ms()) + 1));
    Ok((ready, wake_at))
}

/// tq_wait(queue, timeout) -> 1 when a job may be claimable, 0 when the timeout passed.
pub fn tq_wait(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 2 {
        bail!("expects (queue, timeout)");
    }
    let queue = options::name("queue", &args[0])?;
    let ready = wait(conn, &[queue], &args[1])?;
    Ok(Out::Int(i64::from(!ready.is_empty())))
}

/// The most queues one tq_wait_any may wait for.
const MAX_QUEUES: usize = 1000;

/// tq_wait_any(queues, timeout) -> the JSON array of the queues (of the JSON array
/// `queues`) of which a job may be claimable, '[]' when the timeout passed: one waiter for
/// a worker that serves several queues.
pub fn tq_wait_any(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 2 {
        bail!("expects (queues, timeout)");
    }
    let queues = queue_list(&args[0])?;
    let ready = wait(conn, &queues, &args[1])?;
    Ok(Out::Text(serde_json::to_string(&ready).map_err(|e| Error::bad(e.to_string()))?))
}

/// tq_wait_any's queues: a JSON array of 1 to MAX_QUEUES queue names.
fn queue_list(v: &Val) -> Result<Vec<String>> {
    let text = match v {
        Val::Text(s) => s,
        other => bail!("queues must be a JSON array of queue names like [\"emails\", \"pdfs\"], not {}", other.kind()),
    };
    let Ok(items) = serde_json::from_str::<Vec<serde_json::Value>>(text) else {
        bail!("queues must be a JSON array of queue names like [\"emails\", \"pdfs\"], not {}", options::quote(text));
    };
    if items.is_empty() || items.len() > MAX_QUEUES {
        bail!("queues must hold from 1 to {MAX_QUEUES} names, not {}", items.len());
    }
    let mut queues: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let name = match item {
            serde_json::Value::String(s) => options::name("queue", &Val::Text(s))?,
            other => bail!("queues must hold queue names (text), not {other}"),
        };
        // A repeat would be answered twice: a caller's list with one is a mistake worth naming.
        if queues.contains(&name) {
            bail!("queues names {} twice: give each queue once", options::quote(&name));
        }
        queues.push(name);
    }
    Ok(queues)
}

/// A look at the store that met another connection's lock (SQLITE_BUSY, SQLITE_LOCKED:
/// "database is locked" on a connection without busy timeout) saw nothing yet (None): the
/// writer holding it may be committing what the wait is for, so the wait looks again at its
/// next wake-up instead of failing. Other errors end the wait.
fn unless_busy<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Err(e) if e.busy() => Ok(None),
        r => r.map(Some),
    }
}

/// If another connection committed since `seen` (data_version at the last look that saw
/// the store; None: none has), looks at the store: the queues of which a job may be
/// claimable (Some, and `seen`, `wake_at` are updated), or None when nothing was looked at
/// (no commit since, or the look met a lock and `seen` stays, to look again).
fn look_if_changed(
    conn: &Conn,
    queues: &[String],
    end: i64,
    seen: &mut Option<i64>,
    wake_at: &mut i64,
) -> Result<Option<Vec<String>>> {
    let Some(version) = unless_busy(conn.one_int("PRAGMA data_version", &[]))? else {
        return Ok(None);
    };
    let version = version.unwrap_or(0);
    if *seen == Some(version) {
        return Ok(None);
    }
    // Another connection committed: wake if that made a job of these queues claimable, not
    // for every commit (every waiter of the store would then try a claim).
    let Some((ready, at)) = unless_busy(look(conn, queues, end))? else {
        return Ok(None);
    };
    (*seen, *wake_at) = (Some(version), at);
    Ok(Some(ready))
}

/// Waits until a job of one of `queues` may be claimable (those queues) or `timeout` passes
/// (none).
fn wait(conn: &Conn, queues: &[String], timeout: &Val) -> Result<Vec<String>> {
    let timeout = time::parse_duration(timeout).map_err(|e| Error::bad(format!("timeout: {e}")))?;
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
    // data_version as of the last look that saw the store (None: none has yet), and when
    // that look said to wake by the clock alone.
    let (mut seen, mut wake_at) = (None, end);
    if let Some(ready) = look_if_changed(conn, queues, end, &mut seen, &mut wake_at)? {
        if !ready.is_empty() {
            return Ok(ready);
        }
    }
    let mut watch = Watch::arm(conn);
    // Files written just now: maybe by a commit not yet published when `seen` was read.
    let mut settle_until = watch.as_ref().map_or(0, |w| w.written_at() + SETTLE_MS);
    let mut pulse = None; // prepared at the first beat: most waits end before
    let mut next_beat = time::system_ms() + PULSE_MS;
    loop {
        let wall = time::system_ms();
        if wall >= next_beat {
            if pulse.is_none() {
                pulse = Some(conn.pulse()?);
            }
            if let Some(p) = pulse.as_mut() {
                p.beat()?; // "interrupted": the host wants this statement to end
            }
            next_beat = wall + PULSE_MS;
        }
        if let Some(ready) = look_if_changed(conn, queues, end, &mut seen, &mut wake_at)? {
            settle_until = 0; // the commit the event was for is published
            if !ready.is_empty() {
                return Ok(ready);
            }
        }
        if wall >= wake_at {
            if wall >= end {
                return Ok(Vec::new()); // nothing seen, or no look got past the locks
            }
            // A due time came: the queues it was for (every one if the look cannot tell,
            // locked out included: a hint, as ever).
            let ready = unless_busy(look(conn, queues, end))?.map(|(ready, _)| ready).unwrap_or_default();
            return Ok(if ready.is_empty() { queues.to_vec() } else { ready });
        }
        match watch.as_mut() {
            Some(w) if wall >= settle_until => {
                if w.sleep(wake_at.min(next_beat)) {
                    settle_until = time::system_ms() + SETTLE_MS;
                }
            }
            _ => {
                let every =
                    if watch.is_some() { Duration::from_millis(1) } else { poll_interval(wall + timeout - end) };
                std::thread::sleep(every.min(Duration::from_millis((wake_at.min(next_beat) - wall).max(0) as u64)));
            }
        }
    }
}
