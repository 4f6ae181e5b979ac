"""Connections with tinyq loaded: finding the extension, loading it, and tinyq.open.

Where the extension is, loading it into a sqlite3 or apsw connection, and the connection
a worker wants (tinyq.open)."""
from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from typing import Any, Callable, Union

from ._sql import _rows

_HERE = os.path.dirname(os.path.abspath(__file__))
_SUFFIXES = (".so", ".dylib", ".dll")


def extension_path() -> str:
    """Where the tinyq extension is: $TINYQ_EXT, else a copy packaged next to this module,
    else the repository's dist/ (a path SQLite's load_extension accepts)."""
    env = os.environ.get("TINYQ_EXT")
    if env:
        return env
    for folder in (_HERE, os.path.join(_HERE, "..", "..", "dist")):
        for suffix in _SUFFIXES:
            candidate = os.path.normpath(os.path.join(folder, "tinyq" + suffix))
            if os.path.exists(candidate):
                return candidate
    raise FileNotFoundError("tinyq extension not found: set TINYQ_EXT, or build dist/tinyq.so (make)")


def _is_apsw(conn):
    return type(conn).__module__.split(".")[0] == "apsw"


NO_LOADING = (
    "this Python's sqlite3 module cannot load extensions (it was built without them, as "
    "pyenv's and some other Pythons are): pip install \"sqlite-tinyq[pysqlite3]\" (it adds "
    "pysqlite3-binary, a sqlite3 module that can) and open connections with tinyq.open or "
    "tinyq.Queue(path), which then use it; or use a Python whose sqlite3 can (Debian's "
    "/usr/bin/python3, the python.org builds), or apsw")


def _loads_extensions(module: Any) -> bool:
    return hasattr(module.Connection, "enable_load_extension")


def driver() -> Any:
    """The sqlite3 module tinyq.open uses: the standard library's when it can load
    extensions, else pysqlite3's (the extra `sqlite-tinyq[pysqlite3]`) when installed."""
    if _loads_extensions(sqlite3):
        return sqlite3
    try:
        from pysqlite3 import dbapi2  # type: ignore[import-not-found]
    except ImportError:
        return sqlite3
    return dbapi2


def load(conn: Any) -> Any:
    """Load the tinyq extension into a sqlite3 (or apsw, or pysqlite3) connection; returns
    the connection."""
    enable = getattr(conn, "enable_load_extension", None) or getattr(conn, "enableloadextension", None)
    load_ext = getattr(conn, "load_extension", None) or getattr(conn, "loadextension", None)
    if enable is None or load_ext is None:
        raise RuntimeError(NO_LOADING)
    enable(True)
    try:
        load_ext(extension_path())
    finally:
        enable(False)
    return conn


def open(path: Union[str, "os.PathLike[str]"], busy_timeout: float = 5.0,  # noqa: A001 (mirrors sqlite3.connect / builtins.open)
         check_same_thread: bool = True) -> sqlite3.Connection:
    """A sqlite3 connection the way a worker wants one: tinyq loaded, WAL,
    synchronous=FULL, a busy timeout, and autocommit (isolation_level=None). In a Python
    whose sqlite3 cannot load extensions, a pysqlite3 connection when it is installed."""
    conn = driver().connect(path, isolation_level=None, timeout=busy_timeout,
                           check_same_thread=check_same_thread)
    try:
        load(conn)
        _configure(conn, busy_timeout)
    except BaseException:
        conn.close()
        raise
    return conn


def _open_like(conn, path, busy_timeout=5.0):
    """A new connection to `path` of the same kind (sqlite3 or apsw) as `conn`."""
    if not _is_apsw(conn):
        return open(path, busy_timeout)
    import apsw
    new = apsw.Connection(path)
    load(new)
    _configure(new, busy_timeout)
    return new


def _configure(conn, busy_timeout):
    _rows(conn, "PRAGMA busy_timeout=%d" % int(busy_timeout * 1000))
    _to_wal(conn, busy_timeout)
    _rows(conn, "PRAGMA synchronous=FULL")  # power-safe commits: docs/guarantees.md


def _to_wal(conn, busy_timeout):
    """PRAGMA journal_mode=WAL, tried again for up to `busy_timeout` while the file is locked.
    Two connections that open a new file at once both switch it to WAL, and SQLite answers
    the loser "database is locked" at once, without waiting in its busy handler."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            _rows(conn, "PRAGMA journal_mode=WAL")
            return
        except Exception as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


# -- connections a tinyq object owns, and fork() ---------------------------------------------
# SQLite forbids carrying an open connection across fork(): the child's new connections to
# the same file would share the inherited lock and shared-memory bookkeeping and read a
# frozen view. So every connection a Queue or AsyncQueue opens for itself is closed before
# a fork when idle (and reopened on its next use, in each process), and one that was busy
# at the fork is refused in the child.


class OwnedConnection:
    """The connection a tinyq object opened for itself: opened on first use, closed when
    its owner goes (no cycle keeps it), closed before fork() when idle, and refused in a
    process other than the one that opened it."""

    def __init__(self, opener: Callable[[], Any]):
        self._opener = opener
        self._conn: Any = None
        self._pid = 0
        self.lock = threading.RLock()   # held by each use, so a fork never closes it mid-call
        _OWNED.add(self)

    def get(self) -> Any:
        with self.lock:
            if self._conn is not None and self._pid != os.getpid():
                raise RuntimeError(
                    "tinyq: this connection was opened by process %d and was in use when it "
                    "forked into process %d; SQLite connections must not cross fork(): open "
                    "the Queue in the child, or fork while no transaction is open"
                    % (self._pid, os.getpid()))
            if self._conn is None:
                self._conn = self._opener()
                self._pid = os.getpid()
            return self._conn

    def close(self) -> None:
        with self.lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()

    def close_if_idle(self) -> None:
        """Before a fork: close it unless a call or a transaction is using it."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            conn = self._conn
            if conn is not None and self._pid == os.getpid() and not _in_transaction(conn):
                self.close()
        finally:
            self.lock.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _in_transaction(conn: Any) -> bool:
    if _is_apsw(conn):
        return not conn.getautocommit()
    return conn.in_transaction


_OWNED: "weakref.WeakSet[OwnedConnection]" = weakref.WeakSet()


def _before_fork() -> None:
    for owned in list(_OWNED):
        owned.close_if_idle()


os.register_at_fork(before=_before_fork)


def owned_open(path: str, busy_timeout: float = 5.0) -> OwnedConnection:
    """An OwnedConnection over tinyq.open(path): usable from whichever thread holds its lock."""
    return OwnedConnection(lambda: open(path, busy_timeout, check_same_thread=False))
