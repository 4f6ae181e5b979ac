"""One queue of an asyncio work() call: _AsyncWork, its tasks, claim loop, heartbeat and drain.

Its SQL runs on a thread of its own (_aio_thread.py); the call (_aio.py's _AsyncCall) and
its waiter wake it. Also the checks and warnings of the loop: an async handler only, a
renewal that comes late (a handler blocking the loop), and a cleanup no cancellation cuts
short."""
from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Deque, Dict, List, Optional, Set, Tuple

from ._aio_run import AsyncRun, _Pace
from ._aio_thread import _DbThread
from ._context import current_run, is_busy
from ._group import Write
from ._otel import attempt
from ._protocol import (Share, check_work_args, claim_args, claim_sql, lease_options, lease_pairs,
                        lease_value, outcome_of_exception, renew_in, renew_soon, renewed, result_outcome,
                        schedule_renewal, settle_and_claim_in)
from ._sql import _decode
from ._stopping import abandon, grace_left

if TYPE_CHECKING:
    from ._aio import _AsyncCall

log = logging.getLogger("tinyq")


# A claim takes CLAIM_PART jobs at most (a larger want is claimed over the next turns): the
# first of a thousand jobs start after a short commit, and no claim of a whole wave holds
# that wave's puts. A claim takes SETTLES_PER_COMMIT settles with it at most, and none when
# more than CLAIM_FIRST are due (then the claim goes first, alone, once: settles_due).
CLAIM_PART = 250
SETTLES_PER_COMMIT = 100
CLAIM_FIRST = 100


class _AsyncWork:
    """One queue of an `await q.work(...)` (or of an AsyncWorker's): its tasks, heartbeat
    and claim loop, the SQL on a thread of its own; the call's waiter wakes it."""

    def __init__(self, call: "_AsyncCall", name: str, handler: Callable[[Any, AsyncRun], Awaitable[Any]],
                 concurrency: int = 1, lease: Any = None, errors: str = "message", prefetch: Any = "auto"):
        check_work_args(concurrency, errors, prefetch)
        check_async(handler)
        self.call = call
        self.owner = call.owner
        self.name = name
        self.handler = handler
        self.concurrency = concurrency
        self.worker = call.worker
        self.errors = errors
        self.lease_options = lease_options(lease)
        self.lease = lease_value(lease)
        self.db = _DbThread(call.connect, "tinyq-aio-work")
        self.tasks: Set[asyncio.Task] = set()
        self.runs: Dict[AsyncRun, float] = {}        # leased job -> monotonic time of its renewal
        self.beat = asyncio.Event()                  # a run to renew came: the heartbeat wakes
        # runs whose handler is running (stop's grace), in the order they started, with their
        # start (monotonic; predicted())
        self.running: Dict[AsyncRun, float] = {}
        self.ahead: Deque[AsyncRun] = collections.deque()   # claimed ahead, not started (prefetch)
        self.pace = _Pace(prefetch, concurrency)
        self.finished: List[Tuple[AsyncRun, str, Any]] = []
        self.settles_waited = False     # the last claim went alone, its settles due waited
        self.may_claim = True
        self.share = Share(name)        # a full concurrency limit: settles go alone
        self.event = asyncio.Event()
        self.handled = 0

    def wake(self) -> None:
        self.event.set()

    def woke(self) -> None:            # the waiter's tq_wait_any named this queue
        self.may_claim = True
        self.event.set()

    async def run(self) -> int:
        sql = await self.db.call(claim_sql, self.lease_options)
        heartbeat = asyncio.ensure_future(self.heartbeat())
        try:
            while True:
                self.event.clear()
                stopping = self.owner._stopping
                free = 0 if stopping else self.concurrency - len(self.tasks)
                ahead, wake_at = self.pace.ahead(), None
                if self.pace.predicts() and not stopping:
                    due, wake_at = self.predicted(len(self.ahead) - free)
                    ahead = max(ahead, min(self.concurrency, due))
                want = 0 if stopping or not self.may_claim else free + ahead - len(self.ahead)
                want = min(want, CLAIM_PART)
                if self.finished or want > 0:
                    batch = self.settles_due(want > 0)
                    if self.share.yields(bool(batch)) and want > 0:
                        # the settles alone, the claim a moment later: another process may
                        # take the place they free (Share)
                        if batch:
                            await self.settle_and_claim(sql, batch, None)
                        await asyncio.sleep(self.share.wait_left() or 0.001)
                        continue
                    args = None if want <= 0 else claim_args(self.name, self.worker, want, self.lease_options)
                    started = time.monotonic()
                    jobs = await self.settle_and_claim(sql, batch, args)
                    self.pace.committed(time.monotonic() - started)
                    self.claimed(jobs)
                    if want > 0 and len(jobs) < want:
                        self.may_claim = False     # until the waiter says a job may be there
                        self.call.sleep(self)
                    continue
                if stopping:
                    break        # finish() waits for the work in flight
                if wake_at is None or not self.may_claim:
                    await self.event.wait()
                    continue
                try:             # or when the next handlers are expected to be near their end
                    await asyncio.wait_for(self.event.wait(), max(wake_at - time.monotonic(), 0.001))
                except asyncio.TimeoutError:
                    pass
        finally:
            await _uncancellable(self.finish(sql, heartbeat))
        return self.handled

    def settles_due(self, claiming: bool) -> List[Tuple[AsyncRun, str, Any]]:
        """The settles that go with this turn's claim, taken from `finished`. Many due and
        jobs to claim: none, once (the claim goes first, alone: its handlers wait, the
        settles wait for nobody), never twice in a row: in a backlog of fast jobs, whose
        places free as fast as they are claimed, the settles would wait for the backlog's
        end while their leases ran out (an ended job is renewed no more) and the jobs ran
        again. More than `concurrency` due (ends outpace the commits): all of them."""
        due = len(self.finished)
        if claiming and due > CLAIM_FIRST and not self.settles_waited:
            n = 0
        elif due > self.concurrency:
            n = due
        else:
            n = min(due, SETTLES_PER_COMMIT)
        self.settles_waited = n == 0 and due > 0
        batch = self.finished[:n]
        del self.finished[:n]
        return batch

    def predicted(self, covered: int) -> Tuple[int, Optional[float]]:
        """How many running handlers are expected to end within the pace's lead (from their
        start and the average handler's time), and when to look again: when the first
        running handler beyond the `covered` ones (as many as the jobs claimed ahead that no
        free place takes) comes within that lead. None: no such handler."""
        average, lead = self.pace.average or 0.0, self.pace.lead()
        horizon = time.monotonic() + lead - average    # started by then: expected to end soon
        due, seen, wake_at = 0, 0, None
        for started in self.running.values():
            if started <= horizon:
                due += 1
            elif seen >= covered:
                wake_at = started + average - lead
                break
            seen += 1
        return due, wake_at

    async def finish(self, sql: str, heartbeat: "asyncio.Future[None]") -> None:
        """Claim nothing more, wait for the work in flight, settle it, let go of everything."""
        self.call.stop()
        try:
            await self.drain(sql)
            # Jobs claimed ahead go back in line: a snooze of 0 does not use up a try.
            back = [(run, "snooze", 0) for run in self.take_all_ahead() if not run.cancelled]
            if self.finished or back:
                await self.settle_and_claim(sql, self.finished + back, None)
        finally:  # a last settle that fails still leaves the queue ready for another work()
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
            await self.db.close()

    async def drain(self, sql: str) -> None:
        """Wait for the handlers in flight, settling them as they end; once stop(timeout=...)'s
        grace has ended (a stop() during the drain may set or shorten it), abandon those still
        running and cancel their tasks, without waiting for them: a handler that ignores the
        cancellation settles nothing whenever it returns."""
        while self.tasks:
            if self.finished:
                batch, self.finished = self.finished, []
                await self.settle_and_claim(sql, batch, None)
                continue
            left = grace_left(self.owner._grace_ends)
            if left == 0.0:
                for run in self.running:
                    self.runs.pop(run, None)
                abandon(list(self.running))
                for task in self.tasks:
                    task.cancel()
                return
            self.event.clear()      # set by a handler that ends and by stop()
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def settle_and_claim(self, sql: str, settles: List[Tuple[AsyncRun, str, Any]],
                               args: Optional[tuple]) -> List[Dict[str, Any]]:
        """The settles and the claim (args given: tq_claim's) as one write of the next group
        commit. Busy every time: the settles are dropped (their leases run out and the jobs
        run again) and the claim returns nothing."""
        try:
            return await self.db.write(Write(settle_and_claim_in, (sql, settles, args, self.share)))
        except Exception as exc:
            if not is_busy(exc):
                raise
            log.error("tinyq: settling %d jobs / claiming failed: %s", len(settles), exc)
            return []

    def claimed(self, jobs: List[Dict[str, Any]]) -> None:
        """Start the claimed jobs in the free places; the others wait in line, leased and
        renewed by the heartbeat, for a place to free."""
        for job in jobs:
            run = AsyncRun(self.db, job)
            self.runs[run] = schedule_renewal(run)
            self.ahead.append(run)
        if jobs:
            self.beat.set()            # the heartbeat, asleep while nothing is leased, renews them
        self.start_ahead()

    def start_ahead(self) -> None:
        while self.ahead and len(self.tasks) < self.concurrency and not self.owner._stopping:
            run = self.ahead.popleft()
            if run.cancelled:          # cancelled while it waited (its renewal said so)
                self.runs.pop(run, None)
                continue
            self.handled += 1
            # running from now on, for predicted(): its handler starts in this turn of the loop
            self.running[run] = time.monotonic()
            task = asyncio.ensure_future(self.run_job(run))
            self.tasks.add(task)
            task.add_done_callback(self.job_ended)

    def take_all_ahead(self) -> List[AsyncRun]:
        runs, self.ahead = list(self.ahead), collections.deque()
        for run in runs:
            self.runs.pop(run, None)
        return runs

    def job_ended(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.start_ahead()           # a freed place starts the next job claimed ahead at once
        self.event.set()

    async def run_job(self, run: AsyncRun) -> None:
        """One job, in its own task (so its own context: current_run is this run)."""
        current_run.set(run)
        started = time.monotonic()
        try:
            with attempt(self.name, run) as span:   # OpenTelemetry's consumer span, when installed
                try:
                    result = await self.handler(_decode(run._payload), run)
                except BaseException as exc:
                    outcome, value = outcome_of_exception(exc, self.errors)
                else:
                    outcome, value = result_outcome(run, result)
                span.ended(outcome, value)
        finally:
            self.runs.pop(run, None)
            self.running.pop(run, None)
            run._end("finished")
            self.pace.took(time.monotonic() - started)
        if outcome is not None and not run.cancelled:
            self.finished.append((run, outcome, value))

    async def heartbeat(self) -> None:
        """When the earliest leased job (running, or claimed ahead) is at half its lease,
        renew every leased job, in one statement of one transaction."""
        while True:
            if not self.runs:          # idle: asleep until a job runs
                self.beat.clear()
                await self.beat.wait()
                continue
            now = time.monotonic()
            due = min(self.runs.values())
            await asyncio.sleep(max(due - now, 0.001))
            if not any(at <= time.monotonic() for at in self.runs.values()):
                continue
            warn_if_late(self.runs)
            runs = list(self.runs)
            try:
                leases = await self.db.write(Write(renew_in, (lease_pairs(runs), self.lease)))
            except Exception as exc:
                # Busy or not (a full disk...), try again soon: a heartbeat that ended here
                # would let every lease run out while its handler still works.
                log.warning("tinyq: renewing %d leases failed: %s", len(runs), exc)
                renew_soon(self.runs, runs, 0.25)
                continue
            renewed(self.runs, runs, leases)


def check_async(handler: Any) -> None:
    if not _is_async(handler):
        raise TypeError("AsyncQueue.work needs an async handler (async def), not %r: a plain "
                        "def would run on the event loop and its result could not be awaited; "
                        "use tinyq.Queue.work for it, or wrap it: `async def handler(payload, "
                        "run): return await asyncio.to_thread(f, payload, run)`" % (handler,))


def warn_if_late(due: Dict[AsyncRun, float]) -> None:
    """Log the jobs whose renewal comes late: more than half its interval (a quarter of the
    lease) past the time it was due. On an event loop that is a handler that blocks it
    (time.sleep, CPU work, blocking I/O without await), starving the heartbeat: past the
    lease another worker may take the job."""
    now = time.monotonic()
    late = sorted(((now - at, run) for run, at in due.items() if now - at > run._renew_every / 2),
                  key=lambda pair: -pair[0])
    if late:
        worst, run = late[0]
        log.warning("tinyq: the lease renewal of job %s (attempt %s) came %.2f s late%s: a handler is "
                    "blocking the event loop (time.sleep, CPU work or blocking I/O without await); run "
                    "it in a thread (asyncio.to_thread), or another worker may take the job once its "
                    "lease runs out", run.id, run.attempt, worst,
                    "" if len(late) == 1 else " (and %d more jobs)" % (len(late) - 1))


async def _uncancellable(cleanup: Awaitable[None]) -> None:
    """Await `cleanup` to its end even if the awaiting task is cancelled meanwhile (again: a
    wait_for timeout, then a shutdown), then pass the cancellation on: a cleanup cut short
    would leave finished jobs running and the queue "already working"."""
    task = asyncio.ensure_future(cleanup)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError()


def _is_async(handler: Any) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))
