"""The asyncio helper's run: AsyncRun (what an async handler gets) and _Pace (its prefetch).

AsyncRun's step, progress and workflows are coroutines over the work's SQL thread
(_aio_thread.py); _Pace extends the threads' Pace with the asyncio rule for how many jobs
work() claims ahead of its running handlers."""
from __future__ import annotations

import inspect
import json
from typing import Any, Callable, Dict, List, Optional

from ._aio_thread import _DbThread
from ._context import RunBase, step_text
from ._group import Write
from ._otel import step as step_span
from ._protocol import Pace, moving_average
from ._sql import _decode, _encode, _one, _rows
from ._waits import (JOBS_OF, NOW, STEP_ROW, after_results, duration_ms, signal_steps, signal_wait, sleep_step,
                     sleep_until, wait_ids)


class AsyncRun(RunBase):
    """What an async handler gets besides its payload: the attempt and its controls.
    `step` and `progress` are coroutines; `retry`, `snooze` and `fail` raise as in Run."""

    def __init__(self, db: _DbThread, job: Dict[str, Any]):
        super().__init__(job)
        self._db = db
        self._payload = job["payload"]   # as stored: decoded when its handler starts

    async def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """The answer kept under `name` by any attempt; else fn()'s answer (awaited when
        fn returns an awaitable), kept as JSON (one JSON cannot hold fails the job for good:
        _context.step_text)."""
        self._step_after_end(name)
        known, kept = self._kept_here(name)
        if not known:
            kept = await self._db.read(Write.call("tq_step_get", self.id, name))
        if kept is None:
            with step_span(name):   # OpenTelemetry, when installed
                value = fn()
                if inspect.isawaitable(value):
                    value = await value
            kept = await self._db.write(Write.call("tq_step_put", self.id, self.attempt, name, step_text(name, value)))
            if kept is None:
                self._lost_step(name)
        self._steps[name] = kept
        return _decode(kept)

    async def progress(self, value: Any) -> bool:
        """Record progress (text as is, anything else as JSON); False when the job is gone
        (cancelled: run.cancelled), or when the attempt is over (a task the handler started
        calling it after the handler returned: a warning says so; cancelled stays as it was)."""
        if self._progress_after_end():
            return False
        ok = bool(await self._db.write(Write.call("tq_progress", self.id, self.attempt, _encode(value))))
        if not ok:
            self.cancelled = True
        return ok

    # Workflows: as Run's (_run.py), as coroutines.

    async def wait_for(self, ids: Any) -> List[Any]:
        """The results of the jobs `ids`, in order, once every one is done (as Run.wait_for)."""
        ids = wait_ids(ids)
        return after_results(ids, await self._db.call(_rows, JOBS_OF, self.id, json.dumps(ids)))

    async def wait_signal(self, name: str, timeout: Any = None) -> Any:
        """The payload of the signal `name`, or None after `timeout` (as Run.wait_signal)."""
        payload_step, until_step = signal_steps(name)
        self._new_wait("wait_signal", payload_step, name)
        kept = await self._db.call(_rows, STEP_ROW, self.id, payload_step)
        if kept:
            return _decode(kept[0][0])
        now = await self._db.call(_one, NOW)
        until = await self.step(until_step, lambda: None if timeout is None else now + duration_ms(timeout, "wait_signal"))
        return signal_wait(name, until, now)

    async def sleep(self, name: str, duration: Any) -> None:
        """A durable sleep of `duration` (as Run.sleep)."""
        step = sleep_step(name)
        self._new_wait("sleep", step, name)
        now = await self._db.call(_one, NOW)
        sleep_until(await self.step(step, lambda: now + duration_ms(duration, "sleep")), now)


class _Pace(Pace):
    """How many jobs work() claims ahead of its running handlers (`prefetch`). A whole
    number is fixed. "auto" claims ahead the more of two counts:
    - the jobs that its handlers are expected to end while one settle-and-claim commits:
      concurrency x that commit's time / a handler's time (moving averages), rounded down
      (handlers far longer than a commit claim none ahead: one would wait a whole handler's
      time), at most `concurrency`, and AUTO_AHEAD at least while the handlers take under
      FAST seconds (the threads' rule, Pace);
    - while the handlers take under PREDICT_S on average (and longer than the lead), the
      running handlers expected (from their start and that average) to end within the next
      `lead()` seconds, two settle-and-claims' time and LEAD_MIN_S at least: handlers that
      started together end together (a thousand model calls of 0.2 s), so the jobs they
      make way for are claimed before, while the handlers still run, and a job claimed
      ahead waits about that lead for its place. 80 ms, so that those claims commit before
      the wave's ends and their step puts, not among them. _AsyncWork wakes for it on a
      timer, not only when a handler ends.
    A place that frees then starts a job at once, instead of after the commit that settles
    its last job and claims the next. The first claim takes only the free places."""

    PREDICT_S = 1.0
    LEAD_MIN_S = 0.08

    def __init__(self, prefetch: Any, concurrency: int):
        super().__init__(prefetch)               # `average`: a handler's time
        self.concurrency = concurrency
        self.commit: Optional[float] = None      # a settle-and-claim's time (a moving average)

    def committed(self, seconds: float) -> None:
        self.commit = moving_average(self.commit, seconds)

    def ahead(self) -> int:
        if self.fixed is not None:
            return self.fixed
        if self.average is None or self.commit is None:
            return 0
        ending = self.concurrency * self.commit / max(self.average, 1e-6)
        return max(self.AUTO_AHEAD if self.average < self.FAST else 0,
                   min(self.concurrency, int(ending)))   # rounded down: none for long handlers

    def predicts(self) -> bool:
        """Whether handlers' ends are predicted: auto, handlers that average under PREDICT_S
        and over the lead (shorter ones are all as good as ended: the commit-time rule serves)."""
        return (self.fixed is None and self.average is not None
                and self.lead() < self.average < self.PREDICT_S)

    def lead(self) -> float:
        return max(self.LEAD_MIN_S, 2 * (self.commit or 0.0))
