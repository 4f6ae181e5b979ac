"""tinyq.Queue: one named queue in one SQLite file, its jobs, settings and schedules, and
work() (the thread pool of _worker.py)."""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Union

from ._connection import _open_like, open
from ._schedules import Schedules
from ._sql import _encode, _one, _options, _rows
from ._worker import Run, work_loop


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
