//! Signals (SIG-01): tq_signal(name [, payload [, options]]) wakes every job blocked on the
//! name, in the signal's transaction, each with the payload as its step `signal:<name>`.
//! The signal is kept (7 days, or its `keep`) so that a wait that begins later returns at
//! once; the first payload sent is the one kept, and a resend while it is kept changes
//! nothing. A wait whose timeout passes first is made due by the next claim, as a scheduled
//! job is (its time is the timeout), without the step.

use crate::options::STEP_PREFIX;
use crate::options::{self, Options};
use crate::row::group_limited;
use crate::settings::Settings;
use crate::sqlite::{Conn, Out, Result, Val};
use crate::timeline::next_event;

/// How long a signal is kept by default.
pub const DEFAULT_KEEP: i64 = 7 * 86_400_000;

fn step_name(name: &str) -> String {
    format!("{STEP_PREFIX}{name}")
}

/// A signal sent without a payload (or with NULL) is kept as the JSON text `null`, so that
/// a woken job's step is never NULL: NULL is what a wait that timed out reads (SIG-01).
const NO_PAYLOAD: &str = "null";

/// tq_signal(name [, payload [, options]]) -> jobs woken
pub fn tq_signal(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.is_empty() || args.len() > 3 {
        bail!("expects (name [, payload [, options]])");
    }
    let name = options::name("name", &args[0])?;
    let payload = match args.get(1) {
        None | Some(Val::Null) => Val::Text(NO_PAYLOAD.into()),
        Some(v) => options::data("payload", v, false)?,
    };
    let opts = Options::parse(args.get(2), &["keep"])?;
    let keep = opts.duration("keep")?.unwrap_or(DEFAULT_KEEP);
    if keep == 0 {
        bail!("option \"keep\" must be longer than 0ms");
    }
    conn.write_tx(|| {
        let now = conn.now();
        // The first payload sent wins while it is kept; one past its keep is sent anew.
        let sent = conn.exec(
            "INSERT INTO tinyq_signals (name, payload, sent_at, keep_until) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (name) DO UPDATE SET payload = excluded.payload, sent_at = excluded.sent_at,
                 keep_until = excluded.keep_until
             WHERE keep_until <= ?3",
            &[&name, &payload, &now, &now.saturating_add(keep)],
        )?;
        if sent == 0 {
            return Ok(Out::Int(0));
        }
        conn.exec(
            "INSERT INTO tinyq_steps (job, name, value, attempt, created_at)
             SELECT seq, ?2, ?3, attempt, ?4 FROM tinyq_jobs WHERE status = 'blocked' AND signal = ?1
             ON CONFLICT (job, name) DO NOTHING",
            &[&name, &step_name(&name), &payload, &now],
        )?;
        let woken = conn.exec(
            concat!(
                "UPDATE tinyq_jobs SET",
                next_event!(),
                ", status = 'queued', signal = NULL, run_at = ?2, changed_at = ?2, note = ?3,
                     parked = grp IS NOT NULL AND ",
                group_limited!("tinyq_jobs.queue"),
                " WHERE status = 'blocked' AND signal = ?1"
            ),
            &[&name, &now, &serde_json::json!({ "signal": name }).to_string()],
        )?;
        Ok(Out::Int(woken))
    })
}

/// A wait that begins after its signal was sent (and while it is kept): the job `seq` gets
/// the payload as its step at once. Returns whether the signal was there.
pub fn deliver_kept(conn: &Conn, seq: i64, name: &str, now: i64) -> Result<bool> {
    let n = conn.exec(
        "INSERT INTO tinyq_steps (job, name, value, attempt, created_at)
         SELECT ?1, ?2, s.payload, j.attempt, ?4 FROM tinyq_signals s JOIN tinyq_jobs j ON j.seq = ?1
         WHERE s.name = ?3 AND s.keep_until > ?4
         ON CONFLICT (job, name) DO UPDATE SET job = job",
        &[&seq, &step_name(name), &name, &now],
    )?;
    Ok(n > 0)
}

/// SQL, for the claim's probe (?1 the queue, ?2 now): has a signal wait of the queue timed out?
/// One seek in tinyq_jobs_timeout, empty while no job waits for a signal.
macro_rules! timed_out {
    () => {
        "EXISTS (SELECT 1 FROM tinyq_jobs INDEXED BY tinyq_jobs_timeout WHERE status = 'blocked' AND signal IS NOT NULL AND queue = ?1 AND run_at <= ?2)"
    };
}
pub(crate) use timed_out;

/// Signal waits past their timeout run again without the signal (their event dated at the
/// timeout); grouped ones in a queue with group limits are set aside as any due job.
pub fn end_timeouts(conn: &Conn, q: &Settings, now: i64) -> Result<i64> {
    conn.exec(
        concat!(
            "UPDATE tinyq_jobs INDEXED BY tinyq_jobs_timeout SET",
            next_event!(),
            ", status = 'queued', signal = NULL, changed_at = run_at,
             note = ?4, parked = (?3 AND grp IS NOT NULL)
         WHERE status = 'blocked' AND signal IS NOT NULL AND queue = ?1 AND run_at <= ?2"
        ),
        &[&q.name, &now, &q.has_group_limits(), &r#"{"timeout":true}"#],
    )
}

/// The next timeout of a signal wait of the queue (tq_wait wakes then).
pub fn next_timeout(conn: &Conn, queue: &str, now: i64) -> Result<Option<i64>> {
    conn.one_int(
        "SELECT min(run_at) FROM tinyq_jobs INDEXED BY tinyq_jobs_timeout WHERE status = 'blocked' AND signal IS NOT NULL AND queue = ?1 AND run_at > ?2",
        &[&queue, &now],
    )
}

/// SQL for the sweep (?1 now, ?2 limit): signals past their keep.
pub const SWEEP_PROBE: &str = "SELECT EXISTS (SELECT 1 FROM tinyq_signals WHERE keep_until <= ?1)";
pub const SWEEP: &str =
    "DELETE FROM tinyq_signals WHERE name IN (SELECT name FROM tinyq_signals WHERE keep_until <= ?1 LIMIT ?2 + 0)";
