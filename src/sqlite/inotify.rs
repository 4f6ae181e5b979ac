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

    /// Watches `path` for writes, and for its removal or move: the watch's number, None
    /// when it cannot be added. Not for IN_ATTRIB: SQLite running as root chowns the -wal
    /// each time a connection opens it, which would wake every waiter.
    pub fn watch(&self, path: &Path) -> Option<i32> {
        use std::os::unix::ffi::OsStrExt;
        let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let mask = libc::IN_MODIFY | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF;
        // SAFETY: the fd is ours and open; c_path is a NUL-terminated string alive for the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd, c_path.as_ptr(), mask) };
        (wd >= 0).then_some(wd)
    }

    /// Blocks up to `timeout_ms` until events are ready; reads them all and gives the
    /// numbers of the watches they are for (-1: the kernel's queue overflowed, events lost).
    pub fn wait(&self, timeout_ms: i64) -> Vec<i32> {
        let mut pfd = libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, for the length of the call.
        let ready = unsafe { libc::poll(&raw mut pfd, 1, timeout_ms.clamp(0, i64::from(i32::MAX)) as i32) };
        let mut fired = Vec::new();
        if ready > 0 {
            self.drain(&mut fired);
        }
        fired
    }

    /// Reads every pending event (the fd is non-blocking) into `fired`.
    fn drain(&self, fired: &mut Vec<i32>) {
        const HEAD: usize = std::mem::size_of::<libc::inotify_event>();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: buf is ours, writable for its whole length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return;
            }
            // The kernel writes whole events: a head (wd, mask, cookie, len) and `len` name bytes.
            let mut at = 0;
            while at + HEAD <= n as usize {
                let field = |i: usize| u32::from_ne_bytes(buf[at + i..at + i + 4].try_into().expect("4 bytes"));
                fired.push(field(0) as i32);
                at += HEAD + field(12) as usize;
            }
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
    pub fn watch(&self, _path: &Path) -> Option<i32> {
        None
    }
    pub fn wait(&self, _timeout_ms: i64) -> Vec<i32> {
        Vec::new()
    }
}

#[cfg(not(target_os = "linux"))]
pub fn local_file(_path: &Path) -> bool {
    false
}
