//! Workflows (DEP-01): jobs that wait for other jobs. A job added with `after`, or a running
//! job that settles `'wait'` for jobs, is `blocked` with `waits` = its dependencies not
//! finished yet, one row of tinyq_deps per dependency. When a job finishes (done, failed for
//! good, cancelled, expired), the statement that finishes it walks its own edges only: each
//! dependent counts it off (or follows its `after_failed`), and the one whose count reaches
//! zero becomes due in that same transaction (docs/design.md, "Workflows").
//!
//! A dependency that finished is kept while dependents it has are unfinished (`held`): its
//! `expires_at` stays NULL, so no sweep takes it, and it gets its window when the last of
//! them finishes.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};

use crate::options::{self, Options};
use crate::row::group_limited;
use crate::settings;
use crate::sqlite::{Conn, Error, Result};
use crate::timeline::next_event;

/// The options of tq_add that make a job wait for others.
pub const OPTIONS: &[&str] = &["after", "after_failed"];

/// Most ids one job may wait for.
pub const MAX_AFTER: usize = 100_000;

/// What a dependency that failed for good or was cancelled does to its dependent.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AfterFailed {
    Fail,
    Run,
    Cancel,
}

impl AfterFailed {
    /// As stored in tinyq_jobs.after_failed (NULL: the default, 'fail').
    fn stored(self) -> Option<&'static str> {
        match self {
            AfterFailed::Fail => None,
            AfterFailed::Run => Some("run"),
            AfterFailed::Cancel => Some("cancel"),
        }
    }

    fn from_stored(s: Option<&str>) -> AfterFailed {
        match s {
            Some("run") => AfterFailed::Run,
            Some("cancel") => AfterFailed::Cancel,
            _ => AfterFailed::Fail,
        }
    }
}

/// tq_add's `after` and `after_failed`.
pub struct After {
    pub ids: Vec<String>,
    pub on_failed: AfterFailed,
}

/// Reads `after` (a JSON array of ids) and `after_failed`; None without `after`.
pub fn parse(opts: &Options) -> Result<Option<After>> {
    let on_failed = match opts.text("after_failed")?.as_deref() {
        None | Some("fail") => AfterFailed::Fail,
        Some("run") => AfterFailed::Run,
        Some("cancel") => AfterFailed::Cancel,
        Some(other) => {
            bail!("option \"after_failed\" must be 'fail', 'run' or 'cancel', not '{}'", options::clip(other))
        }
    };
    let Some(ids) = opts.list("after")? else {
        if on_failed != AfterFailed::Fail {
            bail!("option \"after_failed\" goes with \"after\"");
        }
        return Ok(None);
    };
    Ok(Some(After { ids: checked_ids("option \"after\"", ids)?, on_failed }))
}

/// Ids to wait for: at least one, at most MAX_AFTER, duplicates folded.
pub fn checked_ids(what: &str, ids: Vec<String>) -> Result<Vec<String>> {
    if ids.is_empty() {
        bail!("{what} must name at least one job id");
    }
    if ids.len() > MAX_AFTER {
        bail!("{what} names {} ids; at most {MAX_AFTER}", ids.len());
    }
    let mut seen = HashSet::new();
    Ok(ids.into_iter().filter(|id| seen.insert(id.clone())).collect())
}

/// A dependency found in the store.
pub struct Dep {
    pub seq: i64,
    pub status: String,
}

/// The jobs named, each of which must exist (an unknown id is an error naming it).
pub fn find(conn: &Conn, what: &str, ids: &[String]) -> Result<Vec<Dep>> {
    let list = serde_json::to_string(ids).expect("text");
    let rows = conn.rows(
        "SELECT e.value, j.seq, j.status FROM json_each(?1) e LEFT JOIN tinyq_jobs j ON j.id = e.value
         WHERE j.status IS NOT 'cancelled'",
        &[&list],
        |st| (st.text(0).unwrap_or_default(), st.opt_int(1), st.text(2).unwrap_or_default()),
    )?;
    let mut deps = Vec::with_capacity(rows.len());
    for (id, seq, status) in rows {
        let Some(seq) = seq else {
            bail!("{what}: no job '{}' (a job waits only for jobs that exist)", options::clip(&id));
        };
        deps.push(Dep { seq, status });
    }
    Ok(deps)
}

/// How a job finished, for its dependents.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    Done,
    Failed,
    Cancelled,
}

/// Makes the job `seq` (new, or running) wait for `deps`: records the edges, keeps each
/// dependency for it, and returns how many it still waits for (failed ones included: the
/// caller applies their `after_failed` with `settle_failed` once the job is blocked).
pub fn link(conn: &Conn, seq: i64, deps: &[Dep]) -> Result<i64> {
    let seqs = serde_json::to_string(&deps.iter().map(|d| d.seq).collect::<Vec<_>>()).expect("integers");
    // Each new edge (or one released by an earlier finish of this job: tq_retry) holds its
    // dependency; a finished one is kept from now on (no window).
    conn.exec(
        "UPDATE tinyq_jobs SET held = coalesce(held, 0) + 1, linked = 1,
             expires_at = CASE WHEN status = 'done' OR status = 'failed' THEN NULL ELSE expires_at END
         WHERE seq IN (SELECT value FROM json_each(?1))
           AND NOT EXISTS (SELECT 1 FROM tinyq_deps WHERE dep = tinyq_jobs.seq AND job = ?2 AND resolved IS NOT 2)",
        &[&seqs, &seq],
    )?;
    conn.exec(
        "INSERT INTO tinyq_deps (dep, job, resolved)
         SELECT j.seq, ?2, CASE WHEN j.status = 'done' THEN 1 END FROM json_each(?1) e JOIN tinyq_jobs j ON j.seq = e.value
         WHERE 1 ON CONFLICT (dep, job) DO UPDATE SET resolved = excluded.resolved",
        &[&seqs, &seq],
    )?;
    conn.exec("UPDATE tinyq_jobs SET linked = 1 WHERE seq = ?1", &[&seq])?;
    Ok(deps.iter().filter(|d| d.status != "done").count() as i64)
}

/// After `link` blocked `seq`: the dependencies that had already failed for good apply its
/// `after_failed` now, as they would have when they failed.
pub fn settle_failed(conn: &Conn, seq: i64, deps: &[Dep], now: i64) -> Result<()> {
    let mut work = vec![];
    for dep in deps.iter().filter(|d| d.status == "failed") {
        conn.exec("UPDATE tinyq_deps SET resolved = 1 WHERE dep = ?1 AND job = ?2", &[&dep.seq, &seq])?;
        resolve(conn, dep.seq, End::Failed, seq, now, &mut work)?;
    }
    drain(conn, work, now)
}

/// The job `seq` finished as `how`: its dependencies may be released, its dependents follow.
/// Dependents that fail or are cancelled in turn are handled the same way, without recursion
/// (a chain of any length).
pub fn ended(conn: &Conn, seq: i64, how: End, now: i64) -> Result<()> {
    drain(conn, vec![(seq, how)], now)
}

fn drain(conn: &Conn, mut work: Vec<(i64, End)>, now: i64) -> Result<()> {
    while let Some((seq, how)) = work.pop() {
        release(conn, seq, now)?;
        let dependents =
            conn.rows("SELECT job FROM tinyq_deps WHERE dep = ?1 AND resolved IS NULL", &[&seq], |st| st.int(0))?;
        if !dependents.is_empty() {
            conn.exec("UPDATE tinyq_deps SET resolved = 1 WHERE dep = ?1 AND resolved IS NULL", &[&seq])?;
        }
        for job in dependents {
            resolve(conn, seq, how, job, now, &mut work)?;
        }
        if how == End::Cancelled {
            conn.exec("DELETE FROM tinyq_jobs WHERE seq = ?1 AND status = 'cancelled'", &[&seq])?;
        }
    }
    Ok(())
}

/// The dependencies of a job that finished each lose one holder (once per edge: the edge is
/// marked released, 2, so a job retried and finished again releases nothing twice); the last
/// one to go gives a finished dependency its window back (from its settle time, never
/// before now).
fn release(conn: &Conn, seq: i64, now: i64) -> Result<i64> {
    let n = conn.exec(
        "UPDATE tinyq_jobs SET held = nullif(held - 1, 0),
             expires_at = CASE WHEN held = 1 AND (status = 'done' OR status = 'failed') THEN
                 max(?2, settled_at + coalesce((SELECT CASE tinyq_jobs.status WHEN 'done' THEN dedupe ELSE keep END
                                                FROM tinyq_queues WHERE name = tinyq_jobs.queue),
                                               CASE status WHEN 'done' THEN ?3 ELSE ?4 END))
               ELSE expires_at END
         WHERE seq IN (SELECT dep FROM tinyq_deps WHERE job = ?1 AND resolved IS NOT 2) AND held > 0",
        &[&seq, &now, &settings::DEFAULT_DEDUPE, &settings::DEFAULT_KEEP],
    )?;
    if n > 0 {
        conn.exec("UPDATE tinyq_deps SET resolved = 2 WHERE job = ?1 AND resolved IS NOT 2", &[&seq])?;
    }
    Ok(n)
}

/// One dependent `job` learns that its dependency `dep` finished as `how`.
fn resolve(conn: &Conn, dep: i64, how: End, job: i64, now: i64, work: &mut Vec<(i64, End)>) -> Result<()> {
    let Some((waits, policy)) = conn.row(
        "SELECT waits, after_failed FROM tinyq_jobs WHERE seq = ?1 AND status = 'blocked' AND waits IS NOT NULL",
        &[&job],
        |st| (st.int(0), AfterFailed::from_stored(st.text(1).as_deref())),
    )?
    else {
        return Ok(()); // it went on by itself meanwhile (cancelled, replaced by a signal wait)
    };
    match (how, policy) {
        (End::Done, _) | (_, AfterFailed::Run) => {
            if waits > 1 {
                conn.exec("UPDATE tinyq_jobs SET waits = waits - 1 WHERE seq = ?1", &[&job])?;
            } else {
                unblock(conn, job, now)?;
            }
        }
        (_, AfterFailed::Fail) => {
            let (id, error) = conn
                .row("SELECT id, error FROM tinyq_jobs WHERE seq = ?1", &[&dep], |st| (st.text(0), st.text(1)))?
                .unwrap_or((None, None));
            let id = options::clip(&id.unwrap_or_default());
            let msg = match how {
                End::Cancelled => format!("dependency '{id}' was cancelled"),
                _ => format!("dependency '{id}' failed: {}", options::clip(&error.unwrap_or_default())),
            };
            fail(conn, job, &msg, now)?;
            work.push((job, End::Failed));
        }
        (_, AfterFailed::Cancel) => {
            conn.exec(
                concat!(
                    "UPDATE tinyq_jobs SET",
                    next_event!(),
                    ", status = 'cancelled', waits = NULL, changed_at = ?2, note = NULL WHERE seq = ?1"
                ),
                &[&job, &now],
            )?;
            work.push((job, End::Cancelled));
        }
    }
    Ok(())
}

/// A blocked job whose dependencies have all finished: due at its own time or now, whichever
/// is later (set aside in a queue with group limits, as any due grouped job).
fn unblock(conn: &Conn, job: i64, now: i64) -> Result<i64> {
    conn.exec(
        concat!(
            "UPDATE tinyq_jobs SET",
            next_event!(),
            ", waits = NULL, status = CASE WHEN run_at > ?2 THEN 'scheduled' ELSE 'queued' END,
                 run_at = max(run_at, ?2), changed_at = ?2, note = NULL,
                 parked = run_at <= ?2 AND grp IS NOT NULL AND ",
            group_limited!("tinyq_jobs.queue"),
            " WHERE seq = ?1"
        ),
        &[&job, &now],
    )
}

/// A blocked job whose dependency failed ends failed with `msg`, kept for its queue's `keep`
/// (or longer, while dependents of its own hold it).
fn fail(conn: &Conn, job: i64, msg: &str, now: i64) -> Result<i64> {
    conn.exec(
        concat!(
            "UPDATE tinyq_jobs SET",
            next_event!(),
            ", status = 'failed', waits = NULL, error = ?2, note = ?2, settled_at = ?3, changed_at = ?3,
             expires_at = CASE WHEN held IS NULL THEN ?3 + coalesce((SELECT keep FROM tinyq_queues WHERE name = tinyq_jobs.queue), ?4) END
         WHERE seq = ?1"
        ),
        &[&job, &msg, &now, &settings::DEFAULT_KEEP],
    )
}

/// The `after_failed` of a new job, as stored.
pub fn stored_policy(after: Option<&After>) -> Option<&'static str> {
    after.and_then(|a| a.on_failed.stored())
}

/// An error for an `after` that would wait for the job itself.
pub fn refuse_self(what: &str, id: &str, ids: &[String]) -> Result<()> {
    if ids.iter().any(|i| i == id) {
        return Err(Error::bad(format!("{what}: a job cannot wait for itself ('{}')", options::clip(id))));
    }
    Ok(())
}

/// What a blocked job waits for, for tq_get: `{"after": [ids not finished yet]}` or
/// `{"signal": name, "until": its timeout, or null}`.
pub fn blocked_on(conn: &Conn, seq: i64, signal: Option<String>, run_at: i64) -> Result<serde_json::Value> {
    if let Some(name) = signal {
        let until = if run_at == FOREVER { serde_json::Value::Null } else { run_at.into() };
        return Ok(serde_json::json!({"signal": name, "until": until}));
    }
    let ids = conn.rows(
        "SELECT j.id FROM tinyq_deps d JOIN tinyq_jobs j ON j.seq = d.dep WHERE d.job = ?1 AND d.resolved IS NULL ORDER BY d.dep",
        &[&seq],
        |st| st.text(0).unwrap_or_default(),
    )?;
    Ok(serde_json::json!({ "after": ids }))
}

/// The time of a signal wait without a timeout.
pub const FOREVER: i64 = i64::MAX;

/// The chain through which one of `deps` waits for the job `job`, as seqs from that
/// dependency to `job` (just `job` when it names itself), if one does: a breadth-first walk
/// up the unfinished dependencies, each job looked at once (a seek each, by
/// tinyq_deps_job), so it costs what the named jobs wait for, however long the chain.
pub fn cycle(conn: &Conn, job: i64, deps: &[Dep]) -> Result<Option<Vec<i64>>> {
    let mut from: HashMap<i64, Option<i64>> = HashMap::new();
    let mut line = VecDeque::new();
    for d in deps {
        if from.insert(d.seq, None).is_none() {
            line.push_back(d.seq);
        }
    }
    while let Some(at) = line.pop_front() {
        if at == job {
            let mut chain = vec![at];
            while let Some(Some(prev)) = from.get(chain.last().expect("one")) {
                chain.push(*prev);
            }
            chain.reverse();
            return Ok(Some(chain));
        }
        let up = conn.rows("SELECT dep FROM tinyq_deps WHERE job = ?1 AND resolved IS NULL", &[&at], |st| st.int(0))?;
        for dep in up {
            if let Entry::Vacant(e) = from.entry(dep) {
                e.insert(Some(at));
                line.push_back(dep);
            }
        }
    }
    Ok(None)
}

/// A chain of jobs as `a -> b -> c`, by id, the middle left out when it is long.
pub fn chain_ids(conn: &Conn, chain: &[i64]) -> Result<String> {
    const ENDS: usize = 4;
    let id = |seq: &i64| -> Result<String> {
        let id = conn.row("SELECT id FROM tinyq_jobs WHERE seq = ?1", &[seq], |st| st.text(0))?;
        Ok(options::clip(&id.flatten().unwrap_or_default()))
    };
    if chain.len() <= 2 * ENDS + 1 {
        return Ok(chain.iter().map(id).collect::<Result<Vec<_>>>()?.join(" -> "));
    }
    let head = chain[..ENDS].iter().map(id).collect::<Result<Vec<_>>>()?.join(" -> ");
    let tail = chain[chain.len() - ENDS..].iter().map(id).collect::<Result<Vec<_>>>()?.join(" -> ");
    Ok(format!("{head} -> ({} more) -> {tail}", chain.len() - 2 * ENDS))
}
