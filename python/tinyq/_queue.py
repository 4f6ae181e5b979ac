"""tinyq.Queue: one named queue in one SQLite file, its jobs, settings, schedules, work().

Its jobs, settings and schedules, and work() (the thread pool of _worker.py and
_pool.py)."""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from ._adds import add_many, add_options, after_list
from ._connection import _open_like, owned_open
from ._context import stop_grace
from ._drain import Tally, Watcher, counting
from ._schedules import Schedules
from ._sql import _decode, _encode, _one, _options, _rows, implicit_begin
from ._stopping import sooner
from ._worker import Run, work_loop


class Queue(Schedules):
    """One named queue in one SQLite file.

    `conn_or_path` is a path (the Queue opens its own connection with `tinyq.open`) or a
    connection of yours with tinyq loaded. The methods other than `work` run on that
    connection, in whatever transaction it is in: they never commit yours (`add_many` makes
    its adds one transaction: its own in autocommit, a savepoint inside yours). Its writes
    (add, add_many, signal, cancel, retry, settings, schedule...) join your transaction as an
    INSERT would: on a sqlite3 connection in the module's default (legacy) mode they first
    open the implicit transaction the module opens before an INSERT, so your rollback undoes
    them (JOB-02). `work` opens a connection per thread to the same file.

    A connection the Queue opened itself is closed with it (close(), or when the Queue goes),
    closed before a fork() while idle and reopened in each process on its next use
    (README, "Prefork servers").
    """

    def __init__(self, conn_or_path: Any, name: str):
        self.name = name
        if isinstance(conn_or_path, (str, bytes, os.PathLike)):
            self.path = os.fspath(conn_or_path)
            self._owned = owned_open(self.path)
            self._owned.get()              # a bad path fails here, not at the first call
            self._conn = None
        else:
            self.path = None
            self._owned = None
            self._conn = conn_or_path
        self._stopping = threading.Event()
        self._grace_ends: Optional[float] = None   # stop(timeout=...): monotonic end of the drain
        self._working = threading.Lock()   # held while work() runs: one work() per Queue

    @property
    def conn(self) -> Any:
        """The connection the methods other than work() run on."""
        return self._conn if self._owned is None else self._owned.get()

    def _writing(self) -> Any:
        """The connection for a write. On a connection of the caller's, the sqlite3 module's
        implicit transaction is opened first when an INSERT would open it (_sql.implicit_begin):
        a bare SELECT tq_add(...) would commit on its own there (JOB-02)."""
        conn = self.conn
        if self._owned is None:
            implicit_begin(conn)
        return conn

    # -- jobs -------------------------------------------------------------------------

    def add(self, payload: Any, id: Optional[str] = None, delay: Any = None, at: Any = None,
            group: Optional[str] = None, priority: Optional[int] = None,
            attempts: Optional[int] = None, meta: Optional[Dict[str, Any]] = None,
            expires: Any = None, on_conflict: Optional[str] = None, max_wait: Any = None,
            after: Optional[Sequence[str]] = None, after_failed: Optional[str] = None) -> str:
        """Add a job; returns its id. A dict/list payload is stored as JSON text. `meta` (a
        dict: a correlation id, a tenant...) is kept beside the payload; handlers see it as
        run.meta (it needs a store of schema 3 or later). `expires`: a job not started by then
        never starts and fails with the error 'expired' (a datetime, ms since the epoch,
        ISO-8601 text, or a duration from now: a timedelta or text like '15m').
        `on_conflict` when the id is present: 'keep' (the default: nothing), 'replace' (a job
        not started yet takes this add's payload and options) or 'debounce' (as replace,
        and its time becomes now + `delay`, never later than `max_wait` after the first add).
        Schema 6 for these three (docs/reference.md, tq_add). `after`: the ids of jobs this
        one waits for (it is blocked until every one has finished); `after_failed`: what one
        of them failing for good or being cancelled does to it, 'fail' (the default), 'run'
        or 'cancel' (schema 7)."""
        opts = add_options(id=id, delay=delay, at=at, group=group, priority=priority, attempts=attempts,
                           meta=meta, expires=expires, on_conflict=on_conflict, max_wait=max_wait,
                           after=after_list(after), after_failed=after_failed)
        if opts is None:
            return _one(self._writing(), "SELECT tq_add(?, ?)", self.name, _encode(payload))
        return _one(self._writing(), "SELECT tq_add(?, ?, ?)", self.name, _encode(payload), opts)

    def add_many(self, payloads: Iterable[Any], ids: Optional[Sequence[str]] = None, delay: Any = None,
                 at: Any = None, group: Optional[str] = None, priority: Optional[int] = None,
                 attempts: Optional[int] = None, meta: Optional[Dict[str, Any]] = None,
                 expires: Any = None, on_conflict: Optional[str] = None, max_wait: Any = None,
                 after: Optional[Sequence[str]] = None, after_failed: Optional[str] = None) -> List[str]:
        """Add one job per payload, with the same options (as add's), in one transaction and
        one statement; returns their ids in order. `ids`, when given, is each job's own id
        (as many as payloads). All or nothing: an add that fails rolls the others back. On a
        connection in autocommit it is its own transaction; inside yours, a savepoint."""
        opts = add_options(delay=delay, at=at, group=group, priority=priority, attempts=attempts,
                           meta=meta, expires=expires, on_conflict=on_conflict, max_wait=max_wait,
                           after=after_list(after), after_failed=after_failed)
        return add_many(self._writing(), self.name, payloads, ids, opts)

    def get(self, id: str) -> Optional[Dict[str, Any]]:
        """The job as a dict (tq_get), or None when there is no such job."""
        text = _one(self.conn, "SELECT tq_get(?)", id)
        return None if text is None else json.loads(text)

    def deps(self, id: str) -> List[Dict[str, Any]]:
        """The jobs `id` waits or waited for (tq_deps), each as {id, state, result, error}."""
        return [{"id": dep, "state": state, "result": _decode(result), "error": error}
                for dep, state, result, error in _rows(self.conn, "SELECT id, state, result, error FROM tq_deps(?)", id)]

    def signal(self, name: str, payload: Any = None, keep: Any = None) -> int:
        """Send the signal `name` (tq_signal): every job waiting for it (run.wait_signal)
        gets `payload` and runs again; a wait that begins later, within `keep` (default 7d),
        gets it at once. Returns how many jobs it woke. Not only this queue's jobs: a signal's
        name is the whole store's."""
        options = _options(keep=keep)
        args = (name, _encode(payload)) + (() if options is None else (options,))
        return _one(self._writing(), "SELECT tq_signal(%s)" % ", ".join("?" * len(args)), *args)

    def cancel(self, id: str) -> bool:
        """Remove a scheduled, waiting, blocked or running job; False when there was nothing to cancel."""
        return bool(_one(self._writing(), "SELECT tq_cancel(?)", id))

    def retry(self, id: str) -> bool:
        """Make a failed job waiting again with a fresh attempt budget."""
        return bool(_one(self._writing(), "SELECT tq_retry(?)", id))

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
            text = _one(self._writing(), "SELECT tq_queue(?, ?)", self.name, opts)
        return None if text is None else json.loads(text)

    # -- working ----------------------------------------------------------------------

    def work(self, handler: Callable[[Any, Run], Any], concurrency: int = 1,
             worker: Optional[str] = None, poll: float = 1.0, lease: Any = None,
             errors: str = "message", prefetch: Union[int, str] = "auto") -> int:
        """Run `handler(payload, run)` for this queue's jobs until `stop()`, SIGTERM or SIGINT.

        `concurrency` long-lived threads, each with its own connection (`run.conn`), each
        settling its last job and claiming its next in one transaction. One heartbeat renews
        every running job's lease at half its length, in one transaction. When idle, one
        thread sleeps in `tq_wait_any` for all of them, and they claim only once it says a
        job may be claimable (`poll`: how long it waits out a busy store). tinyq.Worker serves
        several queues in one call, with one waiter for all of them. On
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
        if not self._working.acquire(blocking=False):
            raise RuntimeError("this Queue is already working")   # as AsyncQueue and Node
        try:
            options = dict(concurrency=concurrency, lease=lease, errors=errors, prefetch=prefetch)
            return work_loop(self, {self.name: (handler, options)}, path, self._connector(path),
                             worker=worker, poll=poll)[self.name]
        finally:
            self._working.release()

    def drain(self, handler: Callable[[Any, Run], Any], concurrency: int = 1,
              worker: Optional[str] = None, poll: float = 1.0, lease: Any = None,
              errors: str = "message", prefetch: Union[int, str] = "auto") -> Dict[str, int]:
        """work(), until no job of this queue is running and none is due now; then return
        {"done": n, "failed": n, "retried": n}, how the attempts this call ran ended (an
        error or run.retry is "retried" while the job had tries left, else "failed").

        For scripts, cron runs and tests: it runs the jobs that are due, and those that
        become due while it runs: jobs the handlers add, dependents a finished job
        unblocks, retries and scheduled jobs whose time comes while other jobs still run.
        It does not wait for a job scheduled later (a retry's backoff, `delay`, `at`) once
        nothing else runs: that job stays scheduled for the next work() or drain() (a test
        makes it due by adding it with the adding connection's clock pinned back, or with
        the queue's backoff set to 0). A paused queue's waiting jobs are not waited for.
        The same options as work(); stop() and signals end it early, as they end work()."""
        path = self.path or self._database_path()
        if self._working.locked():   # else the watcher would stop the other work()
            raise RuntimeError("this Queue is already working")
        tally = Tally()
        watcher = Watcher(self._connector(path), self.name, self.stop)
        watcher.start()
        try:
            self.work(counting(handler, tally), concurrency=concurrency, worker=worker, poll=poll,
                      lease=lease, errors=errors, prefetch=prefetch)
        finally:
            watcher.close()
        return tally.summary(self.conn)

    def stop(self, timeout: Optional[float] = None) -> None:
        """Ask work() to claim nothing more and return once the work in flight is done.

        `timeout` (seconds; None: as long as it takes) bounds that wait: once it has passed,
        the handlers still running are abandoned (logged) and work() returns. An abandoned
        attempt settles nothing, whenever its handler returns (its thread, a daemon, keeps
        running, and its connection open, until then); one that still held its job keeps
        it until its lease runs out (no longer renewed), then the job runs again. A later
        stop(timeout=...) during the drain can shorten the grace, never lengthen it."""
        self._grace_ends = sooner(self._grace_ends, stop_grace(timeout))
        self._stopping.set()

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc):
        self.close()

    def _connector(self, path: str) -> Callable[[], Any]:
        """How work() opens a connection of its own to this queue's file."""
        return lambda: _open_like(self.conn, path)

    def _database_path(self) -> str:
        for _, name, file in _rows(self.conn, "PRAGMA database_list"):
            if name == "main" and file:
                return file
        raise ValueError("Queue.work needs a database file (not :memory: or a temp db)")

    def __repr__(self) -> str:
        return "Queue(%r, %r)" % (self.path or self.conn, self.name)
