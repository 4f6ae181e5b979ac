//! Expiry (EXP-01): a job that has not started by its `expires` (tq_add) never starts; it
//! ends `failed` with the error `expired`. The bound is kept in tinyq_jobs.start_by, through
//! retries and snoozes, and is met in two places:
//! - a claim ends its queue's waiting, scheduled and blocked jobs past it before it plans
//!   (a job blocked on jobs or a signal ends at its bound too, and its dependents follow),
//!   found through tinyq_jobs_expiring (only jobs with a bound, while they wait or are
//!   blocked; named in each
//!   statement, so that no plan can walk the line instead), so that while nothing expires a
//!   claim pays one empty seek in its probe (claim.rs, Pending);
//! - an attempt whose job would run again at or after it (an error's backoff, a retry, a
//!   snooze, a lease that ran out) ends the job there instead (settle.rs).
//!
//! A running attempt is not interrupted: the bound only stops attempts from starting.

use crate::options::{Moment, Options};
use crate::settings::Settings;
use crate::sqlite::{Conn, Result};
use crate::timeline::next_event;
use crate::workflows::deps::{self, End};

/// The error of an expired job.
pub const ERROR: &str = "expired";

/// The option of tq_add that sets the bound.
pub const OPTIONS: &[&str] = &["expires"];

/// tq_add's `expires`: a time, or a duration from the add.
pub fn parse(opts: &Options) -> Result<Option<Moment>> {
    opts.moment("expires")
}

/// The bound of a job added at `now` to run at `run_at`: an error when no attempt could
/// ever start before it.
pub fn bound(expires: Option<&Moment>, run_at: i64, now: i64) -> Result<Option<i64>> {
    let start_by = match expires {
        None => return Ok(None),
        Some(Moment::At(t)) => *t,
        Some(Moment::After(d)) => now + d,
    };
    if start_by <= run_at {
        bail!(
            "option \"expires\" ({start_by}) is not after the job's time ({run_at}): it could never start (a duration from now is text, like '10m'; a number is a time in ms)"
        );
    }
    Ok(Some(start_by))
}

/// Would a job bound by `start_by`, waiting again until `run_at`, start too late?
pub fn too_late(start_by: Option<i64>, run_at: i64) -> bool {
    start_by.is_some_and(|t| run_at >= t)
}

/// Ends every waiting, scheduled or blocked job of the queue past its bound, in one statement: failed
/// with the error `expired`, dated at its bound (or its last change, if later), kept for the
/// queue's `keep`. The triggers log each one's event and count it. A lease that ran out
/// unsettled goes (JOB-05: the job has ended, that attempt's late calls change nothing).
/// Workflows (DEP-01): the dependents of these jobs follow their `after_failed` here, as
/// those of any job that fails for good, and one that others wait for is kept for them; a
/// blocked one lets its own dependencies go and leaves its signal wait (no longer woken).
pub fn end_expired(conn: &Conn, q: &Settings, now: i64) -> Result<()> {
    let linked = conn.rows(
        "SELECT seq FROM tinyq_jobs INDEXED BY tinyq_jobs_expiring
         WHERE (status = 'scheduled' OR status = 'queued' OR status = 'blocked') AND queue = ?1 AND start_by <= ?2 AND linked IS NOT NULL",
        &[&q.name, &now],
        |st| st.int(0),
    )?;
    conn.exec(
        concat!(
            "UPDATE tinyq_jobs INDEXED BY tinyq_jobs_expiring SET",
            next_event!(),
            ", status = 'failed', error = ?4, note = ?4, holder = NULL, lease_until = NULL, parked = 0,
             waits = NULL, signal = NULL,
             settled_at = max(start_by, changed_at), changed_at = max(start_by, changed_at),
             expires_at = CASE WHEN held IS NULL THEN max(start_by, changed_at) + ?3 END
         WHERE (status = 'scheduled' OR status = 'queued' OR status = 'blocked') AND queue = ?1 AND start_by <= ?2"
        ),
        &[&q.name, &now, &q.keep(), &ERROR],
    )?;
    for seq in linked {
        deps::ended(conn, seq, End::Failed, now)?;
    }
    Ok(())
}

/// SQL, for the claim's probe (?1 the queue, ?2 now): is a job of the queue past its bound
/// and not yet ended? One seek in tinyq_jobs_expiring.
macro_rules! past_bound {
    () => {
        "EXISTS (SELECT 1 FROM tinyq_jobs INDEXED BY tinyq_jobs_expiring WHERE (status = 'scheduled' OR status = 'queued' OR status = 'blocked') AND queue = ?1 AND start_by <= ?2)"
    };
}
pub(crate) use past_bound;

/// The next time a job of the queue reaches its bound (tq_wait wakes then, so that a
/// waiting worker's claim ends it on time).
pub fn next_bound(conn: &Conn, queue: &str, now: i64) -> Result<Option<i64>> {
    conn.one_int(
        "SELECT min(start_by) FROM tinyq_jobs INDEXED BY tinyq_jobs_expiring WHERE (status = 'scheduled' OR status = 'queued' OR status = 'blocked') AND queue = ?1 AND start_by > ?2",
        &[&queue, &now],
    )
}
