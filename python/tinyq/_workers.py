"""tinyq.Worker: one threads work() call for several queues of one file.

Each queue with its own handler, concurrency, lease, errors and prefetch, and one waiter,
one stop and one set of signal handlers for all of them (_worker.py's work_loop)."""
from __future__ import annotations

import threading
from typing import Any, Dict, Optional

from ._context import stop_grace
from ._protocol import queue_specs
from ._queue import Queue
from ._stopping import sooner
from ._worker import work_loop


class Worker:
    """Serves several queues of one SQLite file in one work() call.

        worker = tinyq.Worker("app.db", {
            "emails": send,                                   # concurrency 1
            "pdfs": (render, {"concurrency": 4, "lease": "5m"}),
        })
        worker.work()     # until worker.stop(), SIGTERM or SIGINT

    `queues`: queue name -> handler, or (handler, options), the options those of
    Queue.work that belong to one queue: concurrency, lease, errors, prefetch. `worker`
    (the name it claims under) and `poll` are the call's. `db` is a path or a connection
    of yours with tinyq loaded, as for Queue."""

    def __init__(self, db: Any, queues: Dict[str, Any], worker: Optional[str] = None, poll: float = 1.0):
        self.queues = queue_specs(queues)
        self._worker, self._poll = worker, poll
        self._base = Queue(db, next(iter(self.queues)))   # its connection and file
        self._stopping = threading.Event()
        self._grace_ends: Optional[float] = None
        self._working = threading.Lock()

    def work(self) -> Dict[str, int]:
        """Serve every queue until stop(), SIGTERM or SIGINT (as Queue.work does one);
        returns how many jobs each queue's pool claimed. A failure in one queue's machinery
        (a connection that cannot open, the waiter's tq_wait_any) stops them all and work()
        raises it."""
        path = self._base.path or self._base._database_path()
        if not self._working.acquire(blocking=False):
            raise RuntimeError("this Worker is already working")
        try:
            return work_loop(self, self.queues, path, self._base._connector(path), worker=self._worker,
                             poll=self._poll)
        finally:
            self._working.release()

    def stop(self, timeout: Optional[float] = None) -> None:
        """As Queue.stop, for every queue: claim nothing more, return once the work in
        flight is done (`timeout`: stop()'s grace, in seconds)."""
        self._grace_ends = sooner(self._grace_ends, stop_grace(timeout))
        self._stopping.set()

    def close(self) -> None:
        self._base.close()

    def __repr__(self) -> str:
        return "Worker(%r, %r)" % (self._base.path or self._base.conn, list(self.queues))
