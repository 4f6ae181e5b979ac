//! tq_wait's sleep between looks at the store. On Linux a waiter sleeps on the kernel's
//! file-change events (inotify, wake/linux.rs) until another process writes the store's
//! files. Elsewhere (Windows, macOS, WASI), and on Linux when `TINYQ_WAKE=poll` is set,
//! there is no watch: tq_wait looks at `PRAGMA data_version` every few ms instead (the
//! portable waiter, wait.rs). The variable lets Linux runs test that path too.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::Watch;
#[cfg(not(target_os = "linux"))]
pub use portable::Watch;

/// Is the portable waiter asked for (`TINYQ_WAKE=poll`)? Read once per process.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn poll_only() -> bool {
    static POLL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *POLL.get_or_init(|| std::env::var_os("TINYQ_WAKE").is_some_and(|v| v == "poll"))
}

/// Where there are no file-change events: never a watch, so tq_wait polls.
#[cfg(not(target_os = "linux"))]
mod portable {
    use crate::sqlite::Conn;

    /// No value of it exists: `arm` always gives None.
    pub enum Watch {}

    impl Watch {
        pub fn arm(_conn: &Conn) -> Option<Self> {
            None
        }

        pub fn written_at(&self) -> i64 {
            match *self {}
        }

        pub fn sleep(&mut self, _until: i64) -> bool {
            match *self {}
        }
    }
}
