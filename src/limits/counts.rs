//! Counters a claim reads instead of counting rows (COST-01), one row of tinyq_counts per
//! queue: jobs per stored status and running leases (kept by the triggers in
//! sql/store.sql), and the rate windows' starts and edges (windows.rs). The one module
//! that writes tinyq_counts from Rust.

use crate::sqlite::Conn;
use crate::sqlite::Result;

/// The queue's counters as stored.
#[derive(Default)]
pub struct Counts {
    pub running: i64,
    pub started: i64,
    /// The edge of the queue-wide rate window (windows.rs), once counted.
    pub(super) edge: Option<i64>,
    /// The edge of the group rate window; set (i64::MIN without a group rate) once the
    /// groups are counted.
    pub(super) gedge: Option<i64>,
}

impl Counts {
    /// Have the groups of this queue been counted (limits::rebuild)? A store migrated
    /// from an older schema has not, until its first claim.
    pub fn groups_built(&self) -> bool {
        self.gedge.is_some()
    }

    /// The edges of the queue's rate window and of its group rate window (tq_check).
    pub fn edges(&self) -> (Option<i64>, Option<i64>) {
        (self.edge, self.gedge)
    }
}

pub fn load(conn: &Conn, queue: &str) -> Result<Counts> {
    let stored =
        conn.row("SELECT running, started, edge, gedge FROM tinyq_counts WHERE queue = ?1", &[&queue], |st| Counts {
            running: st.int(0),
            started: st.int(1),
            edge: st.opt_int(2),
            gedge: st.opt_int(3),
        })?;
    Ok(stored.unwrap_or_default())
}

/// Stores the rate windows as a claim slid them (windows::slide).
pub fn save_windows(conn: &Conn, queue: &str, c: &Counts) -> Result<()> {
    conn.exec(
        "UPDATE tinyq_counts SET started = ?2, edge = ?3, gedge = ?4 WHERE queue = ?1",
        &[&queue, &c.started, &c.edge, &c.gedge],
    )?;
    Ok(())
}

/// Counts in `n` starts just taken.
pub fn add_started(conn: &Conn, queue: &str, n: i64) -> Result<()> {
    conn.exec("UPDATE tinyq_counts SET started = started + ?2 WHERE queue = ?1", &[&queue, &n])?;
    Ok(())
}

/// The rate windows start again from the log (limits::rebuild); a queue without a row gets one.
pub fn reset_windows(conn: &Conn, queue: &str) -> Result<()> {
    conn.exec("UPDATE tinyq_counts SET started = 0, edge = NULL, gedge = NULL WHERE queue = ?1", &[&queue])?;
    conn.exec("INSERT OR IGNORE INTO tinyq_counts (queue) VALUES (?1)", &[&queue])?;
    Ok(())
}

/// Marks the groups counted, at the group rate window's edge `gedge` (see Counts::gedge).
pub fn set_groups_built(conn: &Conn, queue: &str, gedge: i64) -> Result<()> {
    conn.exec("UPDATE tinyq_counts SET gedge = ?2 WHERE queue = ?1", &[&queue, &gedge])?;
    Ok(())
}
