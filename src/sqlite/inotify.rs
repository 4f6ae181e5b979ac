//! Linux inotify, for tq_wait's idle sleep: the kernel says when another process writes
//! the store's files, so a waiter need not poll. It lives in the glue because it is C calls
//! (libc) on a raw fd and a raw event buffer, and the glue is where tinyq allows `unsafe`.
//! On other systems `Inotify::new` gives None and tq_wait polls.

use std::path::Path;

/// One inotify instance: a non-blocking fd, closed on drop.
pub struct Inotify {
    #[cfg(target_os = "linux")]
    fd: std::ffi::c_int,
}

#[cfg(target_os = "linux")]
impl Inotify {
    /// A new instance, or None when the kernel refuses one (the per-user limit, say).
    pub fn new() -> Option<Self> {
        // SAFETY: inotify_init1 takes flags only and returns an fd we own, or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        (fd >= 0).then_some(Self { fd })
    }

    /// Watches `path` for writes, and for its removal or replacement (a write to the old
    /// file would no longer be the store's): false when the watch cannot be added.
    pub fn watch(&self, path: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        let mask = libc::IN_MODIFY | libc::IN_ATTRIB | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF;
        // SAFETY: the fd is ours and open; c_path is a NUL-terminated string alive for the call.
        unsafe { libc::inotify_add_watch(self.fd, c_path.as_ptr(), mask) >= 0 }
    }

    /// Blocks up to `timeout_ms` until events are ready; reads them all. True if there were any.
    pub fn wait(&self, timeout_ms: i64) -> bool {
        let mut pfd = libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, for the length of the call.
        let ready = unsafe { libc::poll(&raw mut pfd, 1, timeout_ms.clamp(0, i64::from(i32::MAX)) as i32) };
        ready > 0 && self.drain()
    }

    /// Reads every pending event (the fd is non-blocking): true if there was one.
    fn drain(&self) -> bool {
        let mut buf = [0u8; 4096];
        let mut any = false;
        loop {
            // SAFETY: buf is ours, writable for its whole length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return any;
            }
            any = true;
        }
    }
}

/// Filesystems whose files other machines may write, out of this kernel's sight (so out of
/// inotify's): NFS, SMB/CIFS, FUSE (sshfs and others), Ceph, 9p (VM shared folders), AFS.
#[cfg(target_os = "linux")]
const NETWORK_FILESYSTEMS: [i64; 8] =
    [0x6969, 0x517B, 0xFF53_4D42, 0xFE53_4D42, 0x6573_5546, 0x00C3_6400, 0x0102_1997, 0x5346_414F];

/// Does every write to `path` pass through this kernel? False for network filesystems,
/// and when the filesystem cannot be told.
#[cfg(target_os = "linux")]
pub fn local_file(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data, which zeroed memory is a valid value of.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is NUL-terminated and `fs` writable, both alive for the call.
    let ok = unsafe { libc::statfs(c_path.as_ptr(), &raw mut fs) } == 0;
    ok && !NETWORK_FILESYSTEMS.contains(&(fs.f_type as i64))
}

#[cfg(target_os = "linux")]
impl Drop for Inotify {
    fn drop(&mut self) {
        // SAFETY: the fd is ours and closed only here.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(not(target_os = "linux"))]
impl Inotify {
    pub fn new() -> Option<Self> {
        None
    }
    pub fn watch(&self, _path: &Path) -> bool {
        false
    }
    pub fn wait(&self, _timeout_ms: i64) -> bool {
        false
    }
}

#[cfg(not(target_os = "linux"))]
pub fn local_file(_path: &Path) -> bool {
    false
}
