"""Queue.drain and AsyncQueue.drain: work() until nothing of the queue is due or running.

The drain is work() with a watcher beside it that calls stop() once the queue's
tq_stats row says no job runs and none waits (is due now), and a tally of how the
attempts it ran ended. The store says when the queue is idle, not the pool: a job that
a handler adds, a dependent that a done job unblocks, a retry whose backoff has ended,
all show as waiting before the attempt that made them is settled."""
from __future__ import annotations

import json
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._context import Cancelled, Outcome
from ._sql import _one, _rows

CHECK_EVERY = 0.02    # seconds between two looks at tq_stats while the drain runs

_IDLE_SQL = "SELECT running, waiting, paused FROM tq_stats(?)"


def idle(conn: Any, queue: str) -> bool:
    """Nothing of `queue` runs, and nothing is due now (or the queue is paused)."""
    rows = _rows(conn, _IDLE_SQL, queue)
    if not rows:                      # no job, no setting: nothing ever ran
        return True
    running, waiting, paused = rows[0]
    return running == 0 and (waiting == 0 or bool(paused))


class Tally:
    """How the attempts of one drain ended: returned (done), run.fail (failed), or an
    error or run.retry, which is a retry while the job has tries left, else failed (the
    store says which, once the drain is over)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0
        self.failed = 0
        self.errors: List[Tuple[str, int]] = []   # (id, attempt) that ended in an error or retry

    def ended(self, run: Any, how: str) -> None:
        with self.lock:
            if how == "done":
                self.done += 1
            elif how == "fail":
                self.failed += 1
            elif how in ("error", "retry"):
                self.errors.append((run.id, run.attempt))

    def ended_by(self, run: Any, exc: BaseException) -> None:
        if isinstance(exc, Cancelled) or isinstance(exc, (KeyboardInterrupt, SystemExit)):
            return
        if isinstance(exc, Outcome):
            self.ended(run, exc.outcome or "")
        elif type(exc).__name__ != "CancelledError":
            self.ended(run, "error")

    def summary(self, conn: Any) -> Dict[str, int]:
        """{"done": n, "failed": n, "retried": n}: an attempt that ended in an error is
        counted failed when it was the job's last (the job failed at that attempt)."""
        failed, retried = self.failed, 0
        for job_id, attempt in self.errors:
            text = _one(conn, "SELECT tq_get(?)", job_id)
            job = json.loads(text) if text else {}
            if job.get("state") == "failed" and job.get("attempt") == attempt:
                failed += 1
            else:
                retried += 1
        return {"done": self.done, "failed": failed, "retried": retried}


def counting(handler: Callable[..., Any], tally: Tally) -> Callable[..., Any]:
    def counted(payload: Any, run: Any) -> Any:
        try:
            result = handler(payload, run)
        except BaseException as exc:
            tally.ended_by(run, exc)
            raise
        if not run.cancelled:
            tally.ended(run, "done")
        return result
    return counted


def counting_async(handler: Callable[..., Any], tally: Tally) -> Callable[..., Any]:
    async def counted(payload: Any, run: Any) -> Any:
        try:
            result = await handler(payload, run)
        except BaseException as exc:
            tally.ended_by(run, exc)
            raise
        if not run.cancelled:
            tally.ended(run, "done")
        return result
    return counted


class Watcher(threading.Thread):
    """Beside the drain's work(): stop() once the queue is idle, or once the drain has
    ended otherwise (`ended`). A failure to look stops the drain too, which raises it."""

    def __init__(self, connect: Callable[[], Any], queue: str, stop: Callable[[], None]):
        super().__init__(name="tinyq-drain", daemon=True)
        self.connect, self.queue, self.stop = connect, queue, stop
        self.ended = threading.Event()
        self.failure: Optional[BaseException] = None

    def run(self) -> None:
        try:
            conn = self.connect()
            try:
                while not self.ended.wait(CHECK_EVERY):
                    if idle(conn, self.queue):
                        break
            finally:
                conn.close()
        except BaseException as exc:
            self.failure = exc
        self.stop()

    def close(self) -> None:
        """After work() returned: end the thread; raise what it failed with."""
        self.ended.set()
        self.join()
        if self.failure is not None:
            raise self.failure
