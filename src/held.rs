//! A held job: the fields of a running job that its ending reads, and the way back to
//! waiting that settle, waits and claims share.

use crate::settings::Settings;
use crate::sqlite::{Conn, Result, Stmt, Val};
use crate::timeline::next_event_when;

/// The job fields an ending needs.
pub struct Held {
    pub seq: i64,
    pub attempt: i64,
    pub tries: i64,
    pub budget: Option<i64>,
    /// Its `expires` (EXP-01): it never runs again at or after it.
    pub start_by: Option<i64>,
    /// It is in a workflow (tinyq_deps): its ending is told to its dependencies and dependents.
    pub linked: bool,
}

/// SQL: the columns of tinyq_jobs that `Held::read` reads, first in a SELECT.
macro_rules! held_columns {
    () => {
        "seq, attempt, tries, budget, start_by, linked"
    };
}
pub(crate) use held_columns;

impl Held {
    /// Reads a row whose first columns are `held_columns!()`.
    pub fn read(st: &Stmt) -> Held {
        Held {
            seq: st.int(0),
            attempt: st.int(1),
            tries: st.int(2),
            budget: st.opt_int(3),
            start_by: st.opt_int(4),
            linked: st.opt_int(5).is_some(),
        }
    }
}

/// Waits again until `run_at`, with `tries` charged so far. Due at once in a queue with
/// group limits, a grouped job is set aside until its group promotes it (limits/groups.rs).
#[allow(clippy::too_many_arguments)]
pub fn again(
    conn: &Conn,
    q: &Settings,
    seq: i64,
    tries: i64,
    run_at: i64,
    error: Option<&str>,
    note: Val,
    now: i64,
) -> Result<i64> {
    conn.exec(
        concat!(
            "UPDATE tinyq_jobs SET",
            // A job back in line (its lease ran out, JOB-05) that a late settle leaves waiting
            // changes no status: no event, so its timeline's head stays.
            next_event_when!("status IS NOT CASE WHEN ?3 > ?6 THEN 'scheduled' ELSE 'queued' END"),
            ", status = CASE WHEN ?3 > ?6 THEN 'scheduled' ELSE 'queued' END,
             tries = ?2, run_at = ?3, error = coalesce(?4, error), note = ?5, changed_at = ?6,
             lease_until = NULL, deadline = NULL, holder = NULL, expires_at = NULL,
             parked = (?7 AND ?3 <= ?6 AND grp IS NOT NULL)
         WHERE seq = ?1"
        ),
        &[&seq, &tries, &run_at, &error, &note, &now, &q.has_group_limits()],
    )
}
