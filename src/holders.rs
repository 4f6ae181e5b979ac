//! Who holds leases: one row per process, so that the next process can tell a dead holder
//! from a live one on the same machine and end its leases at once (DUR-02).
//!
//! With the clock pinned (tq_clock), nothing here runs: a replayed statement must not
//! depend on which process runs it (REP-01), and such leases simply run out.

use std::sync::OnceLock;

use crate::held::{self, Held};
use crate::settings::Settings;
use crate::settle::{self, Outcome};
use crate::sqlite::{Bind, Conn, Result};

/// This process: (machine and boot, pid, start time in clock ticks since boot).
struct Me {
    machine: String,
    pid: i64,
    started: i64,
}

fn me() -> Option<&'static Me> {
    static ME: OnceLock<Option<Me>> = OnceLock::new();
    ME.get_or_init(|| {
        // The machine first: where there is none to read (WASI), std::process::id() panics.
        let machine = machine()?;
        let pid = i64::from(std::process::id());
        Some(Me { machine, pid, started: start_ticks(pid)? }).filter(|m| !m.machine.is_empty())
    })
    .as_ref()
}

/// The machine id and the boot id: a process can only be judged from the same boot.
fn machine() -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    let id = read("/etc/machine-id").or_else(|| read("/var/lib/dbus/machine-id")).unwrap_or_default();
    let boot = read("/proc/sys/kernel/random/boot_id")?;
    Some(format!("{id}/{boot}"))
}

/// Field 22 of /proc/<pid>/stat: when the process started. A reused pid has another.
fn start_ticks(pid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Does this connection's database live in a local file of this machine (the `unix`
/// VFS family)? On another VFS (dqlite's, say) the process running tinyq's functions is
/// a node, not the worker, so leases are not tied to it: they simply run out.
fn local_file(conn: &Conn) -> bool {
    if let Some(known) = conn.local_file.get() {
        return known;
    }
    let local = conn.vfs_name().is_some_and(|name| name.starts_with("unix"));
    conn.local_file.set(Some(local));
    local
}

/// This process's holder id, registering it on first use (None where processes can't be
/// told apart, e.g. without /proc: there leases simply run out).
pub fn mine(conn: &Conn, now: i64) -> Result<Option<i64>> {
    if conn.clock.get().is_some() || !local_file(conn) {
        return Ok(None);
    }
    if let Some(h) = conn.holder.get() {
        return Ok(Some(h));
    }
    let Some(me) = me() else { return Ok(None) };
    let id = conn.one_int(
        "INSERT INTO tinyq_holders (machine, pid, started, seen_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (machine, pid, started) DO UPDATE SET seen_at = ?4
         RETURNING id",
        &[&me.machine, &me.pid, &me.started, &now],
    )?;
    conn.holder.set(id);
    Ok(id)
}

/// Is this holder dead? Same boot and no process with that pid and start time (a zombie
/// counts as dead), or the same machine booted since. Another machine: we can't tell.
fn is_dead(me: &Me, machine: &str, pid: i64, started: i64) -> bool {
    if machine == me.machine {
        return start_ticks(pid) != Some(started);
    }
    let machine_id = |m: &str| m.split('/').next().unwrap_or_default().to_string();
    !machine_id(&me.machine).is_empty() && machine_id(machine) == machine_id(&me.machine)
}

/// Ends at once the leases that dead processes hold in this queue (DUR-02): their jobs
/// wait again (or fail when out of attempts) in this very claim. Only processes that hold
/// live leases here are looked at, so a claim where no other process works costs nothing.
pub fn recover(conn: &Conn, q: &Settings, now: i64) -> Result<()> {
    let Some(me) = me().filter(|_| conn.clock.get().is_none() && local_file(conn)) else { return Ok(()) };
    let dead = dead_among(
        conn,
        me,
        "SELECT h.id, h.machine, h.pid, h.started FROM tinyq_holders h
         WHERE h.id IN (SELECT holder FROM tinyq_jobs
                        WHERE status = 'running' AND expires_at IS NULL AND queue = ?1 AND lease_until > ?2 AND holder IS NOT ?3)",
        &[&q.name, &now, &conn.holder.get()],
    )?;
    for holder in dead {
        let held = conn.rows(
            concat!(
                "SELECT ",
                held::held_columns!(),
                " FROM tinyq_jobs WHERE status = 'running' AND queue = ?1 AND holder = ?2"
            ),
            &[&q.name, &holder],
            Held::read,
        )?;
        for job in held {
            settle::apply(conn, &job, q, Outcome::LeaseExpired { died: true }, now)?;
        }
        // Its leases in other queues run out now; their next claims take them back.
        conn.exec(
            // Queue by queue: the leases index starts with the queue.
            "UPDATE tinyq_jobs SET lease_until = ?2
             WHERE queue IN (SELECT name FROM tinyq_queues) AND status = 'running' AND expires_at IS NULL
               AND lease_until > ?2 AND holder = ?1",
            &[&holder, &now],
        )?;
        conn.exec("DELETE FROM tinyq_holders WHERE id = ?1", &[&holder])?;
    }
    Ok(())
}

/// Removes the rows of dead processes that hold nothing (tq_sweep); returns how many.
pub fn forget_dead(conn: &Conn) -> Result<i64> {
    let Some(me) = me() else { return Ok(0) };
    let dead = dead_among(
        conn,
        me,
        "SELECT id, machine, pid, started FROM tinyq_holders h
         WHERE NOT EXISTS (SELECT 1 FROM tinyq_jobs WHERE queue IN (SELECT name FROM tinyq_queues)
                             AND status = 'running' AND expires_at IS NULL AND holder = h.id)",
        &[],
    )?;
    for id in &dead {
        conn.exec("DELETE FROM tinyq_holders WHERE id = ?1", &[id])?;
    }
    Ok(dead.len() as i64)
}

/// The ids of the dead processes among the holders a query finds (id, machine, pid, started).
fn dead_among(conn: &Conn, me: &Me, sql: &'static str, params: &[&dyn Bind]) -> Result<Vec<i64>> {
    let holders = conn.rows(sql, params, |st| (st.int(0), st.text(1).unwrap_or_default(), st.int(2), st.int(3)))?;
    Ok(holders
        .into_iter()
        .filter(|(_, machine, pid, started)| is_dead(me, machine, *pid, *started))
        .map(|h| h.0)
        .collect())
}
