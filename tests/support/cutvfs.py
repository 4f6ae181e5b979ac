"""A SQLite VFS (through apsw) that models what a power cut leaves on disk.

Every write and truncate of the main database, its -wal and its -journal goes to the real
file as usual, and is also kept as *pending* until the file is synced. A sync makes the
file's pending changes *durable*. A power cut keeps the durable content and throws the
rest away:

- `image(dir, partial=None)` writes the files as a cut at this instant would leave them:
  only what was synced, or, with `partial=random.Random`, the synced content plus a random
  subset of the pending writes (a disk that wrote some of its cache, in any order).
- The -shm file needs no durability (SQLite rebuilds it from the WAL): it is not kept.
- A delete is taken as durable at once.

The same VFS can also refuse writes that grow a file past a byte budget with SQLITE_FULL (a
full disk: overwriting in place needs no space), and
refuse truncating the -wal (a WAL that cannot be truncated): `Disk.space` and
`Disk.no_truncate`.

`Disk.on_event(kind, path)` is called at every "write", "truncate", "presync" (the
pending changes are not durable yet) and "postsync" (they are): the tests take their
cut images there.
"""
import os
import shutil

import apsw

DURABLE_KINDS = apsw.SQLITE_OPEN_MAIN_DB | apsw.SQLITE_OPEN_MAIN_JOURNAL | apsw.SQLITE_OPEN_WAL


def _name(filename):
    return filename.filename() if hasattr(filename, "filename") else filename


class Disk:
    """The durable state of every file the VFS tracks, by path."""

    def __init__(self):
        self.synced = {}        # path -> bytearray: the content as of its last sync
        self.pending = {}       # path -> [("w", offset, bytes) | ("t", size)] since that sync
        self.version = 0        # grows at every change of the durable content
        self.on_event = None
        self.space = None       # bytes that may still be written; None: unlimited
        self.no_truncate = False  # truncating a -wal fails (SQLITE_IOERR_TRUNCATE)
        self.refused = {"write": 0, "truncate": 0}

    def track(self, path):
        if path not in self.synced:
            self.synced[path] = bytearray()
            self.pending[path] = []

    def forget(self, path):
        if self.synced.pop(path, None) is not None:
            del self.pending[path]
            self.version += 1

    def event(self, kind, path):
        if self.on_event is not None:
            self.on_event(kind, path)

    def sync(self, path):
        self.event("presync", path)
        if self.pending[path]:
            self.synced[path] = _apply(self.synced[path], self.pending[path])
            self.pending[path] = []
            self.version += 1
        self.event("postsync", path)

    def image(self, folder, partial=None):
        """Write each tracked file, as a power cut now would leave it, into `folder`."""
        os.makedirs(folder, exist_ok=True)
        for path, synced in self.synced.items():
            ops = self.pending[path]
            if partial is not None and ops:
                ops = [op for op in ops if partial.random() < 0.5]
            content = _apply(synced, ops) if ops and partial is not None else synced
            with open(os.path.join(folder, os.path.basename(path)), "wb") as f:
                f.write(content)


def _apply(content, ops):
    out = bytearray(content)
    for op in ops:
        if op[0] == "w":
            _, offset, data = op
            if len(out) < offset:
                out.extend(b"\0" * (offset - len(out)))
            out[offset:offset + len(data)] = data
        else:
            del out[op[1]:]
    return out


class CutFile(apsw.VFSFile):
    def __init__(self, disk, filename, flags):
        self.disk = disk
        self.path = _name(filename)
        self.durable = bool(self.path) and bool(flags[0] & DURABLE_KINDS)
        self.is_wal = bool(flags[0] & apsw.SQLITE_OPEN_WAL)
        super().__init__("", filename, flags)
        if self.durable:
            disk.track(self.path)

    def xWrite(self, data, offset):
        if self.durable and self.disk.space is not None:
            grow = max(0, offset + len(data) - super().xFileSize())   # overwrites need no space
            if grow > self.disk.space:
                self.disk.refused["write"] += 1
                raise apsw.FullError("simulated: no space left on device")
            self.disk.space -= grow
        super().xWrite(data, offset)
        if self.durable:
            self.disk.pending[self.path].append(("w", offset, bytes(data)))
            self.disk.event("write", self.path)

    def xTruncate(self, size):
        if self.is_wal and self.disk.no_truncate:
            self.disk.refused["truncate"] += 1
            raise apsw.IOError("simulated: the WAL cannot be truncated")
        super().xTruncate(size)
        if self.durable:
            self.disk.pending[self.path].append(("t", size))
            self.disk.event("truncate", self.path)

    def xSync(self, flags):
        # No real fsync: the model is the durable state (and the files live in /dev/shm).
        if self.durable:
            self.disk.sync(self.path)


class CutVFS(apsw.VFS):
    """Registers itself under `name`, over the default VFS."""

    def __init__(self, name, disk):
        self.disk = disk
        super().__init__(name, "")

    def xOpen(self, name, flags):
        return CutFile(self.disk, name, flags)

    def xDelete(self, name, syncdir):
        super().xDelete(name, syncdir)
        self.disk.forget(name)


def scratch_dir(prefix):
    """A fresh folder in /dev/shm when there is one (no real fsyncs are needed)."""
    import tempfile
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def remove(folder):
    shutil.rmtree(folder, ignore_errors=True)
