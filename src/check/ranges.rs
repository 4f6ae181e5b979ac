//! The stored queue settings against what tq_queue accepts: a setting written by hand
//! outside its range (a lease of -1, a concurrency of 0, half a rate) is read as stored by
//! the claim, and wraps lease times or stalls the queue. Each is checked by tq_queue's own
//! parsing (settings.rs), so the ranges are stated once.

use serde_json::{json, Value};

use super::objects::shown;
use super::Problem;
use crate::options::Options;
use crate::settings::{Settings, KEYS};
use crate::sqlite::{Conn, Result, Val};
use crate::time::format_rate;

/// The columns of tinyq_queues after `name`, in the order of tq_queue's keys (a rate is two:
/// `rate_n`, `rate_ms`), as the query below lists them.
fn columns() -> Vec<String> {
    KEYS.iter()
        .flat_map(|k| match *k {
            "rate" | "group_rate" => vec![format!("{k}_n"), format!("{k}_ms")],
            _ => vec![(*k).to_string()],
        })
        .collect()
}

pub fn check(conn: &Conn, problems: &mut Vec<Problem>) -> Result<()> {
    let columns = columns();
    let rows = conn.rows(
        "SELECT name, lease, timeout, attempts, backoff, backoff_max, concurrency, rate_n, rate_ms,
                group_concurrency, group_rate_n, group_rate_ms, dedupe, keep, paused
         FROM tinyq_queues ORDER BY name",
        &[],
        |st| (st.text(0).unwrap_or_default(), (1..=columns.len() as i32).map(|i| st.val(i)).collect::<Vec<_>>()),
    )?;
    for (queue, values) in rows {
        let stored = |column: &str| &values[columns.iter().position(|c| c == column).expect("a column")];
        for key in KEYS {
            let (column, value) = match *key {
                "rate" | "group_rate" => match as_rate(stored(&format!("{key}_n")), stored(&format!("{key}_ms"))) {
                    Ok(v) => (format!("{key}_n, {key}_ms"), v),
                    Err(detail) => {
                        problems.push(Problem::new("setting", Some(&queue), format!("tinyq_queues.{key}_n"), detail));
                        continue;
                    }
                },
                "paused" => match stored("paused") {
                    Val::Int(0 | 1) => continue,
                    v => {
                        let detail = format!("{}: must be 0 or 1", shown(v));
                        problems.push(Problem::new("setting", Some(&queue), "tinyq_queues.paused", detail));
                        continue;
                    }
                },
                _ => match stored(key) {
                    Val::Null => continue,
                    Val::Int(i) => ((*key).to_string(), json!(i)),
                    v => {
                        let detail = format!("{} ({}): must be an integer or NULL", shown(v), v.kind());
                        problems.push(Problem::new("setting", Some(&queue), format!("tinyq_queues.{key}"), detail));
                        continue;
                    }
                },
            };
            if value.is_null() {
                continue;
            }
            let opts = Options::parse(Some(&Val::Text(json!({ *key: value }).to_string())), KEYS)?;
            if let Err(e) = Settings::defaults(&queue).updated(&opts) {
                let object = format!("tinyq_queues.{}", column.split(',').next().unwrap_or(&column));
                problems.push(Problem::new("setting", Some(&queue), object, format!("tq_queue refuses it: {}", e.msg)));
            }
        }
    }
    Ok(())
}

/// A stored rate as the text tq_queue takes (null: no rate), or why it cannot be one.
fn as_rate(n: &Val, ms: &Val) -> std::result::Result<Value, String> {
    match (n, ms) {
        (Val::Null, Val::Null) => Ok(Value::Null),
        (Val::Int(n), Val::Int(ms)) => Ok(json!(format_rate(*n, *ms))),
        (n, ms) => Err(format!(
            "{} per {} ms: a rate needs both, as integers (half of one reads as no rate)",
            shown(n),
            shown(ms)
        )),
    }
}

/// Sets a setting tq_check found out of range (`object`: tinyq_queues.<column>) back to
/// its default: NULL (both halves of a rate), or 0 for `paused`.
pub fn reset(conn: &Conn, queue: &str, object: &str) -> Result<()> {
    let column = object.strip_prefix("tinyq_queues.").unwrap_or_default();
    let rate = column.strip_suffix("_n").unwrap_or("-");
    conn.exec(
        "UPDATE tinyq_queues SET
           lease = iif(?2 = 'lease', NULL, lease), timeout = iif(?2 = 'timeout', NULL, timeout),
           attempts = iif(?2 = 'attempts', NULL, attempts), backoff = iif(?2 = 'backoff', NULL, backoff),
           backoff_max = iif(?2 = 'backoff_max', NULL, backoff_max),
           concurrency = iif(?2 = 'concurrency', NULL, concurrency),
           rate_n = iif(?3 = 'rate', NULL, rate_n), rate_ms = iif(?3 = 'rate', NULL, rate_ms),
           group_concurrency = iif(?2 = 'group_concurrency', NULL, group_concurrency),
           group_rate_n = iif(?3 = 'group_rate', NULL, group_rate_n),
           group_rate_ms = iif(?3 = 'group_rate', NULL, group_rate_ms),
           dedupe = iif(?2 = 'dedupe', NULL, dedupe), keep = iif(?2 = 'keep', NULL, keep),
           paused = iif(?2 = 'paused', 0, paused)
         WHERE name = ?1",
        &[&queue, &column, &rate],
    )?;
    Ok(())
}
