//! How an attempt ends: settle's six outcomes, and the endings claims find (a lease
//! that ran out, a timeout). One function moves the job for all of them.

use crate::held::{again, held_columns, Held};
use crate::settings::{self, Settings};
use crate::sqlite::{Conn, Error, Out, Result, Val};
use crate::timeline::{next_event, next_event_ungrouped};
use crate::workflows::deps::{self, End};
use crate::workflows::waits::{self, Wait};
use crate::{expiry, options, random, time};

pub enum Outcome {
    Error(String),
    Retry(Option<i64>),
    Snooze(i64),
    Fail(String),
    /// The lease ran out with no settlement: the worker is presumed gone (JOB-04); or the
    /// worker's process is known to be dead (DUR-02).
    LeaseExpired {
        died: bool,
    },
    /// Blocked until jobs finish or a signal comes (workflows/waits.rs); the attempt does not count.
    Wait(Wait),
}

/// Moves the job to where `outcome` sends it.
pub fn apply(conn: &Conn, job: &Held, q: &Settings, outcome: Outcome, now: i64) -> Result<()> {
    let budget = job.budget.unwrap_or(q.attempts());
    let left = job.tries < budget;
    let backoff = || {
        let jitter = random::jitter(conn, (job.seq as u64) << 20 ^ job.attempt as u64, 0.1);
        time::backoff(q.backoff(), q.backoff_max(), job.tries, jitter)
    };
    // Waits again until `run_at`, unless that is past its `expires` (EXP-01): then it ends here.
    let wait_again = |tries: i64, run_at: i64, error: Option<&str>, note: Val| {
        if expiry::too_late(job.start_by, run_at) {
            fail(conn, job, expiry::ERROR, q, now)
        } else {
            again(conn, q, job.seq, tries, run_at, error, note, now)
        }
    };
    match outcome {
        Outcome::Error(msg) if left => wait_again(job.tries, now + backoff(), Some(&msg), Val::Text(msg.clone())),
        Outcome::Error(msg) | Outcome::Fail(msg) => fail(conn, job, &msg, q, now),
        Outcome::Retry(delay) if left => {
            let delay = delay.unwrap_or_else(backoff);
            wait_again(job.tries, now + delay, None, Val::Int(delay))
        }
        Outcome::Retry(_) => {
            fail(conn, job, &format!("retried on attempt {} of {budget}: no attempts left", job.tries), q, now)
        }
        Outcome::Snooze(delay) => wait_again(job.tries - 1, now + delay, None, Val::Int(delay)),
        Outcome::Wait(wait) => waits::begin(conn, job, q, &wait, now),
        Outcome::LeaseExpired { died } => {
            let why = if died { "worker process died" } else { "lease expired" };
            if left && expiry::too_late(job.start_by, now) {
                fail(conn, job, expiry::ERROR, q, now)
            } else if left {
                // Back in line at its old place; lease_until stays so a late settle still
                // counts (JOB-05) until a claim takes the job or ends it.
                conn.exec(
                    concat!(
                        "UPDATE tinyq_jobs SET",
                        next_event!(),
                        ", status = 'queued', holder = NULL, changed_at = ?2, note = ?3,
                         parked = (?4 AND grp IS NOT NULL)
                     WHERE seq = ?1"
                    ),
                    &[&job.seq, &now, &why, &q.has_group_limits()],
                )
            } else {
                let msg = format!("{why} on attempt {} of {budget}: its leases ran out", job.tries);
                fail(conn, job, &msg, q, now)
            }
        }
    }?;
    Ok(())
}

/// Fails the job for good. A job that others wait for is kept while they have not finished
/// (no window yet), and they follow their `after_failed` (DEP-01). The lease goes, even one
/// that ran out unsettled: the job has ended and its dependents acted on that, so a late
/// call of the attempt changes nothing (JOB-05).
fn fail(conn: &Conn, job: &Held, msg: &str, q: &Settings, now: i64) -> Result<i64> {
    let n = conn.exec(
        concat!(
            "UPDATE tinyq_jobs SET",
            next_event!(),
            ", status = 'failed', error = ?2, note = ?2, holder = NULL,
             lease_until = NULL,
             settled_at = ?3, expires_at = CASE WHEN held IS NULL THEN ?4 END, changed_at = ?3
         WHERE seq = ?1"
        ),
        &[&job.seq, &msg, &now, &(now + q.keep())],
    )?;
    if job.linked {
        deps::ended(conn, job.seq, End::Failed, now)?;
    }
    Ok(n)
}

/// What tq_settle was asked to do: `done` is one statement (unless the job is in a
/// workflow); the others need the budget.
enum Settle {
    Done(Val),
    Other(Outcome),
}

const OUTCOMES: &str = "'done', 'error', 'retry', 'snooze', 'fail' or 'wait'";

fn parse_outcome(outcome: &Val, value: Option<&Val>) -> Result<Settle> {
    let Val::Text(name) = outcome else {
        bail!("outcome must be text ({OUTCOMES}), not {}", outcome.kind());
    };
    let value = value.cloned().unwrap_or(Val::Null);
    let text = |what: &str| -> Result<String> {
        match &value {
            Val::Text(s) if !s.trim().is_empty() => Ok(s.clone()),
            // A number is refused, not turned into text: the contract's value is a message.
            Val::Int(i) => bail!("outcome '{name}' needs {what} as non-empty text, not the integer {i}"),
            Val::Real(f) => bail!("outcome '{name}' needs {what} as non-empty text, not the number {f}"),
            _ => bail!("outcome '{name}' needs {what} as non-empty text"),
        }
    };
    let delay = |v: &Val| time::parse_duration(v).map_err(|e| Error::bad(format!("outcome '{name}': {e}")));
    Ok(Settle::Other(match name.as_str() {
        "done" => return Ok(Settle::Done(options::data("result", &value, true)?)),
        "error" => Outcome::Error(text("an error message")?),
        "fail" => Outcome::Fail(text("a reason")?),
        "retry" if value.is_null() => Outcome::Retry(None),
        "retry" => Outcome::Retry(Some(delay(&value)?)),
        "snooze" if value.is_null() => bail!("outcome 'snooze' needs a delay, like '10m'"),
        "snooze" => Outcome::Snooze(delay(&value)?),
        "wait" => Outcome::Wait(Wait::parse(&value)?),
        other => {
            bail!("unknown outcome '{}' (expected {OUTCOMES})", options::clip(other))
        }
    }))
}

/// The fence (JOB-05) of a settlement, on `?1` = id and `?2` = attempt: this attempt's lease
/// is unsettled and no later attempt has claimed the job (its lease may have run out, and
/// a claim put it back in line). A job that ended has no lease: a claim that ends one
/// (its last lease ran out, its `expires` passed) clears it, so its late settlement is
/// stale as any (an older store's failed job that kept one is refused by status).
#[macro_export]
macro_rules! settle_fence {
    () => {
        " id = ?1 AND attempt = ?2 AND lease_until IS NOT NULL AND (status = 'running' OR status = 'queued') "
    };
}

/// The fence of a call made while working (renew, step, progress): the attempt still holds
/// the job's lease.
macro_rules! working_fence {
    () => {
        " id = ?1 AND attempt = ?2 AND status = 'running' AND lease_until IS NOT NULL "
    };
}
pub(crate) use working_fence;

/// SQL: settles `done`, fenced like `held`; the id is kept for `dedupe`, or with no window
/// while dependents hold it (workflows/deps.rs). `$event`: `next_event` or, where the fence keeps
/// out every job whose line or group the settle moves, `next_event_ungrouped`.
macro_rules! done_sql {
    ($event:ident, $also:literal) => {
        concat!(
            "UPDATE tinyq_jobs SET",
            $event!(),
            ", status = 'done', result = ?3, error = NULL, lease_until = NULL, holder = NULL,
                 settled_at = ?4, changed_at = ?4, note = NULL,
                 expires_at = CASE WHEN held IS NULL THEN ?4 + coalesce((SELECT dedupe FROM tinyq_queues WHERE name = tinyq_jobs.queue), ?5) END
             WHERE",
            settle_fence!(),
            $also
        )
    };
}

/// Settles `done` in one statement when the job is in no workflow; a job in one settles in
/// a transaction that also moves its dependents (DEP-01: in the same transaction). The
/// common case first: an ungrouped job that is not back in line fires no trigger of a
/// line or a group (timeline.rs); any other job misses it (writing nothing) and is settled
/// by the statement that names `grp`.
fn done(conn: &Conn, id: &str, attempt: i64, result: &Val) -> Result<Out> {
    let now = conn.now();
    let values = [&id as &dyn crate::sqlite::Bind, &attempt, result, &now, &settings::DEFAULT_DEDUPE];
    let n = conn.write_one(|| {
        let n = conn.exec(
            done_sql!(next_event_ungrouped, "AND linked IS NULL AND grp IS NULL AND status <> 'queued'"),
            &values,
        )?;
        if n > 0 {
            return Ok(n);
        }
        conn.exec(done_sql!(next_event, "AND linked IS NULL"), &values)
    })?;
    if n > 0 {
        return Ok(Out::Int(1));
    }
    conn.write_tx(|| {
        let Some((job, _)) = held(conn, id, attempt)? else {
            return Ok(Out::Int(0));
        };
        conn.exec(done_sql!(next_event, ""), &values)?;
        deps::ended(conn, job.seq, End::Done, now)?;
        Ok(Out::Int(1))
    })
}

/// The attempt that holds (or held, unsettled, with nobody after it) the job's lease.
fn held(conn: &Conn, id: &str, attempt: i64) -> Result<Option<(Held, String)>> {
    let mut st = conn.query(
        concat!("SELECT ", held_columns!(), ", queue FROM tinyq_jobs WHERE", settle_fence!()),
        &[&id, &attempt],
    )?;
    if !st.step()? {
        return Ok(None);
    }
    Ok(Some((Held::read(&st), st.text(6).unwrap_or_default())))
}

fn id_and_attempt(args: &[Val]) -> Result<(String, i64)> {
    Ok((options::name("id", &args[0])?, options::int("attempt", &args[1], 1, i64::MAX)?))
}

/// tq_settle(id, attempt, outcome [, value]) -> 1 applied, 0 stale
pub fn tq_settle(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() < 3 || args.len() > 4 {
        bail!("expects (id, attempt, outcome [, value])");
    }
    let (id, attempt) = id_and_attempt(args)?;
    let outcome = match parse_outcome(&args[2], args.get(3))? {
        Settle::Done(result) => return done(conn, &id, attempt, &result),
        Settle::Other(o) => o,
    };
    conn.write_tx(|| {
        let Some((job, queue)) = held(conn, &id, attempt)? else {
            return Ok(Out::Int(0));
        };
        let q = settings::load(conn, &queue)?;
        apply(conn, &job, &q, outcome, conn.now())?;
        Ok(Out::Int(1))
    })
}

/// SQL: the lease a renewal gives a job of tinyq_jobs: ?4 (NULL: the queue's `lease`, else
/// ?5, the default), for extend_lease and keep_lease alike.
macro_rules! lease_length {
    () => {
        "coalesce(?4, (SELECT lease FROM tinyq_queues WHERE name = tinyq_jobs.queue), ?5)"
    };
}

/// Extends the lease of a running attempt, never past its deadline; the new lease_until.
/// None: stop working (cancelled, taken by a later attempt, or past its timeout). No
/// RETURNING: SQLite runs it through an ephemeral table per call, which cost more than the
/// update (the helpers renew and keep steps by the thousand in one statement).
pub fn extend_lease(conn: &Conn, id: &str, attempt: i64, lease: Option<i64>) -> Result<Option<i64>> {
    let extended = conn.exec(
        concat!(
            "UPDATE tinyq_jobs
             SET lease_until = min(?3 + ",
            lease_length!(),
            ", deadline)
             WHERE",
            working_fence!(),
            "AND ?3 < deadline"
        ),
        &[&id, &attempt, &conn.now(), &lease, &settings::DEFAULT_LEASE],
    )?;
    if extended == 0 {
        return Ok(None);
    }
    conn.one_int("SELECT lease_until FROM tinyq_jobs WHERE id = ?1 AND attempt = ?2", &[&id, &attempt])
}

/// Whether the attempt still holds the job (as extend_lease), renewing its lease only once
/// less than half of it is left, when a worker would renew it. A kept step keeps its
/// attempt alive as before, while a wave of steps (a group commit keeps a thousand in one
/// statement) does not rewrite each job's row and lease index: that was a third of a put's
/// cost.
pub fn keep_lease(conn: &Conn, id: &str, attempt: i64) -> Result<bool> {
    let due = conn.one_int(
        concat!(
            "SELECT lease_until - ?3 < ",
            lease_length!(),
            " / 2 FROM tinyq_jobs WHERE",
            working_fence!(),
            "AND ?3 < deadline"
        ),
        &[&id, &attempt, &conn.now(), &None::<i64>, &settings::DEFAULT_LEASE],
    )?;
    match due {
        None => Ok(false),
        Some(0) => Ok(true),
        Some(_) => Ok(extend_lease(conn, id, attempt, None)?.is_some()),
    }
}

/// tq_renew(id, attempt [, lease]) -> new lease_until, or NULL
pub fn tq_renew(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() < 2 || args.len() > 3 {
        bail!("expects (id, attempt [, lease])");
    }
    let (id, attempt) = id_and_attempt(args)?;
    let lease = match args.get(2) {
        None | Some(Val::Null) => None,
        Some(v) => Some(time::parse_duration(v).map_err(|e| Error::bad(format!("lease: {e}")))?),
    };
    if lease == Some(0) {
        bail!("lease must be longer than 0ms");
    }
    conn.write_one(|| Ok(extend_lease(conn, &id, attempt, lease)?.map_or(Out::Null, Out::Int)))
}
