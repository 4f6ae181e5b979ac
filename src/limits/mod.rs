//! The limits of LIM-02, kept as counters so that a claim's cost does not grow with the
//! queue (COST-01): `counts` (the queue's counters, tinyq_counts), `groups` (set-aside
//! jobs and per-group counters, tinyq_groups) and `windows` (the rate windows over the
//! starts log, tinyq_starts). Each module writes its own table; `rebuild` starts all three
//! again after a change of the queue's limits.

pub(crate) mod counts;
pub(crate) mod groups;
pub(crate) mod windows;

use crate::settings::Settings;
use crate::sqlite::{Conn, Result};

/// After a change of the queue's rate or group settings (tq_queue), or on the first claim
/// of a store migrated from before the groups were counted: the counters start again from
/// the log, the groups are counted anew, and the windows slid to `now`.
pub fn rebuild(conn: &Conn, q: &Settings, now: i64) -> Result<()> {
    counts::reset_windows(conn, &q.name)?;
    if let Some(gedge) = groups::rebuild(conn, q, now)? {
        counts::set_groups_built(conn, &q.name, gedge)?;
    }
    windows::slide(conn, q, now)?;
    Ok(())
}
