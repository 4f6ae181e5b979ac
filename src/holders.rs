//! Who holds leases: one row per process, so that the next process can tell a dead holder
//! from a live one on the same machine and end its leases at once (DUR-02).
//!
//! With the clock pinned (tq_clock), nothing here runs: a replayed statement must not
//! depend on which process runs it (REP-01), and such leases simply run out.

use std::sync::OnceLock;

use crate::conn::Conn;
use crate::ffi::Result;

/// This process: (machine and boot, pid, start time in clock ticks since boot).
struct Me {
    machine: String,
    pid: i64,
    started: i64,
}

fn me() -> Option<&'static Me> {
    static ME: OnceLock<Option<Me>> = OnceLock::new();
    ME.get_or_init(|| {
        let pid = std::process::id() as i64;
        Some(Me { machine: machine()?, pid, started: start_ticks(pid)? }).filter(|m| !m.machine.is_empty())
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

/// This process's holder id, registering it on first use (None where processes can't be
/// told apart, e.g. without /proc: there leases simply run out).
pub fn mine(conn: &Conn, now: i64) -> Result<Option<i64>> {
    if conn.clock.get().is_some() {
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

/// Ends the leases of holders that are dead: same boot and no process with that pid and
/// start time, or the same machine booted since. Runs at most once a second per connection.
pub fn recover(conn: &Conn, now: i64) -> Result<()> {
    let Some(me) = me().filter(|_| conn.clock.get().is_none()) else { return Ok(()) };
    let wall = crate::time::system_ms();
    if conn.recovered_at.get().is_some_and(|t| (0..1000).contains(&(wall - t))) {
        return Ok(());
    }
    conn.recovered_at.set(Some(wall));
    let machine_id = me.machine.split('/').next().unwrap_or_default().to_string();
    let mut dead = vec![];
    let mut st = conn.query("SELECT id, machine, pid, started FROM tinyq_holders", &[])?;
    while st.step()? {
        let (id, machine, pid, started) = (st.int(0), st.text(1).unwrap_or_default(), st.int(2), st.int(3));
        let is_dead = if machine == me.machine {
            start_ticks(pid) != Some(started)
        } else {
            // Same machine, another boot: every process of that boot is gone.
            !machine_id.is_empty() && machine.split('/').next() == Some(machine_id.as_str())
        };
        if is_dead {
            dead.push(id);
        }
    }
    drop(st);
    for id in dead {
        conn.exec(
            "UPDATE tinyq_jobs SET lease_until = ?2 WHERE holder = ?1 AND status = 'running' AND lease_until > ?2",
            &[&id, &now],
        )?;
        conn.exec("DELETE FROM tinyq_holders WHERE id = ?1", &[&id])?;
    }
    Ok(())
}
