//! Linux: tq_wait's sleep blocked on the kernel's file-change events (inotify) until another
//! process writes the store's files, instead of waking every few ms.
//!
//! One inotify instance serves every waiter of the process (the kernel allows a user 128):
//! one waiter at a time blocks on it and, when it reads events, wakes the others; those
//! whose store's files were written look at it, the others sleep on. A process that forked
//! gets its own instance (a shared one would give each event to one of the two). Watches
//! stay until their file is deleted. Where there is no instance, a watch cannot be added,
//! or the store is on a network filesystem (another machine's writes make no event here),
//! `Watch::arm` gives None and tq_wait polls as before (as it does with `TINYQ_WAKE=poll`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::sqlite::{local_file, Conn, Inotify};
use crate::time;

/// The process's instance and the waiters' turn at reading it.
struct Shared {
    pid: u32,
    inotify: Inotify,
    turn: Mutex<Turn>,
    woke: Condvar,
}

#[derive(Default)]
struct Turn {
    /// One waiter is blocked on the fd.
    reading: bool,
    /// Counts the reads that found events.
    reads: u64,
    /// Per watch, the read that last found an event for it: a waiter whose watch fired
    /// since it last looked wakes, the others sleep on.
    fired: HashMap<i32, u64>,
}

static SHARED: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

/// This process's instance, made on first use (and again after a fork, or after the kernel
/// refused one): None when the kernel refuses it.
fn shared() -> Option<Arc<Shared>> {
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if slot.as_ref().is_none_or(|s| s.pid != pid) {
        *slot = Inotify::new()
            .map(|inotify| Arc::new(Shared { pid, inotify, turn: Mutex::default(), woke: Condvar::new() }));
    }
    slot.clone()
}

/// The files a write to the store touches: the database, and its -wal in WAL mode. None for
/// a store that is not a plain file (in memory, another VFS).
fn store_files(conn: &Conn) -> Option<[PathBuf; 2]> {
    if !conn.vfs_name().is_some_and(|v| v.starts_with("unix")) {
        return None;
    }
    let db = conn.file_name()?;
    Some([PathBuf::from(&db), PathBuf::from(db + "-wal")])
}

/// A waiter's watch on its store's files.
pub struct Watch {
    shared: Arc<Shared>,
    /// `reads` when this waiter last looked.
    seen: u64,
    /// The watches of `files` (None: not watched, a missing -wal).
    wds: [Option<i32>; 2],
    /// When the watched files were last written (system ms): a commit whose writes came
    /// just before the watch may publish itself after the waiter's last look.
    written_at: i64,
    files: [PathBuf; 2],
}

/// When `path` was last written, in system ms (0 when it cannot be told).
fn modified_ms(path: &Path) -> i64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

impl Watch {
    /// Watches the store's files, or None (then poll). Arm it before the last look at the
    /// store, so a write after that look is an event.
    pub fn arm(conn: &Conn) -> Option<Self> {
        if super::poll_only() {
            return None;
        }
        let files = store_files(conn)?;
        if !local_file(&files[0]) {
            return None; // other machines' writes make no event here
        }
        let shared = shared()?;
        let seen = shared.turn.lock().unwrap_or_else(PoisonError::into_inner).reads;
        let written_at = files.iter().map(|f| modified_ms(f)).max().unwrap_or(0);
        let mut watch = Self { shared, seen, wds: [None; 2], written_at, files };
        watch.watch_files().then_some(watch)
    }

    /// When the watched files were last written (system ms), as the watch was armed.
    pub fn written_at(&self) -> i64 {
        self.written_at
    }

    /// (Again) watches the database, and the -wal if there is one: rollback-journal mode
    /// writes the database itself, and a store that turns to WAL mode writes its header
    /// first. A file replaced since is watched anew. False if the database cannot be.
    fn watch_files(&mut self) -> bool {
        self.wds = self.files.each_ref().map(|f| self.shared.inotify.watch(f));
        self.wds[0].is_some()
    }

    /// Sleeps until a file of this waiter's store was written (true) or `until` (system ms).
    pub fn sleep(&mut self, until: i64) -> bool {
        let s = &*self.shared;
        let mut turn = s.turn.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if turn.reads != self.seen {
                // -1: the kernel's queue overflowed, any file may have been written.
                let since = |wd: &i32| turn.fired.get(wd).is_some_and(|&read| read > self.seen);
                let mine = self.wds.iter().flatten().chain([&-1]).any(since);
                self.seen = turn.reads;
                if mine {
                    drop(turn);
                    self.watch_files();
                    return true;
                }
            }
            let left = until - time::system_ms();
            if left <= 0 {
                return false;
            }
            if turn.reading {
                turn = s
                    .woke
                    .wait_timeout(turn, std::time::Duration::from_millis(left as u64))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                continue;
            }
            turn.reading = true;
            drop(turn);
            let fired = s.inotify.wait(left);
            turn = s.turn.lock().unwrap_or_else(PoisonError::into_inner);
            turn.reading = false;
            if fired.is_empty() {
                s.woke.notify_one(); // someone else's turn to read
            } else {
                turn.reads += 1;
                let read = turn.reads;
                turn.fired.extend(fired.into_iter().map(|wd| (wd, read)));
                s.woke.notify_all();
            }
        }
    }
}
