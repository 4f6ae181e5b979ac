"""A process's one waiter per database file: one tq_wait_any thread for every idle pool.

The one waiter of a process for a database file, however many queues and work() calls it
serves: one thread with one connection sleeps in tq_wait_any for every queue whose pool is
idle, and wakes only the pools whose queue may have a claimable job. Used by the threads
(_worker.py, _pool.py) and asyncio (_aio.py) helpers (a waiter each, as they open connections their
own way): each idle pool hands it a callback (`sleep`), called on the waiter's thread once,
when a job of its queue may be claimable (the asyncio pools pass one that goes through the
loop). `acquire` gives a work() call the process's waiter for its file, `release` lets go:
the last one closes it."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

from ._context import is_busy
from ._sql import _one

log = logging.getLogger("tinyq")

SLICE_S = 0.25    # how often the waiter looks at stop() when every pool is asleep
# A pool that falls idle while tq_wait_any runs is not in its list until the next call (whose
# first look sees what came meanwhile). So while any pool it serves is awake (it may fall
# idle at any time), and a little after a wake-up, the calls are short: a pool whose last
# job just ended waits little for its next one. Once every pool sleeps, none can fall idle
# unseen, and the calls are long.
SHORT_SLICE_S = 0.01
BUSY_FOR_S = 0.2  # how long short calls go on after the last wake-up


class Waiter(threading.Thread):
    """tq_wait_any for the idle pools of one work() call. close() ends it within a slice,
    its connection closed; `fail` gets what it cannot recover from (no connection, an
    error of tq_wait_any other than a busy store): work() raises it."""

    def __init__(self, connect: Callable[[], Any], poll: float, name: str = "tinyq-waiter"):
        super().__init__(name=name, daemon=True)
        self._connect, self._poll = connect, poll
        self._cond = threading.Condition()
        # queue -> the wake-ups of its idle pools, each with the work() call it belongs to
        self._sleepers: Dict[str, List[Tuple[Any, Callable[[], None]]]] = {}
        self._fails: Dict[Any, Callable[[BaseException], None]] = {}   # work() call -> its fail
        self._busy_until = 0.0     # monotonic: short calls until then
        self._pools: Dict[Any, int] = {}   # work() call -> how many pools it has (asleep or not)
        self._closed = False
        self.users = 0             # work() calls that hold it (acquire / release)
        self.key: Any = None       # its place in _SHARED

    def sleep(self, queue: str, woke: Callable[[], None], call: Any = None) -> None:
        """The pool of `queue` (of the work() `call`) is idle: call woke() (on this thread)
        once a job of it may be claimable. A pool sleeps once at a time."""
        with self._cond:
            self._sleepers.setdefault(queue, []).append((call, woke))
            self._cond.notify()
            if self.ident is None and not self._closed:
                self.start()   # when first needed: a work() that is never idle opens nothing

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def ended(self, timeout: float) -> None:
        """Wait (`timeout` s at most) for the thread, once closed, to end (if it started)."""
        if self.ident is not None:
            self.join(timeout)

    def run(self) -> None:
        if self._closed:
            return  # closed before this thread ran: open nothing
        try:
            conn = self._connect()
        except BaseException as exc:   # work() raises it, rather than never waking
            self._fail(exc)
            return
        try:
            while True:
                with self._cond:
                    while not self._sleepers and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                    queues = list(self._sleepers)
                    asleep = sum(len(pools) for pools in self._sleepers.values())
                    short = asleep < sum(self._pools.values()) or time.monotonic() < self._busy_until
                ready = self._wait(conn, queues, SHORT_SLICE_S if short else SLICE_S)
                with self._cond:
                    woken = [woke for q in ready for _, woke in self._sleepers.pop(q, [])]
                    if woken:
                        self._busy_until = time.monotonic() + BUSY_FOR_S
                for woke in woken:
                    woke()
        except BaseException as exc:
            self._fail(exc)
        finally:
            conn.close()

    def _fail(self, exc: BaseException) -> None:
        """What the waiter cannot recover from ends every work() call it serves."""
        with self._cond:
            fails = list(self._fails.values())
        for fail in fails:
            fail(exc)

    def forget(self, call: Any) -> None:
        """`call` has ended: its pools' wake-ups and its fail go."""
        with self._cond:
            self._fails.pop(call, None)
            self._pools.pop(call, None)
            for queue in list(self._sleepers):
                self._sleepers[queue] = [(c, woke) for c, woke in self._sleepers[queue] if c is not call]
                if not self._sleepers[queue]:
                    del self._sleepers[queue]

    def _wait(self, conn: Any, queues: list, seconds: float) -> list:
        """The queues of which a job may be claimable, after at most `seconds`. A busy store
        (a schema change, a checkpoint...): after `poll` seconds, every queue, so each pool
        claims and finds out."""
        try:
            return json.loads(_one(conn, "SELECT tq_wait_any(?, ?)", json.dumps(queues), int(seconds * 1000)))
        except Exception as exc:
            if not is_busy(exc):
                raise
            log.warning("tinyq: tq_wait_any is busy (%s): claiming in %s s", exc, self._poll)
            time.sleep(self._poll)
            return queues


_SHARED: Dict[Tuple[int, str, str], Waiter] = {}   # (pid, thread name, file) -> its waiter
_SHARED_LOCK = threading.Lock()


def acquire(call: Any, path: str, connect: Callable[[], Any], poll: float,
            fail: Callable[[BaseException], None], name: str = "tinyq-waiter",
            pools: int = 1) -> Waiter:
    """The process's waiter for `path`, for the work() `call` of `pools` queues (whose
    `fail` hears the waiter's failure); made, with `connect` and `poll`, by the first call.
    A forked child gets its own (the key holds the pid)."""
    key = (os.getpid(), name, os.path.realpath(path))
    with _SHARED_LOCK:
        waiter = _SHARED.get(key)
        if waiter is None:
            waiter = _SHARED[key] = Waiter(connect, poll, name)
            waiter.key = key
        waiter.users += 1
        with waiter._cond:
            waiter._fails[call] = fail
            waiter._pools[call] = pools
    return waiter


def release(call: Any, waiter: Waiter) -> bool:
    """`call` lets go of `waiter`; the last one closes it (True: then wait for it, ended())."""
    waiter.forget(call)
    with _SHARED_LOCK:
        waiter.users -= 1
        if waiter.users > 0:
            return False
        if _SHARED.get(waiter.key) is waiter:
            del _SHARED[waiter.key]
    waiter.close()
    return True
