"""The threads helper's run: Run (what a handler gets) and outcome_of (what its end settles).

A Run's step, progress and workflows (_waits.py) go through the connection of the thread
that runs it; inside work() its writes join the pool's group commit (_group.Leader)."""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._context import RunBase, step_text
from ._group import Leader, Write
from ._otel import step as step_span
from ._protocol import PROGRESS, STEP_GET, STEP_PUT, outcome_of_exception, result_outcome
from ._sql import _decode, _encode, _one, _rows
from ._waits import (JOBS_OF, NOW, STEP_ROW, after_results, duration_ms, signal_steps, signal_wait, sleep_step,
                     sleep_until, wait_ids)


class Run(RunBase):
    """What a handler gets besides its payload: the attempt it runs and its controls."""

    def __init__(self, conn: Any, job: Dict[str, Any], writes: Optional[Leader] = None):
        super().__init__(job)
        self.conn = conn                  # this thread's connection, for the handler's own SQL
        self._payload = job["payload"]
        self._writes = writes

    def _write(self, sql: str, function: str, *args: Any) -> Any:
        """A short write of this run's own. Inside work() it joins the pool's group commit
        (_group.Leader): the threads that write meanwhile share one commit, and threads
        of one process queue for SQLite's lock there rather than in its busy handler. A
        handler with a transaction of its own open on run.conn writes in it."""
        if self._writes is None or getattr(self.conn, "in_transaction", False):
            return _one(self.conn, sql, *args)
        return self._writes.write(self.conn, Write.call(function, *args))

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """The answer kept under `name` by any attempt; else fn()'s answer, kept (as JSON; an
        answer JSON cannot hold fails the job for good: _context.step_text)."""
        self._step_after_end(name)
        known, kept = self._kept_here(name)
        if not known:
            kept = _one(self.conn, STEP_GET, self.id, name)
        if kept is None:
            with step_span(name):
                value = step_text(name, fn())
            kept = self._write(STEP_PUT, "tq_step_put", self.id, self.attempt, name, value)
            if kept is None:
                self._lost_step(name)
        self._steps[name] = kept
        return _decode(kept)

    def progress(self, value: Any) -> bool:
        """Record progress (text as is, anything else as JSON); False when the job is gone
        (cancelled: run.cancelled), or when the attempt is over (a thread the handler started
        calling it after the handler returned: a warning says so; cancelled stays as it was)."""
        if self._progress_after_end():
            return False
        ok = bool(self._write(PROGRESS, "tq_progress", self.id, self.attempt, _encode(value)))
        if not ok:
            self.cancelled = True
        return ok

    # Workflows (_waits.py): each returns what it waited for, or ends the attempt ('wait' or
    # 'snooze', the worker's place freed) and the next attempt's replay returns it here.

    def wait_for(self, ids: Any) -> List[Any]:
        """The results of the jobs `ids`, in order, once every one is done; until then the
        job waits for them (blocked) and runs again when they have finished. One that failed
        for good or was cancelled fails this job, its error naming it. Every one is kept until
        this job has finished, also when all were done already (their first wait then ends
        the attempt once, and the job runs again at once: _waits.after_results)."""
        ids = wait_ids(ids)
        return after_results(ids, _rows(self.conn, JOBS_OF, self.id, json.dumps(ids)))

    def wait_signal(self, name: str, timeout: Any = None) -> Any:
        """The payload of the signal `name` (tq_signal); until it comes the job waits for it
        (blocked), at most `timeout` (a duration; None: for ever), then None. A second wait
        of one name in a job raises ValueError (RunBase._new_wait)."""
        payload_step, until_step = signal_steps(name)
        self._new_wait("wait_signal", payload_step, name)
        kept = _rows(self.conn, STEP_ROW, self.id, payload_step)
        if kept:
            return _decode(kept[0][0])
        now = _one(self.conn, NOW)
        until = self.step(until_step, lambda: None if timeout is None else now + duration_ms(timeout, "wait_signal"))
        return signal_wait(name, until, now)

    def sleep(self, name: str, duration: Any) -> None:
        """A durable sleep: returns once `duration` has passed since the first attempt that
        reached it (its wake time is the step `sleep:<name>`); until then the job snoozes. A
        second sleep of one name in a job raises ValueError (RunBase._new_wait)."""
        step = sleep_step(name)
        self._new_wait("sleep", step, name)
        now = _one(self.conn, NOW)
        sleep_until(self.step(step, lambda: now + duration_ms(duration, "sleep")), now)


def outcome_of(handler: Callable[..., Any], payload: Any, run: RunBase,
               errors: str) -> Tuple[Optional[str], Any]:
    """Run the handler; what to settle: (outcome, value), outcome None for nothing."""
    try:
        result = handler(payload, run)
    except BaseException as exc:
        return outcome_of_exception(exc, errors)
    return result_outcome(run, result)
