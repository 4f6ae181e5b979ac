//! SEC-01 at run time: is a function called directly, by a statement whose SQL names it?
//!
//! SQLite refuses a DIRECTONLY function in a view, a trigger or a DEFAULT clause when it
//! prepares the statement, but a function that is not deterministic in a CHECK constraint
//! is not flagged as coming from the schema before SQLite 3.52 (and there `trusted_schema`
//! does not stop it either), so a file someone else wrote could run tinyq's functions
//! against `main`'s store. The schema's expressions run inside the statement that set
//! them off, and SQLite keeps the text of every statement prepared with
//! sqlite3_prepare_v2 or later: a function runs only when a statement of this connection
//! that is running right now calls it by name (see docs/design.md, "Function flags").

use super::{Conn, Error, Result};

const SQLITE_DBCONFIG_TRUSTED_SCHEMA: std::ffi::c_int = 1017;

/// Who may call a function.
#[derive(Clone, Copy, PartialEq)]
pub enum Callers {
    /// INNOCUOUS: views, triggers and CHECK constraints too.
    Anyone,
    /// Neither flag: from the schema only while trusted_schema is on (tq_add, tq_cancel).
    Trusted,
    /// DIRECTONLY: only a statement that calls it by name.
    Direct,
}

/// Fails unless `name` may run here (SEC-01).
pub fn check(conn: &Conn, name: &str, callers: Callers) -> Result<()> {
    match callers {
        Callers::Anyone => return Ok(()),
        Callers::Trusted if conn.db_config(SQLITE_DBCONFIG_TRUSTED_SCHEMA) != 0 => return Ok(()),
        _ => {}
    }
    let mut untexted = false;
    let direct = conn.any_running(|sql, _| {
        untexted |= sql.is_none();
        sql.is_some_and(|sql| calls(sql, name))
    });
    if direct {
        return Ok(());
    }
    let why = if callers == Callers::Trusted {
        ", and trusted_schema is off: from a trigger, a view or a CHECK constraint it runs only with PRAGMA trusted_schema=ON"
    } else {
        ": it runs only from a statement whose SQL calls it, never from a CHECK constraint, a trigger, a view or anything else stored in a database's schema"
    };
    let hint = if untexted {
        " (a running statement has no SQL text: prepare statements with sqlite3_prepare_v2 or later)"
    } else {
        ""
    };
    Err(Error::bad(format!("not called directly (SEC-01){why}{hint}")))
}

/// Does `sql` call the function `name`? The name as a whole identifier, bare or quoted
/// ("name", [name], `name`), compared as SQLite compares function names (ASCII case
/// ignored), followed by `(` (spaces and comments may come between), outside string
/// literals and comments.
pub fn calls(sql: &[u8], name: &str) -> bool {
    let name = name.as_bytes();
    let mut i = 0;
    let mut named = false; // the last token was `name`
    while i < sql.len() {
        let c = sql[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => i += 1,
            b'-' if sql.get(i + 1) == Some(&b'-') => {
                i = sql[i..].iter().position(|&b| b == b'\n').map_or(sql.len(), |p| i + p + 1);
            }
            b'/' if sql.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..].windows(2).position(|w| w == b"*/").map_or(sql.len(), |p| i + 2 + p + 2);
            }
            b'(' if named => return true,
            b'\'' | b'"' | b'`' | b'[' => {
                let close = if c == b'[' { b']' } else { c };
                let (text, end) = quoted(sql, i + 1, close);
                named = c != b'\'' && text.eq_ignore_ascii_case(name);
                i = end;
            }
            c if is_word(c) => {
                let end = sql[i..].iter().position(|&b| !is_word(b)).map_or(sql.len(), |p| i + p);
                named = sql[i..end].eq_ignore_ascii_case(name);
                i = end;
            }
            _ => {
                named = false;
                i += 1;
            }
        }
    }
    false
}

/// The raw text of a quoted token that starts at `from` (after its opening quote), and
/// where the token ends. A doubled closing quote is part of the text (`"a""b"`), except
/// in `[...]`; such a text never equals a function's name, so it is not unescaped.
fn quoted(sql: &[u8], from: usize, close: u8) -> (&[u8], usize) {
    let mut j = from;
    while j < sql.len() {
        if sql[j] == close {
            if close != b']' && sql.get(j + 1) == Some(&close) {
                j += 2;
                continue;
            }
            return (&sql[from..j], j + 1);
        }
        j += 1;
    }
    (&sql[from..], sql.len())
}

/// A byte of an identifier or a number, as SQLite's tokenizer reads them.
fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

#[cfg(test)]
mod tests {
    use super::calls;

    #[test]
    fn a_call_by_name_in_any_quoting_and_case() {
        for sql in [
            "SELECT tq_settle(?, ?, 'done')",
            "select TQ_SETTLE (1)",
            "SELECT \"tq_settle\"(1)",
            "SELECT [tq_settle](1)",
            "SELECT `Tq_Settle`(1)",
            "SELECT tq_settle /* why */ -- not\n (1)",
            "SELECT x, tq_settle\n\t(1) FROM t",
            "SELECT 'a''b', tq_settle(1)",
        ] {
            assert!(calls(sql.as_bytes(), "tq_settle"), "{sql}");
        }
    }

    #[test]
    fn not_a_call() {
        for sql in [
            "INSERT INTO h.t VALUES (1, 2)",
            "SELECT 'tq_settle(1)'",
            "SELECT 1 -- tq_settle(1)",
            "SELECT /* tq_settle(1) */ 1",
            "SELECT tq_settle_all(1)",
            "SELECT my_tq_settle(1)",
            "SELECT tq_settle FROM t",
            "SELECT x.tq_settle, (1) FROM t",
            "SELECT \"tq_settle\" , 1",
            "SELECT 'unterminated tq_settle(",
            "SELECT \"tq_se\"\"ttle\"(1)",
        ] {
            assert!(!calls(sql.as_bytes(), "tq_settle"), "{sql}");
        }
    }

    #[test]
    fn other_names_and_odd_bytes() {
        assert!(calls(b"SELECT tq_clock(0)", "tq_clock"));
        assert!(!calls(b"SELECT tq_clock(0)", "tq_sweep"));
        assert!(!calls(b"SELECT \xc3\xa9tq_clock(0)", "tq_clock"));
        assert!(!calls(b"/* unterminated tq_clock(", "tq_clock"));
        assert!(calls(b"SELECT 1; SELECT tq_clock(0)", "tq_clock"));
    }
}
