"""tinyq for asyncio: AsyncQueue and AsyncWorker, and the work() call that serves their queues.

`AsyncQueue`'s methods are coroutines and its `work()` runs async handlers, many at once,
without ever blocking the event loop.

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

The parts: _aio_thread.py (_DbThread, the SQL thread and its group commits), _aio_run.py
(AsyncRun, what a handler gets, and _Pace, the prefetch), _aio_work.py (_AsyncWork, one
queue of a work() call); here the public classes and _AsyncCall, one work() call.
"""
from __future__ import annotations

import asyncio
import functools
import os
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ._aio_run import AsyncRun
from ._aio_thread import _DbThread
from ._aio_work import _AsyncWork, _uncancellable, check_async
from ._connection import open as open_conn
from ._drain import Tally, Watcher, counting_async
from ._otel import with_trace
from ._context import stop_grace
from ._protocol import WAITER_JOIN_S, queue_specs, worker_name
from ._queue import Queue
from ._stopping import sooner, stop_on_signals
from . import _waiter

__all__ = ["AsyncQueue", "AsyncRun", "AsyncWorker"]


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
        # The trace context is read here: the queue's thread does not see this task's.
        return await self._q("add", payload, id=id, delay=delay, at=at, group=group,
                             priority=priority, attempts=attempts, meta=with_trace(meta), expires=expires,
                             on_conflict=on_conflict, max_wait=max_wait, after=after,
                             after_failed=after_failed)

    async def add_many(self, payloads: Iterable[Any], ids: Optional[Sequence[str]] = None,
                       **options: Any) -> List[str]:
        """Add one job per payload in one transaction and one statement; returns their ids
        (as Queue.add_many: the same options)."""
        options["meta"] = with_trace(options.get("meta"))   # as add: read in this task
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

    async def drain(self, handler: Callable[[Any, AsyncRun], Awaitable[Any]], concurrency: int = 1,
                    worker: Optional[str] = None, poll: float = 1.0, lease: Any = None,
                    errors: str = "message", prefetch: Any = "auto") -> Dict[str, int]:
        """work(), until no job of this queue is running and none is due now; then return
        {"done": n, "failed": n, "retried": n}, as Queue.drain does (the same rules: what
        becomes due while jobs run is run; a job scheduled later is not waited for once
        nothing else runs)."""
        check_async(handler)
        if self._work is not None:   # else the watcher would stop the other work()
            raise RuntimeError("this AsyncQueue is already working")
        tally = Tally()
        watcher = Watcher(self._connect, self.name, self.stop)
        watcher.start()
        try:
            await self.work(counting_async(handler, tally), concurrency=concurrency, worker=worker,
                            poll=poll, lease=lease, errors=errors, prefetch=prefetch)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, watcher.close)
        return await self._db.call(tally.summary)

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


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
