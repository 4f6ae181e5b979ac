//! tq_settle's `'wait'` outcome: a running job gives its worker back and is blocked until
//! jobs finish (`{"after": [ids]}`, deps.rs) or a signal comes (`{"signal": name,
//! "timeout": duration}`, signals.rs). Like a snooze, the attempt does not count; the lease
//! ends, so the job holds no place in any limit while it waits.

use crate::held::{self, Held};
use crate::options::Options;
use crate::settings::Settings;
use crate::sqlite::{Conn, Error, Result, Val};
use crate::timeline::next_event;
use crate::workflows::deps::{self, FOREVER};
use crate::workflows::signals;

pub enum Wait {
    After(Vec<String>),
    Signal { name: String, timeout: Option<i64> },
}

impl Wait {
    /// Reads the value of a `'wait'` settlement.
    pub fn parse(value: &Val) -> Result<Wait> {
        const HOW: &str = "{\"after\": [ids]} or {\"signal\": name, \"timeout\": duration}";
        let bad = |e: Error| Error::bad(format!("outcome 'wait': {}", e.msg));
        if value.is_null() {
            bail!("outcome 'wait' needs {HOW}");
        }
        let opts = Options::parse(Some(value), &["after", "signal", "timeout"]).map_err(bad)?;
        let after = opts.list("after").map_err(bad)?;
        let signal = opts.text("signal").map_err(bad)?;
        let timeout = opts.duration("timeout").map_err(bad)?;
        match (after, signal) {
            (Some(_), Some(_)) | (None, None) => bail!("outcome 'wait' needs {HOW}: one of \"after\" and \"signal\""),
            (Some(_), None) if timeout.is_some() => {
                bail!("outcome 'wait': \"timeout\" goes with \"signal\" (a wait for jobs ends when they finish)")
            }
            (Some(ids), None) => Ok(Wait::After(deps::checked_ids("outcome 'wait': \"after\"", ids)?)),
            (None, Some(name)) => Ok(Wait::Signal { name, timeout }),
        }
    }
}

/// Blocks the held job on `wait`, or makes it due at once when there is nothing to wait
/// for (its jobs have all finished, its signal was already sent).
pub fn begin(conn: &Conn, job: &Held, q: &Settings, wait: &Wait, now: i64) -> Result<i64> {
    match wait {
        Wait::After(ids) => {
            let deps = deps::find(conn, "outcome 'wait': \"after\"", ids)?;
            if let Some(chain) = deps::cycle(conn, job.seq, &deps)? {
                let ids = deps::chain_ids(conn, &chain)?;
                let named = deps::chain_ids(conn, &chain[..1])?;
                if chain.len() == 1 {
                    bail!("outcome 'wait': \"after\" names '{named}', which is this job: it would never run");
                }
                bail!(
                    "outcome 'wait': \"after\" names '{named}', which waits for this job ({ids}): it would never run"
                );
            }
            let waits = deps::link(conn, job.seq, &deps)?;
            let note = format!("{{\"after\":{}}}", deps.len());
            if waits == 0 {
                return held::again(conn, q, job.seq, job.tries - 1, now, None, Val::Text(note), now);
            }
            block(conn, job, None, waits, now, &note)?;
            deps::settle_failed(conn, job.seq, &deps, now)?;
            Ok(1)
        }
        Wait::Signal { name, timeout } => {
            let note = serde_json::json!({ "signal": name }).to_string();
            if signals::deliver_kept(conn, job.seq, name, now)? {
                return held::again(conn, q, job.seq, job.tries - 1, now, None, Val::Text(note), now);
            }
            let until = timeout.map_or(FOREVER, |t| now.saturating_add(t));
            block(conn, job, Some(name), until, now, &note)
        }
    }
}

/// The held job becomes blocked: no lease, no place in any limit, its try given back.
/// `signal` set: it waits for it until `arg` (run_at); else for `arg` dependencies.
fn block(conn: &Conn, job: &Held, signal: Option<&str>, arg: i64, now: i64, note: &str) -> Result<i64> {
    conn.exec(
        concat!(
            "UPDATE tinyq_jobs SET",
            next_event!(),
            ", status = 'blocked', tries = ?2, lease_until = NULL, deadline = NULL, holder = NULL,
             expires_at = NULL, parked = 0, changed_at = ?3, note = ?4, signal = ?5,
             waits = CASE WHEN ?5 IS NULL THEN ?6 END, run_at = CASE WHEN ?5 IS NULL THEN ?3 ELSE ?6 END
         WHERE seq = ?1"
        ),
        &[&job.seq, &(job.tries - 1), &now, &note, &signal, &arg],
    )
}
