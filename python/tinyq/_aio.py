"""tinyq for asyncio: `AsyncQueue`, whose methods are coroutines and whose `work()` runs
async handlers, many at once, without ever blocking the event loop.

    replies = tinyq.AsyncQueue("app.db", "replies")
    await replies.add({"messageId": 41}, id="reply:41")

    async def answer(payload, run):
        text = await run.step("answer", lambda: model.answer(payload["messageId"]))
        return {"sent": True}

    await replies.work(answer, concurrency=1000)   # until replies.stop(), SIGTERM or SIGINT

Every SQLite call runs on a thread of its own (one for the queue's methods, one for each
work()), never on the loop. Writes are group-committed (_group.py): the writes asked for
while the work's thread commits the last group go to the store in one transaction, each
handler resumed once its own write has committed; the step puts and progress that handlers
wait for commit apart from the settles, claims and renewals that nobody waits for
(_DbThread._next_group). When the queue is empty, the process's waiter thread for the file
(_waiter.py) sleeps in tq_wait_any and wakes the loop. tinyq.AsyncWorker serves several
queues in one work().
"""
from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ._connection import OwnedConnection, open as open_conn
from ._context import RunBase, current_run, is_busy, stop_grace
from ._group import Write, commit_group, run_reads
from ._protocol import (WAITER_JOIN_S, Pace, check_work_args, claim_args,
                        claim_sql, lease_options, lease_pairs, lease_value, moving_average, outcome_of_exception,
                        queue_specs, renew_in, renew_soon, renewed, result_outcome, schedule_renewal, settle_and_claim_in,
                        worker_name)
from ._queue import Queue
from ._sql import _decode, _encode, _one, _rows
from ._stopping import abandon, grace_left, sooner, stop_on_signals
from . import _waiter
from ._waits import (JOBS_OF, NOW, STEP_ROW, after_results, duration_ms, signal_steps, signal_wait, sleep_step,
                     sleep_until, wait_ids)

log = logging.getLogger("tinyq")

__all__ = ["AsyncQueue", "AsyncRun", "AsyncWorker"]


HANDLER_WRITES = ("tq_step_put", "tq_progress")   # the writes a handler waits for
PUTS_PER_COMMIT = 200   # ... in one group commit at most (_DbThread._next_group)
PUT_TURNS = 4           # turns of those alone in a row, at most, before the other writes go
# A claim takes CLAIM_PART jobs at most (a larger want is claimed over the next turns): the
# first of a thousand jobs start after a short commit, and no claim of a whole wave holds
# that wave's puts. A claim takes SETTLES_PER_COMMIT settles with it at most, and none when
# more than CLAIM_FIRST are due (then the claim goes first, alone, once: settles_due).
CLAIM_PART = 250
SETTLES_PER_COMMIT = 100
CLAIM_FIRST = 100


class _DbThread:
    """One thread and one connection (an OwnedConnection: closed before a fork while idle,
    reopened in each process): every call runs there, in order, so the loop never waits
    for SQLite and no two calls share the connection."""

    def __init__(self, connect: Callable[[], Any], name: str):
        self._owned = OwnedConnection(connect)
        self._connect = connect
        self._name = name
        self._pid = 0
        self._pool: Optional[ThreadPoolExecutor] = None
        # for the next turn of the thread: (write, is it a read, its caller's future)
        self._pending: List[Tuple[Write, bool, "asyncio.Future[Any]"]] = []
        self._committer: Optional["asyncio.Task[None]"] = None
        self._put_turns = 0        # turns in a row that committed handlers' writes alone, others pending
        self._reader: Optional["_DbThread"] = None   # reads' own thread and connection (read())

    def _run(self, fn: Callable[..., Any], args: tuple) -> Any:
        with self._owned.lock:
            return fn(self._owned.get(), *args)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pid != os.getpid():   # a forked child has no thread
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
            self._pid = os.getpid()
        return self._pool

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor(), self._run, fn, args)

    async def write(self, write: Write) -> Any:
        """`write` in the next group commit: its answer (or its error) once the transaction
        that holds it has committed. Writes asked for in the same turn of the loop, or while
        the thread commits the previous group, share one commit (the handlers' own writes
        apart from the others: _next_group)."""
        return await self._next_turn(write, False)

    async def read(self, read: Write) -> Any:
        """`read` in the next turn of a thread of its own (and its own connection: in WAL a
        read does not wait for a writer), beside the other reads asked for meanwhile (one hop
        to that thread for all of them), outside a transaction. A handler that starts reads
        its kept steps at once, rather than after the commit the writes' thread is in."""
        if self._reader is None:
            self._reader = _DbThread(self._connect, self._name + "-reads")
        return await self._reader._next_turn(read, True)

    async def _next_turn(self, write: Write, read: bool) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((write, read, future))
        if self._committer is None:
            self._committer = asyncio.ensure_future(self._turns())
        return await future

    async def _turns(self) -> None:
        """Runs the pending reads, then commits the pending writes, one group per turn of
        the thread, until none is left (_next_group: the handlers' writes first)."""
        try:
            while self._pending:
                turn, self._pending = self._next_group(self._pending)
                reads = [(write, future) for write, read, future in turn if read]
                writes = [(write, future) for write, read, future in turn if not read]
                if reads:
                    await self._serve(run_reads, reads)
                if writes:
                    await self._serve(commit_group, writes)
        finally:
            self._committer = None

    def _next_group(self, pending: List[Tuple[Write, bool, "asyncio.Future[Any]"]]) -> Tuple[list, list]:
        """This turn's part of `pending`, and what is left for the next. A handler waits for
        its step put or progress, while a settle, a claim ahead or a renewal waits for
        nobody: so the handlers' writes commit alone, PUTS_PER_COMMIT at most, and the
        others wait while those are pending, for PUT_TURNS turns in a row at most, then go
        alone. A wave of puts is then never held by a commit of hundreds of settles or a
        claim of hundreds of jobs, which go between waves."""
        puts = [item for item in pending if item[0].function in HANDLER_WRITES]
        if len(puts) == len(pending):
            self._put_turns = 0
            return puts[:PUTS_PER_COMMIT], puts[PUTS_PER_COMMIT:]
        others = [item for item in pending if item[0].function not in HANDLER_WRITES]
        if not puts or self._put_turns >= PUT_TURNS:
            self._put_turns = 0
            return others, puts
        self._put_turns += 1
        return puts[:PUTS_PER_COMMIT], puts[PUTS_PER_COMMIT:] + others

    async def _serve(self, run: Callable[[Any, List[Write]], None], part: List[Tuple[Write, "asyncio.Future[Any]"]]) -> None:
        """`run(conn, writes)` on the thread, then each caller's answer."""
        try:
            await self.call(run, [write for write, _ in part])
        except BaseException as exc:   # no connection, or cancelled: every caller hears it
            error = exc if isinstance(exc, Exception) else RuntimeError(
                "tinyq: the group commit was interrupted (%r)" % (exc,))
            for _, future in part:
                if not future.done():
                    future.set_exception(error)
            if error is not exc:
                raise
            return
        for write, future in part:
            if not future.done():
                _resolve(future, write)

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
        if self._pool is not None and self._pid == os.getpid():
            await asyncio.get_running_loop().run_in_executor(self._pool, self._owned.close)
            self._pool.shutdown(wait=False)
        self._pool = None


class AsyncRun(RunBase):
    """What an async handler gets besides its payload: the attempt and its controls.
    `step` and `progress` are coroutines; `retry`, `snooze` and `fail` raise as in Run."""

    def __init__(self, db: _DbThread, job: Dict[str, Any]):
        super().__init__(job)
        self._db = db
        self._payload = job["payload"]   # as stored: decoded when its handler starts

    async def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """The answer kept under `name` by any attempt; else fn()'s answer (awaited when
        fn returns an awaitable), kept as JSON."""
        self._step_after_end(name)
        known, kept = self._kept_here(name)
        if not known:
            kept = await self._db.read(Write.call("tq_step_get", self.id, name))
        if kept is None:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
            kept = await self._db.write(Write.call("tq_step_put", self.id, self.attempt, name, json.dumps(value)))
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

    # Workflows: as Run's (_worker.py), as coroutines.

    async def wait_for(self, ids: Any) -> List[Any]:
        """The results of the jobs `ids`, in order, once every one is done (as Run.wait_for)."""
        ids = wait_ids(ids)
        return after_results(ids, dict(await self._db.call(_rows, JOBS_OF, json.dumps(ids))))

    async def wait_signal(self, name: str, timeout: Any = None) -> Any:
        """The payload of the signal `name`, or None after `timeout` (as Run.wait_signal)."""
        payload_step, until_step = signal_steps(name)
        kept = await self._db.call(_rows, STEP_ROW, self.id, payload_step)
        if kept:
            return _decode(kept[0][0])
        now = await self._db.call(_one, NOW)
        until = await self.step(until_step, lambda: None if timeout is None else now + duration_ms(timeout, "wait_signal"))
        return signal_wait(name, until, now)

    async def sleep(self, name: str, duration: Any) -> None:
        """A durable sleep of `duration` (as Run.sleep)."""
        now = await self._db.call(_one, NOW)
        sleep_until(await self.step(sleep_step(name), lambda: now + duration_ms(duration, "sleep")), now)


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
            return await self.db.write(Write(settle_and_claim_in, (sql, settles, args)))
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
            try:
                result = await self.handler(_decode(run._payload), run)
            except BaseException as exc:
                outcome, value = outcome_of_exception(exc, self.errors)
            else:
                outcome, value = result_outcome(run, result)
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


class _AsyncCall:
    """One `await q.work(...)` or `await worker.work()`: the queues' _AsyncWork, their one
    waiter thread (_waiter.py), the signals, and the owner's stop. A failure in one queue
    (or in the waiter) stops every queue; work() raises the first, once all have drained."""

    def __init__(self, owner: Any, path: str, connect: Callable[[], Any], worker: Optional[str], poll: float):
        self.owner = owner            # the AsyncQueue or AsyncWorker: _stopping, _grace_ends, stop()
        self.path, self.poll = path, poll
        self.connect = connect
        self.worker = worker_name(worker)
        self.loop = asyncio.get_running_loop()
        self.waiter: Any = None       # the process's for the file, while run() runs
        self.works: List[_AsyncWork] = []
        self.failure: Optional[BaseException] = None

    def sleep(self, work: _AsyncWork) -> None:
        """`work` found its queue empty: the waiter wakes it through the loop."""
        def woke() -> None:
            try:
                self.loop.call_soon_threadsafe(work.woke)
            except RuntimeError:      # the loop is closed
                pass
        self.waiter.sleep(work.name, woke, self)

    def wake(self) -> None:
        for work in self.works:
            work.wake()

    def stop(self) -> None:
        self.owner._stopping = True
        self.wake()

    def fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self.stop()

    def failed_elsewhere(self, exc: BaseException) -> None:   # on the waiter's thread
        try:
            self.loop.call_soon_threadsafe(self.fail, exc)
        except RuntimeError:          # the loop is closed
            pass

    async def run(self) -> Dict[str, int]:
        self.waiter = _waiter.acquire(self, self.path, self.connect, self.poll, self.failed_elsewhere,
                                      name="tinyq-aio-waiter", pools=len(self.works))
        restore = stop_on_signals(self.owner.stop, self.loop)
        tasks = [asyncio.ensure_future(self.run_one(work)) for work in self.works]
        try:     # the signals stay ours while the drains last: a second one ends them
            try:
                await asyncio.wait(tasks)
            except asyncio.CancelledError:   # as a stop(); the jobs in flight finish and settle
                self.stop()
                await _uncancellable(asyncio.wait(tasks))
                raise
        finally:
            restore()
            if _waiter.release(self, self.waiter):   # the last work() on the file: it ends
                await asyncio.get_running_loop().run_in_executor(None, self.waiter.ended, WAITER_JOIN_S)
            self.owner._work = None
            self.owner._stopping = False
            self.owner._grace_ends = None
        if self.failure is not None:
            raise self.failure
        return {work.name: work.handled for work in self.works}

    async def run_one(self, work: _AsyncWork) -> None:
        try:
            await work.run()
        except Exception as exc:
            self.fail(exc)


async def work_calls(owner: Any, queues: Dict[str, Tuple[Callable[..., Any], Dict[str, Any]]], path: str,
                     connect: Callable[[], Any], worker: Optional[str], poll: float) -> Dict[str, int]:
    """Serve `queues` (name -> (handler, options: concurrency, lease, errors, prefetch)) until
    owner.stop(), SIGTERM or SIGINT; how many jobs each claimed."""
    if owner._work is not None:
        raise RuntimeError("this %s is already working" % type(owner).__name__)
    call = _AsyncCall(owner, path, connect, worker, poll)
    call.works = [_AsyncWork(call, name, handler, **opts) for name, (handler, opts) in queues.items()]
    owner._loop = call.loop
    owner._work = call
    return await call.run()


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


class AsyncQueue:
    """One named queue in one SQLite file, for asyncio. Its methods are coroutines whose
    SQL runs on a thread of the queue's own (with its own connection)."""

    def __init__(self, path: "str | os.PathLike[str]", name: str, busy_timeout: float = 5.0):
        self.path = os.fspath(path)
        self.name = name
        # no reference back to self: an AsyncQueue that goes closes its connection at once
        self._connect = functools.partial(open_conn, self.path, busy_timeout, check_same_thread=False)
        self._db = _DbThread(self._connect, "tinyq-aio")
        self._stopping = False
        self._grace_ends: Optional[float] = None   # stop(timeout=...): monotonic end of the drain
        self._work: Optional[_AsyncWork] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    async def _q(self, method: str, *args: Any, **kw: Any) -> Any:
        """A Queue method, run on the queue's thread over its connection."""
        name = self.name

        def call(conn: Any) -> Any:
            return getattr(Queue(conn, name), method)(*args, **kw)
        return await self._db.call(call)

    async def add(self, payload: Any, id: Optional[str] = None, delay: Any = None, at: Any = None,
                  group: Optional[str] = None, priority: Optional[int] = None,
                  attempts: Optional[int] = None, meta: Optional[Dict[str, Any]] = None,
                  expires: Any = None, on_conflict: Optional[str] = None, max_wait: Any = None,
                  after: Optional[Sequence[str]] = None, after_failed: Optional[str] = None) -> str:
        """Add a job; returns its id (as Queue.add)."""
        return await self._q("add", payload, id=id, delay=delay, at=at, group=group,
                             priority=priority, attempts=attempts, meta=meta, expires=expires,
                             on_conflict=on_conflict, max_wait=max_wait, after=after,
                             after_failed=after_failed)

    async def add_many(self, payloads: Iterable[Any], ids: Optional[Sequence[str]] = None,
                       **options: Any) -> List[str]:
        """Add one job per payload in one transaction and one statement; returns their ids
        (as Queue.add_many: the same options)."""
        return await self._q("add_many", list(payloads), ids=ids, **options)

    async def get(self, id: str) -> Optional[Dict[str, Any]]:
        return await self._q("get", id)

    async def signal(self, name: str, payload: Any = None, keep: Any = None) -> int:
        """Send the signal `name`; returns how many jobs it woke (as Queue.signal)."""
        return await self._q("signal", name, payload, keep=keep)

    async def deps(self, id: str) -> List[Dict[str, Any]]:
        """The jobs `id` waits or waited for (as Queue.deps)."""
        return await self._q("deps", id)

    async def cancel(self, id: str) -> bool:
        return await self._q("cancel", id)

    async def retry(self, id: str) -> bool:
        return await self._q("retry", id)

    async def watch(self, since: int = 0) -> List[Dict[str, Any]]:
        return await self._q("watch", since)

    async def settings(self, **settings: Any) -> Optional[Dict[str, Any]]:
        return await self._q("settings", **settings)

    async def schedule(self, name: str, when: str, payload: Any, **options: Any) -> Dict[str, Any]:
        """Create or replace the schedule `name` of this queue (as Queue.schedule)."""
        return await self._q("schedule", name, when, payload, **options)

    async def unschedule(self, name: str) -> bool:
        return await self._q("unschedule", name)

    async def schedules(self) -> List[Dict[str, Any]]:
        return await self._q("schedules")

    async def work(self, handler: Callable[[Any, AsyncRun], Awaitable[Any]], concurrency: int = 1,
                   worker: Optional[str] = None, poll: float = 1.0, lease: Any = None,
                   errors: str = "message", prefetch: Any = "auto") -> int:
        """Run `await handler(payload, run)` for this queue's jobs, up to `concurrency` at
        once, until stop(), SIGTERM or SIGINT; then claim nothing more and return (how many
        jobs it claimed) once every job in flight has finished and settled. `handler` must be
        a coroutine function (async def): a plain def is refused with a TypeError. `prefetch`:
        how many jobs it claims ahead of the running handlers, leased and renewed while they
        wait, so that a handler that ends makes way for the next job at once; "auto" claims
        those expected to free a place while one settle-and-claim commits (see _Pace), 0
        never claims ahead, a number fixes it. On stop, jobs claimed ahead go back in line
        without using up a try. Cancelling the task that awaits work() stops it the same way
        (however often it is cancelled, the jobs in flight finish and settle), then raises
        CancelledError."""
        options = dict(concurrency=concurrency, lease=lease, errors=errors, prefetch=prefetch)
        queues = {self.name: (handler, options)}
        return (await work_calls(self, queues, self.path, self._connect, worker, poll))[self.name]

    def stop(self, timeout: Optional[float] = None) -> None:
        """Ask work() to claim nothing more and return once the work in flight is done.
        Callable from any thread. `timeout` (seconds; None: as long as it takes) bounds that
        wait, and the wait of a cancelled work(): once it has passed, the handlers still
        running are abandoned (logged) and their tasks cancelled, and work() returns. An
        abandoned attempt settles nothing, even if its handler ignores the cancellation and
        returns later; one that still held its job keeps it until its lease runs out (no
        longer renewed), then the job runs again. A later stop(timeout=...) during the drain
        can shorten the grace, never lengthen it."""
        self._grace_ends = sooner(self._grace_ends, stop_grace(timeout))
        self._stopping = True
        work, loop = self._work, self._loop
        if work is not None and loop is not None:
            try:
                if loop is _running_loop():
                    work.wake()
                else:
                    loop.call_soon_threadsafe(work.wake)
            except RuntimeError:
                pass

    async def close(self) -> None:
        await self._db.close()

    async def __aenter__(self) -> "AsyncQueue":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return "AsyncQueue(%r, %r)" % (self.path, self.name)


class AsyncWorker:
    """Serves several queues of one SQLite file in one `await worker.work()`, as
    tinyq.Worker does for threads:

        worker = tinyq.AsyncWorker("app.db", {
            "emails": send,                                      # concurrency 1
            "pdfs": (render, {"concurrency": 100, "lease": "5m"}),
        })
        await worker.work()     # until worker.stop(), SIGTERM or SIGINT

    `queues`: queue name -> async handler, or (handler, options), the options those of
    AsyncQueue.work that belong to one queue: concurrency, lease, errors, prefetch. One waiter thread
    sleeps in tq_wait_any for every idle queue; one stop() or signal ends them all."""

    def __init__(self, path: "str | os.PathLike[str]", queues: Dict[str, Any], worker: Optional[str] = None,
                 poll: float = 1.0, busy_timeout: float = 5.0):
        self.path = os.fspath(path)
        self.queues = queue_specs(queues)
        self._worker, self._poll = worker, poll
        self._connect = functools.partial(open_conn, self.path, busy_timeout, check_same_thread=False)
        self._stopping = False
        self._grace_ends: Optional[float] = None
        self._work: Optional[_AsyncCall] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    async def work(self) -> Dict[str, int]:
        """Serve every queue until stop(), SIGTERM or SIGINT (as AsyncQueue.work does one);
        returns how many jobs each queue claimed. A failure in one queue's machinery stops
        them all and work() raises it; cancelling its task stops them all too."""
        return await work_calls(self, self.queues, self.path, self._connect, self._worker, self._poll)

    # stop() is AsyncQueue's: the same fields, the same call
    stop = AsyncQueue.stop

    def __repr__(self) -> str:
        return "AsyncWorker(%r, %r)" % (self.path, list(self.queues))


def _resolve(future: "asyncio.Future[Any]", write: Write) -> None:
    if write.error is not None:
        future.set_exception(write.error)
    else:
        future.set_result(write.value)


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


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
