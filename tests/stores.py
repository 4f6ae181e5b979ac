"""Big stores built once and copied: the stores of 100,000 and 1,000,000 jobs that COST-01
(test_cost.py) and the operator's pages (test_pages.py) measure take minutes to build, and
make test runs those files twice (Debian's SQLite, then a current one).

store(dest, key, build, sources) puts at `dest` the store `build(path)` makes. The first time,
build runs in a temporary file in the cache (target/test-stores/), which is checkpointed (a
complete database, no -wal or -shm beside it) and renamed into place: a run killed halfway
leaves no entry. After that each test gets its own copy, never the cached file itself.

An entry is found by a hash of what made it: `key` (what build makes, with its parameters),
the source files of `sources` (the code build runs), this file, sql/store.sql and
dist/tinyq.so. Any change to them builds the store again; the entry of the same key made by
other code is deleted then. TINYQ_STORE_CACHE=off builds every store in place (no cache);
TINYQ_STORE_CACHE=DIR keeps the cache in DIR.
"""
import functools
import hashlib
import os
import re
import shutil
import sqlite3
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(ROOT, "target", "test-stores")


def cache_dir():
    """The cache's directory, or None when TINYQ_STORE_CACHE=off."""
    where = os.environ.get("TINYQ_STORE_CACHE", "")
    if where == "off":
        return None
    return where or DEFAULT_DIR


@functools.lru_cache(maxsize=None)
def _file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry_digest(key, sources):
    """The hash an entry is found by: its key and every file whose code made it."""
    h = hashlib.sha256(key.encode())
    files = [os.path.join(ROOT, "dist", "tinyq.so"), os.path.join(ROOT, "sql", "store.sql"),
             os.path.abspath(__file__)] + [os.path.abspath(s) for s in sources]
    for path in files:
        h.update(b"\0" + path.encode() + b"\0" + _file_digest(path).encode())
    return h.hexdigest()[:20]


def _complete(path):
    """Moves what the WAL holds into the database file, so the file alone is the store
    (the journal mode recorded in it stays what build left)."""
    conn = sqlite3.connect(path)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0, f"{path}: a connection of the build is still open"
    finally:
        conn.close()
    for side in ("-wal", "-shm", "-journal"):
        if os.path.exists(path + side):
            assert os.path.getsize(path + side) == 0 or side == "-shm", path + side
            os.remove(path + side)


def _remove_stale(where, name, cached):
    """Deletes the entries of this key made by other code, and builds left by a run killed
    more than a day ago (a run going on now may be building)."""
    same_key = re.compile(re.escape(name) + r"\.[0-9a-f]{20}\.db")
    for other in os.listdir(where):
        path = os.path.join(where, other)
        try:
            if (same_key.fullmatch(other) and path != cached) or \
                    (other.startswith(".build-") and time.time() - os.path.getmtime(path) > 86400):
                os.remove(path)
        except FileNotFoundError:   # another run removed it first
            pass


def slug(key):
    """A file name for `key`."""
    return re.sub(r"[^A-Za-z0-9_=-]+", "_", key)[:120]


def store(dest, key, build, sources):
    """Makes `dest` a store as `build(path)` leaves it (build closes its connections):
    a copy of the cached one, built first if there is none for this key and code."""
    where = cache_dir()
    if where is None:
        build(dest)
        return dest
    os.makedirs(where, exist_ok=True)
    name = slug(key)
    cached = os.path.join(where, "%s.%s.db" % (name, entry_digest(key, sources)))
    try:
        shutil.copyfile(cached, dest)
        return dest
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".db", dir=where)
    os.close(fd)
    os.remove(tmp)              # build creates the store itself
    try:
        build(tmp)
        _complete(tmp)
        os.rename(tmp, cached)
    finally:
        for leftover in (tmp, tmp + "-wal", tmp + "-shm", tmp + "-journal"):
            if os.path.exists(leftover):
                os.remove(leftover)
    _remove_stale(where, name, cached)
    shutil.copyfile(cached, dest)
    return dest
