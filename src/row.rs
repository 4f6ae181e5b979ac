//! The job row: the `Row` that tq_add and a schedule insert, its INSERT, and the SQL test
//! for a queue with group limits that every writer of a due job asks.

use crate::sqlite::Val;

/// What tq_add does when the id is present (keys.rs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OnConflict {
    Keep,
    Replace,
    Debounce { max_wait: Option<i64> },
}

/// SQL: does queue `$queue` have group limits, so that a due grouped job is set aside until
/// its group promotes it? The SQL twin of `Settings::has_group_limits`, for statements that
/// must stay one statement (tq_add from a trigger) or do not know the queue's settings.
macro_rules! group_limited {
    ($queue:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM tinyq_queues WHERE name = ",
            $queue,
            " AND (group_concurrency IS NOT NULL OR group_rate_n IS NOT NULL))"
        )
    };
}
pub(crate) use group_limited;

/// SQL: the INSERT of a new job (?1 id, ?2 queue, ?3 status, ?4 group, ?5 priority, ?6 run_at,
/// ?7 budget, ?8 payload, ?9 meta, ?10 now, ?11 start_by, ?12 slot, ?14 waits, ?15
/// after_failed), before its ON CONFLICT (keys.rs).
macro_rules! insert_job {
    () => {
        concat!(
            "INSERT INTO tinyq_jobs (id, queue, status, grp, priority, run_at, budget, payload, meta, created_at, changed_at, attempt, parked, start_by, slot, waits, after_failed, last_event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10,
                     -- attempts continue after those of the id's earlier jobs (JOB-05, marks.rs)
                     CASE WHEN ?12 IS NULL THEN 0 ELSE coalesce((SELECT attempt FROM tinyq_marks WHERE slot = ?12), 0) END,
                     -- set aside until its group promotes it (limits/groups.rs)
                     CASE WHEN ?4 IS NOT NULL AND ?3 = 'queued' THEN ",
            $crate::row::group_limited!("?2"),
            " ELSE 0 END, ?11, ?12, ?14, ?15,
                     -- the seq of its first event (timeline.rs): one row, so computed once
                     ifnull((SELECT seq FROM tinyq_events ORDER BY seq DESC LIMIT 1), 0) + 1)"
        )
    };
}
pub(crate) use insert_job;

/// One job to add: what tq_add and a schedule's due time (src/schedule/) both insert.
pub struct Row<'a> {
    pub id: &'a str,
    pub queue: &'a str,
    pub group: &'a Option<String>,
    pub priority: i64,
    pub run_at: i64,
    pub budget: Option<i64>,
    pub payload: &'a Val,
    pub meta: &'a Option<String>,
    /// tq_add's `expires` (expiry.rs).
    pub start_by: Option<i64>,
    /// What a present id does (keys.rs).
    pub on_conflict: OnConflict,
    /// Blocked on this many unfinished dependencies (workflows/deps.rs); None: not blocked.
    pub waits: Option<i64>,
    /// tq_add's `after_failed`, as stored (NULL: 'fail').
    pub after_failed: Option<&'static str>,
}
