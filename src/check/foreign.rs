//! Objects that are not tinyq's but act on its tables: a trigger on a tinyq_* table, a
//! trigger or view that writes one, and any object that calls one of the functions that
//! only a worker or an operator should call (settle, renew, sweep, settings...). They run
//! inside tinyq's own writes, so tq_check names them; tinyq leaves them alone.

use super::Problem;
use crate::sqlite::{Conn, Result};

/// The functions a schema object has no business calling (tq_add, tq_cancel and tq_signal
/// are made for triggers; the readers change nothing).
const WORKER_FUNCTIONS: &[&str] = &[
    "tq_settle",
    "tq_renew",
    "tq_step_put",
    "tq_progress",
    "tq_sweep",
    "tq_queue",
    "tq_retry",
    "tq_clock",
    "tq_schedule",
    "tq_unschedule",
    "tq_claim",
    "tq_check",
];

const OTHERS: &str = checking!(
    "SELECT type, name, tbl_name, sql FROM sqlite_master
     WHERE substr(name, 1, 6) <> 'tinyq_' AND substr(name, 1, 7) <> 'sqlite_' AND sql IS NOT NULL
       AND (instr(lower(sql), 'tinyq_') > 0 OR instr(lower(sql), 'tq_') > 0)
     ORDER BY name"
);

pub fn check(conn: &Conn, problems: &mut Vec<Problem>) -> Result<()> {
    let objects = conn.rows(OTHERS, &[], |st| {
        (
            st.text(0).unwrap_or_default(),
            st.text(1).unwrap_or_default(),
            st.text(2).unwrap_or_default(),
            st.text(3).unwrap_or_default(),
        )
    })?;
    for (kind, name, table, sql) in objects {
        let words = words(&sql);
        let what = if kind == "trigger" && table.to_ascii_lowercase().starts_with("tinyq_") {
            format!("a trigger that is not tinyq's fires on {table}: it runs inside tinyq's own writes")
        } else if let Some(written) = writes_tinyq_table(&words) {
            format!("a {kind} that is not tinyq's writes {written}: tinyq's counters and events do not expect it")
        } else if let Some(called) = words.iter().find(|w| WORKER_FUNCTIONS.contains(&w.as_str())) {
            format!("a {kind} that is not tinyq's calls {called}, which only a worker or an operator should call")
        } else {
            continue;
        };
        problems.push(Problem::new(
            "foreign",
            None,
            name.as_str(),
            format!("{what} (tinyq leaves it alone: drop it unless it is yours and meant)"),
        ));
    }
    Ok(())
}

/// The SQL's words, lowercased: identifiers and keywords (quotes, dots and punctuation split).
fn words(sql: &str) -> Vec<String> {
    sql.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The tinyq_* table an INSERT, REPLACE, UPDATE or DELETE of the SQL writes, if any.
fn writes_tinyq_table(words: &[String]) -> Option<&str> {
    let target = |i: usize| {
        let mut i = i;
        // an optional schema name: main.tinyq_jobs, temp.x
        if matches!(words.get(i).map(String::as_str), Some("main" | "temp")) {
            i += 1;
        }
        words.get(i).filter(|w| w.starts_with("tinyq_")).map(String::as_str)
    };
    for (i, w) in words.iter().enumerate() {
        let found = match w.as_str() {
            "into" if i > 0 => target(i + 1),
            "from" if i > 0 && words[i - 1] == "delete" => target(i + 1),
            "update" => {
                // UPDATE [OR ROLLBACK|ABORT|REPLACE|FAIL|IGNORE] table
                let skip = if words.get(i + 1).is_some_and(|n| n == "or") { 3 } else { 1 };
                target(i + skip)
            }
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{words, writes_tinyq_table};

    #[test]
    fn finds_the_tinyq_table_a_statement_writes() {
        let w = |s: &str| writes_tinyq_table(&words(s)).map(str::to_string);
        assert_eq!(
            w("CREATE TRIGGER t AFTER INSERT ON orders BEGIN UPDATE \"tinyq_jobs\" SET x = 1; END"),
            Some("tinyq_jobs".into())
        );
        assert_eq!(
            w("CREATE TRIGGER t AFTER INSERT ON orders BEGIN DELETE FROM main.tinyq_steps; END"),
            Some("tinyq_steps".into())
        );
        assert_eq!(
            w("CREATE TRIGGER t AFTER INSERT ON o BEGIN UPDATE OR IGNORE tinyq_queues SET paused = 1; END"),
            Some("tinyq_queues".into())
        );
        assert_eq!(w("CREATE TRIGGER t AFTER INSERT ON o BEGIN INSERT INTO log SELECT * FROM tinyq_jobs; END"), None);
        assert_eq!(w("CREATE VIEW v AS SELECT * FROM tinyq_jobs"), None);
    }
}
