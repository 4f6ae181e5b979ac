"""The loop behind Queue.work and Worker.work: _Work, one work() call, and work_loop.

Per queue, a fixed pool of long-lived threads (_pool.py), each with its own connection,
that settle their last job and claim their next in one transaction, and a heartbeat that
renews every running job of the pool in one pass; for all the queues, one waiter
(_waiter.py) that sleeps in tq_wait_any for the idle pools; and a shutdown that waits for
the work in flight. Run, what a handler gets, is _run.py's (importable from here too)."""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._context import Outcome, Cancelled
from ._pool import _Pool
from ._protocol import WAITER_JOIN_S, worker_name
from ._run import Run
from ._stopping import stop_on_signals
from . import _waiter

__all__ = ["Outcome", "Cancelled", "Run", "work_loop"]


class _Work:
    """One work() call: the pools of its queues, their one waiter, stop and signals. A
    failure in any pool (or in the waiter) stops them all; work() raises the first."""

    def __init__(self, owner: Any, path: str, connect: Callable[[], Any], worker: Optional[str], poll: float):
        self.owner = owner                     # has _stopping (an Event), _grace_ends, stop()
        self.path, self.poll = path, poll
        self.connect = connect
        self.worker = worker_name(worker)
        self.stopping = owner._stopping
        self.write_lock = threading.Lock()
        self.failure: Optional[BaseException] = None
        self.failure_lock = threading.Lock()
        self.waiter: Any = None                # the process's for the file, while run() runs
        self.pools: List[_Pool] = []

    def fail(self, exc: BaseException) -> None:
        with self.failure_lock:
            if self.failure is None:
                self.failure = exc
        self.stopping.set()
        for pool in self.pools:
            pool.wake_all()

    def run(self) -> Dict[str, int]:
        self.waiter = _waiter.acquire(self, self.path, self.connect, self.poll, self.fail,
                                      pools=len(self.pools))
        restore_signals = stop_on_signals(self.owner.stop)
        interrupted = False
        try:
            try:
                for pool in self.pools:
                    pool.start()
            except Exception as exc:           # no connection: the pools started stop too
                self.fail(exc)
            while not self.stopping.wait(1.0):   # stop(), a signal, or a thread's failure
                pass
        except BaseException:
            interrupted = True
            raise
        finally:
            restore_signals()
            if interrupted:
                # A second Ctrl-C that came while the first was being handled goes up now,
                # not after a drain that may never end; it may have struck inside a lock's
                # own code and left it held, so nothing here waits on one. The handlers are
                # daemon threads, gone with the process; their leases end (DUR-02) or run out.
                self.owner._stopping = threading.Event()
                self.owner._grace_ends = None
        try:
            self.stopping.set()
            last = _waiter.release(self, self.waiter)
            for pool in self.pools:
                pool.wake_all()
            for pool in self.pools:
                pool.drain(pool.threads)   # claim nothing more; wait for the work in flight
                if pool.heartbeat.is_alive():
                    pool.heartbeat.close()
            # The waiter, when this was the last work() on the file, ends within a
            # tq_wait_any slice and closes its connection: once work() returns, nothing of
            # it holds the file. The next work() gets a fresh stop event.
            if last:
                self.waiter.ended(WAITER_JOIN_S)
        finally:
            self.owner._stopping = threading.Event()
            self.owner._grace_ends = None
        if self.failure is not None:
            raise self.failure
        return {pool.name: pool.handled for pool in self.pools}


def work_loop(owner: Any, queues: Dict[str, Tuple[Callable[..., Any], Dict[str, Any]]], path: str,
              connect: Callable[[], Any], worker: Optional[str] = None, poll: float = 1.0) -> Dict[str, int]:
    """Serve `queues` (name -> (handler, its options: concurrency, lease, errors, prefetch))
    of the file `path` until owner.stop(), SIGTERM or SIGINT; how many jobs each claimed."""
    work = _Work(owner, path, connect, worker, poll)
    work.pools = [_Pool(work, name, handler, **opts) for name, (handler, opts) in queues.items()]
    return work.run()
