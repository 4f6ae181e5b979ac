//! Claiming: in one write transaction, end what has ended (dead holders, expired leases,
//! timeouts), make scheduled jobs due, count the limits, and lease the next jobs in order.

use std::collections::HashMap;

use crate::conn::{Bind, Conn};
use crate::ffi::{Result, Val};
use crate::options::{self, Options};
use crate::queues::{self, Settings};
use crate::settle::{self, Held, Outcome};
use crate::{holders, schedules, sweep, wal};

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

/// Claims on `conn`, in one write transaction.
pub fn run(conn: &Conn, req: &Request) -> Result<Vec<Claimed>> {
    let Request { queue, worker, n, lease } = req;
    let (n, lease) = (*n, *lease);
    wal::before_claim(conn);
    conn.write_tx(|| {
        let now = conn.now();
        schedules::add_due(conn, queue, now)?; // CRON-01: due times become jobs first
        let q = queues::load(conn, queue)?;
        let look = Pending::probe(conn, &q, now)?;
        if look.other_holders {
            holders::recover(conn, &q, now)?;
        }
        if look.expired {
            end_expired(conn, &q, now)?;
        }
        if look.due {
            make_due(conn, queue, now)?;
        }
        sweep::in_turn(conn, &q, now, sweep_budget(n))?;
        if q.paused {
            return Ok(vec![]);
        }
        let picked = plan(conn, &q, now, n)?;
        take(conn, &q, picked, worker, lease.unwrap_or(q.lease()), now)
    })
}

/// What a claim may have to end or move before it plans, found with one query so that a
/// claim with nothing to do runs one statement instead of three.
pub struct Pending {
    /// Other processes hold live leases here (they may be dead: DUR-02).
    pub other_holders: bool,
    /// Leases that ran out.
    pub expired: bool,
    /// Scheduled jobs whose time has come.
    pub due: bool,
}

impl Pending {
    pub fn probe(conn: &Conn, q: &Settings, now: i64) -> Result<Pending> {
        let mut st = conn.query(
            "SELECT EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until > ?2
                                                       AND holder IS NOT NULL AND holder IS NOT ?3),
                    EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until <= ?2),
                    EXISTS (SELECT 1 FROM tinyq_jobs WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?2)",
            &[&q.name, &now, &conn.holder.get()],
        )?;
        st.step()?;
        Ok(Pending { other_holders: st.int(0) != 0, expired: st.int(1) != 0, due: st.int(2) != 0 })
    }
}

/// Leases that ran out: the job waits again, or ends as a timeout, or fails for good.
fn end_expired(conn: &Conn, q: &Settings, now: i64) -> Result<()> {
    let mut st = conn.query(
        "SELECT seq, attempt, tries, budget, lease_until >= deadline FROM tinyq_jobs
         WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until <= ?2",
        &[&q.name, &now],
    )?;
    let mut ended = vec![];
    while st.step()? {
        let job = Held { seq: st.int(0), attempt: st.int(1), tries: st.int(2), budget: st.opt_int(3) };
        ended.push((job, st.int(4) != 0));
    }
    drop(st);
    for (job, timed_out) in ended {
        let outcome = if timed_out { Outcome::Error("timeout".into()) } else { Outcome::LeaseExpired { died: false } };
        settle::apply(conn, &job, q, outcome, now)?;
    }
    Ok(())
}

/// Scheduled jobs whose time has come join the due jobs (their event is dated run_at).
fn make_due(conn: &Conn, queue: &str, now: i64) -> Result<()> {
    conn.exec(
        "UPDATE tinyq_jobs SET status = 'queued', changed_at = run_at, note = NULL
         WHERE status = 'scheduled' AND queue = ?1 AND run_at <= ?2",
        &[&queue, &now],
    )?;
    Ok(())
}

/// Room left under the queue's limits, and per-group usage when groups have limits.
struct Room {
    total: i64,
    groups: Option<HashMap<String, (i64, i64)>>, // group -> (live leases, starts in window)
}

fn room(conn: &Conn, q: &Settings, now: i64, n: i64) -> Result<Room> {
    let mut total = n;
    if let Some(c) = q.concurrency {
        let live = conn.one_int(
            "SELECT count(*) FROM tinyq_jobs WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until > ?2",
            &[&q.name, &now],
        )?;
        total = total.min(c - live.unwrap_or(0));
    }
    if let Some((limit, window)) = q.rate {
        let started = conn
            .one_int("SELECT count(*) FROM tinyq_starts WHERE queue = ?1 AND at > ?2", &[&q.name, &(now - window)])?;
        total = total.min(limit - started.unwrap_or(0));
    }
    let mut groups = None;
    if q.has_group_limits() && total > 0 {
        let mut usage: HashMap<String, (i64, i64)> = HashMap::new();
        if q.group_concurrency.is_some() {
            let mut st = conn.query(
                "SELECT grp, count(*) FROM tinyq_jobs
                 WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until > ?2 AND grp IS NOT NULL GROUP BY grp",
                &[&q.name, &now],
            )?;
            while st.step()? {
                usage.entry(st.text(0).unwrap_or_default()).or_default().0 = st.int(1);
            }
        }
        if let Some((_, window)) = q.group_rate {
            let mut st = conn.query(
                "SELECT grp, count(*) FROM tinyq_starts
                 WHERE queue = ?1 AND at > ?2 AND grp IS NOT NULL GROUP BY grp",
                &[&q.name, &(now - window)],
            )?;
            while st.step()? {
                usage.entry(st.text(0).unwrap_or_default()).or_default().1 = st.int(1);
            }
        }
        groups = Some(usage);
    }
    Ok(Room { total, groups })
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

/// The due jobs to take, in order (JOB-01), within every limit. A job whose group is full
/// is passed over for this claim only (LIM-02): the next claim looks at it again.
pub fn plan(conn: &Conn, q: &Settings, now: i64, n: i64) -> Result<Vec<Picked>> {
    let Room { total, mut groups } = room(conn, q, now, n)?;
    let mut picked = vec![];
    if total <= 0 {
        return Ok(picked);
    }
    let group_room = |used: &(i64, i64)| {
        q.group_concurrency.map_or(true, |c| used.0 < c) && q.group_rate.map_or(true, |(r, _)| used.1 < r)
    };
    let mut st = conn.query(
        // seq and grp come from the index; the row itself is read only for a picked job.
        "SELECT seq, grp, id, attempt, payload, meta FROM tinyq_jobs WHERE status = 'queued' AND queue = ?1 AND run_at <= ?2
         ORDER BY priority DESC, run_at, seq",
        &[&q.name, &now],
    )?;
    while (picked.len() as i64) < total && st.step()? {
        let group = st.text(1);
        if let (Some(usage), Some(g)) = (groups.as_mut(), group.clone()) {
            let used = usage.entry(g).or_default();
            if !group_room(used) {
                continue;
            }
            used.0 += 1;
            used.1 += 1;
        }
        picked.push(Picked {
            seq: st.int(0),
            id: st.text(2).unwrap_or_default(),
            attempt: st.int(3),
            payload: st.val(4),
            group,
            meta: st.val(5),
        });
    }
    Ok(picked)
}

/// The UPDATE that leases jobs: ?2 lease_until, ?3 deadline, ?4 now, ?5 worker, ?6 holder.
macro_rules! lease_where {
    ($which:literal) => {
        concat!(
            "UPDATE tinyq_jobs SET status = 'running', attempt = attempt + 1, tries = tries + 1,
                 lease_until = ?2, deadline = ?3, started_at = ?4, worker = ?5, holder = ?6,
                 changed_at = ?4, note = ?5, expires_at = NULL
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
    let mut out = Vec::with_capacity(picked.len());
    for job in picked {
        if q.counts_starts() {
            conn.exec("INSERT INTO tinyq_starts (queue, grp, at) VALUES (?1, ?2, ?3)", &[&q.name, &job.group, &now])?;
        }
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
