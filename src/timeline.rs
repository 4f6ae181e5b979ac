//! A job's timeline (tq_watch's `job` filter) without a scan of the event log (schema 7).
//!
//! Each job's events are a chain, newest first: `tinyq_jobs.last_event` is the seq of the
//! job's latest event, `tinyq_events.prev` that of the same job's event before it. The
//! event triggers (sql/store.sql) write `prev` from the job's old `last_event`; the statement
//! that changes the job sets its new `last_event` to the seq its event is about to get
//! (`next_event!`): SQLite gives a new row of tinyq_events the largest seq plus one, and
//! fires a row's triggers right after writing that row, so this holds row by row even in a
//! statement that changes many jobs. Every statement that logs an event sets it (tests check
//! the chains after every path: tests/test_watch.py). Measured against the alternatives
//! (docs/design.md, "A job's timeline"): an index of the log by job costs each event a b-tree
//! insert, the trigger writing `last_event` after its insert a second write of the job row.

use crate::sqlite::Conn;
use crate::sqlite::{Result, Val};

/// SQL, in a `SET` of an UPDATE of tinyq_jobs that logs an event: the seq that event gets,
/// and `grp = grp`, which makes the triggers of a line and of a group fire
/// (tinyq_jobs_lined, tinyq_jobs_grouped: `UPDATE OF grp`, schema 9). The reference to the
/// row being updated makes the subquery run for each row (an uncorrelated one is computed
/// once per statement); `seq + 0`, as SQLite folds `seq IS NOT NULL` (a rowid) to true, and
/// the subquery with it.
macro_rules! next_event {
    () => {
        concat!($crate::timeline::next_event_ungrouped!(), ", grp = tinyq_jobs.grp ")
    };
}
pub(crate) use next_event;

/// `next_event!` without `grp = grp`: for a statement that moves no job into or out of a
/// line and no grouped job (an ungrouped job's done from running, a progress), or that
/// names `grp` itself (a replace, keys.rs). It fires neither trigger, whose programs SQLite
/// would start for each row before testing their WHEN.
macro_rules! next_event_ungrouped {
    () => {
        concat!(" last_event = ", $crate::timeline::next_seq!(), " ")
    };
}
pub(crate) use next_event_ungrouped;

/// `next_event!` for a statement that logs an event only when `$changes` (SQL over the row's
/// old values) holds: the event triggers fire for a change of status or attempt alone, and a
/// `last_event` set without its event would point at another job's (a late settle of a job
/// back in line that leaves it waiting: held.rs).
macro_rules! next_event_when {
    ($changes:literal) => {
        concat!(
            " last_event = CASE WHEN ",
            $changes,
            " THEN ",
            $crate::timeline::next_seq!(),
            " ELSE last_event END, grp = tinyq_jobs.grp "
        )
    };
}
pub(crate) use next_event_when;

/// SQL: the seq the next row of tinyq_events gets (see `next_event!`).
macro_rules! next_seq {
    () => {
        "ifnull((SELECT seq FROM tinyq_events WHERE tinyq_jobs.seq + 0 IS NOT NULL ORDER BY seq DESC LIMIT 1), 0) + 1"
    };
}
pub(crate) use next_seq;

/// The columns of a tq_watch row, then `prev`.
const EVENT: &str = "SELECT seq, id, queue, state, attempt, at, detail, prev FROM tinyq_events WHERE seq = ?1";

/// The events of the job `id` after `since` (of queue `queue`, if given), oldest first, read
/// along its chain; None when no job has that id (one that is gone: the caller scans).
pub fn events(conn: &Conn, id: &str, since: i64, queue: Option<&str>) -> Result<Option<Vec<Vec<Val>>>> {
    let Some(head) = conn.row("SELECT last_event FROM tinyq_jobs WHERE id = ?1", &[&id], |st| st.opt_int(0))? else {
        return Ok(None);
    };
    let mut rows = vec![];
    let mut next = head;
    while let Some(seq) = next.filter(|seq| *seq > since) {
        let mut st = conn.query(EVENT, &[&seq])?;
        // The chain ends where its events were swept (oldest first), or at the job's first.
        if !st.step()? || st.text(1).as_deref() != Some(id) {
            break;
        }
        next = st.opt_int(7).filter(|prev| *prev < seq);
        if queue.is_none_or(|q| st.text(2).as_deref() == Some(q)) {
            rows.push((0..7).map(|i| st.val(i)).collect());
        }
    }
    rows.reverse();
    Ok(Some(rows))
}
