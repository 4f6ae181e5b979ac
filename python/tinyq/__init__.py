"""tinyq for Python: load the extension, add jobs, and run workers.

Pure Python over the standard sqlite3 module (apsw connections work too).

    import tinyq
    replies = tinyq.Queue("app.db", "replies")
    replies.add({"messageId": 41}, id="reply:41")

    def answer(payload, run):
        text = run.step("answer", lambda: model.answer(payload["messageId"]))
        ...
        return {"sent": True}

    replies.work(answer, concurrency=4)      # until SIGTERM/SIGINT or replies.stop()

For asyncio, `tinyq.AsyncQueue` has the same methods as coroutines (see _aio.py).
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from typing import Any, Callable, Dict, List, Optional, Union

from ._context import Cancelled, JobContextFilter, Outcome, current_run
from ._schedules import Schedules
from ._sql import _encode, _one, _options, _rows
from ._worker import Run, work_loop

__all__ = ["load", "open", "extension_path", "Queue", "AsyncQueue", "Run", "AsyncRun", "Outcome",
           "Cancelled", "current_run", "JobContextFilter"]
__version__ = "0.1.0"

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


def load(conn: Any) -> Any:
    """Load the tinyq extension into a sqlite3 (or apsw) connection; returns the connection."""
    enable = getattr(conn, "enable_load_extension", None) or getattr(conn, "enableloadextension", None)
    load_ext = getattr(conn, "load_extension", None) or getattr(conn, "loadextension", None)
    if enable is None or load_ext is None:
        raise RuntimeError("this Python's sqlite3 module cannot load extensions (it was built "
                           "without them): use a Python whose sqlite3 can, such as Debian's "
                           "/usr/bin/python3, or apsw")
    enable(True)
    try:
        load_ext(extension_path())
    finally:
        enable(False)
    return conn


def open(path: Union[str, "os.PathLike[str]"], busy_timeout: float = 5.0) -> sqlite3.Connection:  # noqa: A001 (mirrors sqlite3.connect / builtins.open)
    """A sqlite3 connection the way a worker wants one: tinyq loaded, WAL,
    synchronous=FULL, a busy timeout, and autocommit (isolation_level=None)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout)
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
    _rows(conn, "PRAGMA journal_mode=WAL")
    _rows(conn, "PRAGMA synchronous=FULL")  # power-safe commits: docs/guarantees.md


class Queue(Schedules):
    """One named queue in one SQLite file.

    `conn_or_path` is a path (the Queue opens its own connection with `tinyq.open`) or a
    connection of yours with tinyq loaded. The methods other than `work` run on that
    connection, in whatever transaction it is in: they never begin or commit. `work` opens
    a connection per thread to the same file.
    """

    def __init__(self, conn_or_path: Any, name: str):
        self.name = name
        if isinstance(conn_or_path, (str, bytes, os.PathLike)):
            self.path = os.fspath(conn_or_path)
            self.conn = open(self.path)
            self._owns_conn = True
        else:
            self.path = None
            self.conn = conn_or_path
            self._owns_conn = False
        self._stopping = threading.Event()

    # -- jobs -------------------------------------------------------------------------

    def add(self, payload: Any, id: Optional[str] = None, delay: Any = None, at: Any = None,
            group: Optional[str] = None, priority: Optional[int] = None,
            attempts: Optional[int] = None, meta: Optional[Dict[str, Any]] = None) -> str:
        """Add a job; returns its id. A dict/list payload is stored as JSON text. `meta` (a
        dict: a correlation id, a tenant...) is kept beside the payload; handlers see it as
        run.meta (it needs a store of schema 3 or later)."""
        opts = _options(id=id, delay=delay, at=at, group=group, priority=priority,
                        attempts=attempts, meta=meta)
        if opts is None:
            return _one(self.conn, "SELECT tq_add(?, ?)", self.name, _encode(payload))
        return _one(self.conn, "SELECT tq_add(?, ?, ?)", self.name, _encode(payload), opts)

    def get(self, id: str) -> Optional[Dict[str, Any]]:
        """The job as a dict (tq_get), or None when there is no such job."""
        text = _one(self.conn, "SELECT tq_get(?)", id)
        return None if text is None else json.loads(text)

    def cancel(self, id: str) -> bool:
        """Remove a scheduled, waiting or running job; False when there was nothing to cancel."""
        return bool(_one(self.conn, "SELECT tq_cancel(?)", id))

    def retry(self, id: str) -> bool:
        """Make a failed job waiting again with a fresh attempt budget."""
        return bool(_one(self.conn, "SELECT tq_retry(?)", id))

    def watch(self, since: int = 0) -> List[Dict[str, Any]]:
        """This queue's state changes with seq > since, oldest first, as dicts."""
        cols = ("seq", "id", "queue", "state", "attempt", "at", "detail")
        rows = _rows(self.conn, "SELECT %s FROM tq_watch(?, ?)" % ", ".join(cols),
                     since, self.name)
        return [dict(zip(cols, row)) for row in rows]

    def settings(self, **settings: Any) -> Optional[Dict[str, Any]]:
        """Read (no arguments) or set the queue's settings; returns the effective settings.
        Durations may be text ('30s'), integer ms or timedelta."""
        opts = _options(**settings)
        if opts is None:
            text = _one(self.conn, "SELECT tq_queue(?)", self.name)
        else:
            text = _one(self.conn, "SELECT tq_queue(?, ?)", self.name, opts)
        return None if text is None else json.loads(text)

    # -- working ----------------------------------------------------------------------

    def work(self, handler: Callable[[Any, Run], Any], concurrency: int = 1,
             worker: Optional[str] = None, poll: float = 1.0, lease: Any = None,
             errors: str = "message", prefetch: Union[int, str] = "auto") -> int:
        """Run `handler(payload, run)` for this queue's jobs until `stop()`, SIGTERM or SIGINT.

        `concurrency` long-lived threads, each with its own connection (`run.conn`), each
        settling its last job and claiming its next in one transaction. One heartbeat renews
        every running job's lease at half its length, in one transaction. When idle, one
        thread sleeps in `tq_wait` (at most `poll` seconds at a time) for all of them. On
        stop, nothing more is claimed and work() returns once the jobs in flight have
        finished and settled. A raised exception is recorded as "Class: message", or only
        "Class" with errors="class". `prefetch`: how many jobs each thread claims ahead of
        the one it runs (leased and renewed while they wait, settled together, put back in
        line on stop). "auto" (the default) claims 7 ahead only while the thread's recent
        handlers took under a millisecond, so a backlog of tiny jobs costs one commit per 8;
        0 never claims ahead. Returns how many jobs this call
        claimed.
        """
        path = self.path or self._database_path()
        return work_loop(self, handler, lambda: _open_like(self.conn, path),
                         concurrency=concurrency, worker=worker, poll=poll, lease=lease,
                         errors=errors, prefetch=prefetch)

    def stop(self) -> None:
        """Ask work() to claim nothing more and return once the work in flight is done."""
        self._stopping.set()

    def close(self) -> None:
        if self._owns_conn:
            self.conn.close()

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc):
        self.close()

    def _database_path(self) -> str:
        for _, name, file in _rows(self.conn, "PRAGMA database_list"):
            if name == "main" and file:
                return file
        raise ValueError("Queue.work needs a database file (not :memory: or a temp db)")

    def __repr__(self) -> str:
        return "Queue(%r, %r)" % (self.path or self.conn, self.name)


from ._aio import AsyncQueue, AsyncRun  # noqa: E402 (it builds on the functions above)
