//! Claiming: in one write transaction, end what has ended (dead holders, expired leases,
//! timeouts), make scheduled jobs due, count the limits, and lease the next jobs in order.

use std::collections::HashMap;

use crate::held::{self, Held};
use crate::limits::counts::{self, Counts};
use crate::limits::groups::{self, Place};
use crate::limits::{self, windows};
use crate::options::{self, Options};
use crate::schedule;
use crate::settings::{self, Settings};
use crate::settle::{self, Outcome};
use crate::sqlite::{Bind, Conn};
use crate::sqlite::{Result, Val};
use crate::timeline::next_event;
use crate::workflows::signals;
use crate::{expiry, holders, sweep, wal};

/// Most jobs one claim may take.
pub const MAX_BATCH: i64 = 1000;
/// Rows of expired data each claim removes on the way (RET-01: an unattended store stays
/// bounded): more than a claim of n jobs leaves behind (each job ends with about 4 rows).
fn sweep_budget(n: i64) -> i64 {
    16 + 4 * n
}

/// One claimed job, as tq_claim returns it.
pub struct Claimed {
    pub id: String,
    pub attempt: i64,
    pub payload: Val,
    pub group: Option<String>,
    pub lease_until: i64,
    pub deadline: i64,
    pub meta: Val,
}

/// The checked arguments of tq_claim(queue, worker, n [, options]).
pub struct Request {
    queue: String,
    worker: String,
    n: i64,
    lease: Option<i64>,
}

pub fn parse(args: &[Val]) -> Result<Request> {
    let opts = Options::parse(args.get(3), &["lease"])?;
    let req = Request {
        queue: options::name("queue", &args[0])?,
        worker: options::name("worker", &args[1])?,
        n: options::int("n", &args[2], 1, MAX_BATCH)?,
        lease: opts.duration("lease")?,
    };
    if req.lease == Some(0) {
        bail!("option \"lease\" must be longer than 0ms");
    }
    Ok(req)
}

impl Request {
    /// Claims at most `most` jobs: the statement returns no more (its LIMIT).
    pub fn cap(&mut self, most: i64) {
        self.n = self.n.min(most);
    }
}

/// Jobs a claim leased whose rows its statement never reached (it stopped early: a LIMIT
/// SQLite could not pass to tq_claim, an error in a later column) go back in line at their
/// place, their try given back. Their attempt number stays used: the next claim opens the
/// next one. The start stays counted in the rate window, as for a snoozed job.
pub fn give_back(conn: &Conn, queue: &str, jobs: &[(String, i64)]) -> Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    conn.write_tx(|| {
        let q = settings::load(conn, queue)?;
        let now = conn.now();
        for (id, attempt) in jobs {
            conn.exec(
                concat!(
                    "UPDATE tinyq_jobs SET",
                    next_event!(),
                    ", status = 'queued', tries = tries - 1, lease_until = NULL, deadline = NULL,
                         holder = NULL, changed_at = ?3, note = 'not returned', parked = (?4 AND grp IS NOT NULL)
                     WHERE",
                    settle::working_fence!()
                ),
                &[id, attempt, &now, &q.has_group_limits()],
            )?;
        }
        Ok(())
    })
}

/// Claims on `conn`, in one write transaction.
pub fn run(conn: &Conn, req: &Request) -> Result<Vec<Claimed>> {
    let Request { queue, worker, n, lease } = req;
    let (n, lease) = (*n, *lease);
    wal::before_claim(conn);
    conn.write_tx(|| {
        let now = conn.now();
        schedule::add_due(conn, queue, now)?; // CRON-01: due times become jobs first
        let q = settings::load(conn, queue)?;
        let look = Pending::probe(conn, &q, now)?;
        if look.other_holders {
            holders::recover(conn, &q, now)?;
        }
        if look.expired {
            end_expired(conn, &q, now)?;
        }
        if look.past_bound {
            expiry::end_expired(conn, &q, now)?; // EXP-01: before they could come due or be taken
        }
        if look.due {
            make_due(conn, &q, now)?;
        }
        if look.timed_out {
            signals::end_timeouts(conn, &q, now)?; // SIG-01: a wait past its timeout runs again
        }
        sweep::in_turn(conn, &q, now, sweep_budget(n))?;
        if q.paused {
            return Ok(vec![]);
        }
        if q.has_group_limits() && !counts::load(conn, &q.name)?.groups_built() {
            limits::rebuild(conn, &q, now)?; // a store migrated from an older schema
        }
        let used = windows::slide(conn, &q, now)?;
        groups::refill_dirty(conn, &q, now)?;
        let picked = plan(conn, &q, &used, now, n)?;
        let taken = take(conn, &q, picked, worker, lease.unwrap_or(q.lease()), now)?;
        // The groups just taken from get their next head in this same transaction.
        groups::refill_dirty(conn, &q, now)?;
        Ok(taken)
    })
}

/// What a claim may have to end or move before it plans, found with one query so that a
/// claim with nothing to do runs one statement instead of three.
#[allow(clippy::struct_excessive_bools)] // independent findings of one query, each read once
pub struct Pending {
    /// Other processes hold live leases here (they may be dead: DUR-02).
    pub other_holders: bool,
    /// Leases that ran out.
    pub expired: bool,
    /// Scheduled jobs whose time has come, or groups whose next head is not promoted yet.
    pub due: bool,
    /// Waiting or scheduled jobs past their `expires` (EXP-01).
    pub past_bound: bool,
    /// Signal waits past their timeout (SIG-01).
    pub timed_out: bool,
}

impl Pending {
    pub fn probe(conn: &Conn, q: &Settings, now: i64) -> Result<Pending> {
        let mut st = conn.query(
            // Leases of other processes are looked for only when another process is known:
            // the walk over live leases is then the only step that grows with them.
            concat!("SELECT CASE WHEN EXISTS (SELECT 1 FROM tinyq_holders WHERE id IS NOT ?3) THEN
                      EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until > ?2
                                                       AND holder IS NOT NULL AND holder IS NOT ?3) ELSE 0 END,
                    EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until <= ?2),
                    EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?2),
                    ?4 AND EXISTS (SELECT 1 FROM tinyq_groups INDEXED BY tinyq_groups_dirty WHERE dirty = 1 AND queue = ?1), ",
                expiry::past_bound!(),
                ", ",
                signals::timed_out!()
            ),
            &[&q.name, &now, &conn.holder.get(), &q.has_group_limits()],
        )?;
        st.step()?;
        Ok(Pending {
            other_holders: st.int(0) != 0,
            expired: st.int(1) != 0,
            due: st.int(2) != 0 || st.int(3) != 0,
            past_bound: st.int(4) != 0,
            timed_out: st.int(5) != 0,
        })
    }
}

/// Leases that ran out: the job waits again, or ends as a timeout, or fails for good.
fn end_expired(conn: &Conn, q: &Settings, now: i64) -> Result<()> {
    let ended = conn.rows(
        concat!(
            "SELECT ",
            held::held_columns!(),
            ", lease_until >= deadline FROM tinyq_jobs
             WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until <= ?2"
        ),
        &[&q.name, &now],
        |st| (Held::read(st), st.int(6) != 0),
    )?;
    for (job, timed_out) in ended {
        let outcome = if timed_out { Outcome::Error("timeout".into()) } else { Outcome::LeaseExpired { died: false } };
        settle::apply(conn, &job, q, outcome, now)?;
    }
    Ok(())
}

/// Scheduled jobs whose time has come join the due jobs (their event is dated run_at);
/// in a queue with group limits a grouped one is set aside until its group promotes it.
fn make_due(conn: &Conn, q: &Settings, now: i64) -> Result<()> {
    conn.exec(
        concat!(
            "UPDATE tinyq_jobs SET",
            next_event!(),
            ", status = 'queued', changed_at = run_at, note = NULL, parked = (?3 AND grp IS NOT NULL)
         WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?2"
        ),
        &[&q.name, &now, &q.has_group_limits()],
    )?;
    Ok(())
}

/// Room left under the queue's own limits, from its counters (no count over jobs).
fn room(q: &Settings, used: &Counts, n: i64) -> i64 {
    let mut total = n;
    if let Some(c) = q.concurrency {
        total = total.min(c - used.running);
    }
    if let Some((limit, _)) = q.rate {
        total = total.min(limit - used.started);
    }
    total
}

/// A due job chosen by `plan`, read under the claim's write lock.
pub struct Picked {
    seq: i64,
    id: String,
    attempt: i64,
    payload: Val,
    group: Option<String>,
    meta: Val,
}

/// The due jobs to take, in order (JOB-01), within every limit. The walk sees only jobs
/// that may start (ungrouped ones and the heads of groups with room: see limits/groups.rs), so
/// jobs set aside in full groups cost it nothing (LIM-02, COST-01). When a group has room
/// for more than its head, its next jobs are merged into the walk, in order.
pub fn plan(conn: &Conn, q: &Settings, used: &Counts, now: i64, n: i64) -> Result<Vec<Picked>> {
    let total = room(q, used, n);
    let mut picked = vec![];
    if total <= 0 {
        return Ok(picked);
    }
    let limited = q.has_group_limits();
    let mut usage: HashMap<String, (i64, i64)> = HashMap::new();
    // The groups' next jobs, each with its place in line (at most one per group).
    let mut followers: Vec<(Place, String)> = vec![];
    let mut st = conn.query(
        // seq, grp and the place come from the index; the row itself is read only when picked.
        // A group's head comes even when not due (a clock stepped back): see below.
        "SELECT seq, grp, priority, run_at, id, attempt, payload, meta FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND parked = 0
           AND (run_at <= ?2 OR ?3 AND grp IS NOT NULL)
         ORDER BY priority DESC, run_at, seq",
        &[&q.name, &now, &limited],
    )?;
    // The walk's next row; no row to pick for a head not due (see below).
    let mut walk: Option<(Place, Option<String>, Option<Picked>)> = None;
    let mut walk_done = false;
    while (picked.len() as i64) < total {
        if walk.is_none() && !walk_done {
            if st.step()? {
                let (seq, group) = (st.int(0), st.text(1));
                let due = st.int(3) <= now;
                let row = due.then(|| Picked {
                    seq,
                    id: st.text(4).unwrap_or_default(),
                    attempt: st.int(5),
                    payload: st.val(6),
                    group: group.clone(),
                    meta: st.val(7),
                });
                walk = Some((Place::new(st.int(2), st.int(3), seq), group, row));
            } else {
                walk_done = true;
            }
        }
        let best_follower = followers.iter().enumerate().min_by_key(|(_, f)| f.0).map(|(i, f)| (i, f.0));
        let follower_first = match (&walk, best_follower) {
            (None, None) => break,
            (Some((p, _, _)), Some((_, fp))) => fp < *p,
            (None, Some(_)) => true,
            (Some(_), None) => false,
        };
        let (place, group, row) = if follower_first {
            let (i, _) = best_follower.expect("follower");
            let (place, g) = followers.swap_remove(i);
            (place, Some(g), None)
        } else {
            match walk.take().expect("walk") {
                (place, group, Some(row)) => (place, group, Some(row)),
                (_, group, None) => {
                    // A head dated ahead of a clock stepped back holds back no due job of its
                    // group: the group's first due job joins the merge in its place. (In
                    // claim order that job comes after the head: it was not due, or it would
                    // have been the head, unless the clock stepped back more than once.) Its
                    // group's room is looked at when it comes out of the merge.
                    let g = group.expect("only heads come not due");
                    if let Some(first) = groups::next_parked(conn, &q.name, &g, None, now)? {
                        followers.push((first, g));
                    }
                    continue;
                }
            }
        };
        if let (true, Some(g)) = (limited, &group) {
            let u = group_usage(conn, q, &mut usage, g)?;
            if !groups::has_room(q, u.0, u.1) {
                continue; // a head promoted before its group filled (not expected: defensive)
            }
            u.0 += 1;
            u.1 += 1;
            if groups::has_room(q, u.0, u.1) {
                if let Some(next) = groups::next_parked(conn, &q.name, g, Some(place), now)? {
                    followers.push((next, g.clone()));
                }
            }
        }
        picked.push(match row {
            Some(row) => row,
            None => read_picked(conn, place.seq, group)?,
        });
    }
    Ok(picked)
}

/// A group's (running, started) as the plan counts them, read once per plan.
fn group_usage<'a>(
    conn: &Conn,
    q: &Settings,
    usage: &'a mut HashMap<String, (i64, i64)>,
    g: &str,
) -> Result<&'a mut (i64, i64)> {
    if !usage.contains_key(g) {
        let u = conn
            .row("SELECT running, started FROM tinyq_groups WHERE queue = ?1 AND grp = ?2", &[&q.name, &g], |st| {
                (st.int(0), st.int(1))
            })?
            .unwrap_or((0, 0));
        usage.insert(g.to_owned(), u);
    }
    Ok(usage.get_mut(g).expect("usage"))
}

fn read_picked(conn: &Conn, seq: i64, group: Option<String>) -> Result<Picked> {
    let mut st = conn.query("SELECT id, attempt, payload, meta FROM tinyq_jobs WHERE seq = ?1", &[&seq])?;
    st.step()?;
    Ok(Picked {
        seq,
        id: st.text(0).unwrap_or_default(),
        attempt: st.int(1),
        payload: st.val(2),
        group,
        meta: st.val(3),
    })
}

/// The UPDATE that leases jobs: ?2 lease_until, ?3 deadline, ?4 now, ?5 worker, ?6 holder.
macro_rules! lease_where {
    ($which:literal) => {
        concat!(
            "UPDATE tinyq_jobs SET",
            next_event!(),
            ", status = 'running', attempt = attempt + 1, tries = tries + 1,
                 lease_until = ?2, deadline = ?3, started_at = ?4, worker = ?5, holder = ?6,
                 changed_at = ?4, note = ?5, expires_at = NULL, parked = 0
             WHERE ",
            $which
        )
    };
}

/// Leases the picked jobs: each claim is a new attempt, charged now (JOB-03). No RETURNING:
/// the plan has read what is returned, and SQLite runs RETURNING (like a list of keys)
/// through a temporary b-tree, which costs more than a lone job's whole UPDATE. So one job
/// is taken by its key, several in one statement over the list.
fn take(conn: &Conn, q: &Settings, picked: Vec<Picked>, worker: &str, lease: i64, now: i64) -> Result<Vec<Claimed>> {
    if picked.is_empty() {
        return Ok(vec![]);
    }
    let holder = holders::mine(conn, now)?;
    let deadline = now + q.timeout();
    let lease_until = (now + lease).min(deadline);
    let lease = [&lease_until as &dyn Bind, &deadline, &now, &worker, &holder];
    if let [job] = &picked[..] {
        conn.exec(lease_where!("seq = ?1"), &[&[&job.seq as &dyn Bind], &lease[..]].concat())?;
    } else {
        let seqs = serde_json::to_string(&picked.iter().map(|p| p.seq).collect::<Vec<_>>()).expect("integers");
        conn.exec(
            lease_where!("seq IN (SELECT value FROM json_each(?1))"),
            &[&[&seqs as &dyn Bind], &lease[..]].concat(),
        )?;
    }
    let groups: Vec<Option<String>> = picked.iter().map(|p| p.group.clone()).collect();
    windows::count_in(conn, q, &groups, now)?;
    let mut out = Vec::with_capacity(picked.len());
    for job in picked {
        out.push(Claimed {
            id: job.id,
            attempt: job.attempt + 1,
            payload: job.payload,
            group: job.group,
            lease_until,
            deadline,
            meta: job.meta,
        });
    }
    Ok(out)
}
