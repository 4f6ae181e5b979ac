"""One queue of a threads work() call: _Pool, its long-lived threads, heartbeat and claims.

A fixed pool of threads, each with its own connection, that settle their last job and
claim their next in one transaction (the pool's group commit, _group.Leader), jobs claimed
ahead in one line for the pool, and a heartbeat (_Heartbeat) that renews every running
job of the pool in one pass. The call (_worker.py's _Work) and its waiter wake it."""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Tuple

from ._context import RunBase, current_run
from ._group import Leader, Write, commit_group
from ._protocol import (Pace, Share, check_work_args, claim_args, claim_sql, lease_options, lease_pairs,
                        lease_value, renew_in, renew_soon, renewed, schedule_renewal, settle_and_claim)
from ._otel import attempt
from ._run import Run, outcome_of
from ._sql import _decode
from ._stopping import abandon, grace_left

if TYPE_CHECKING:
    from ._worker import _Work

log = logging.getLogger("tinyq")


class _Heartbeat(threading.Thread):
    """Renews the leases of every running job of the worker, all in one statement of one
    transaction, whenever the earliest is at half its lease. A renewal that returns NULL
    marks its run cancelled."""

    def __init__(self, connect: Callable[[], Any], writes: Leader,
                 flush: Optional[Callable[[Any], None]] = None, flush_every: float = 0.02,
                 lease: Any = None, fail: Callable[[BaseException], None] = lambda exc: None):
        super().__init__(name="tinyq-heartbeat", daemon=True)
        self._connect = connect
        self._fail = fail             # a heartbeat that cannot run ends work(): leases would run out
        self._lease = lease
        self._flush, self._flush_every = flush, flush_every
        # Renewals join the handlers' group commit: a thread that takes the pool's write
        # lock commits them with its own writes, so 200 busy threads cannot starve the
        # heartbeat of the lock (Python's lock is not fair) until leases run out.
        self._writes = writes
        self._runs: Dict[RunBase, float] = {}    # run -> monotonic time of its next renewal
        self._cond = threading.Condition()
        self._closed = False
        self._wakes_at = 0.0                     # when the heartbeat's wait ends (0: awake)
        self._unflushed = False                  # settles wait for a flush: idle, nothing does

    def unsettled(self) -> None:
        """Settles wait: flush them within flush_every, unless a claim takes them first."""
        with self._cond:
            if not self._unflushed:
                self._unflushed = True
                self._cond.notify()

    def add(self, run: RunBase) -> None:
        due = schedule_renewal(run)
        with self._cond:
            self._runs[run] = due
            if due < self._wakes_at:      # only then: waking a thread per job costs
                self._cond.notify()

    def remove(self, run: RunBase) -> None:
        with self._cond:
            self._runs.pop(run, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self.join()

    def _due(self) -> Optional[List[RunBase]]:
        """Wait until some run is due, then return every run ([] when it is time to flush);
        None once closed."""
        with self._cond:
            flush_at = float("inf")
            while not self._closed:
                now = time.monotonic()
                if self._flush and self._unflushed and flush_at == float("inf"):
                    flush_at = now + self._flush_every
                if any(at <= now for at in self._runs.values()):
                    return list(self._runs)
                if now >= flush_at:
                    self._unflushed = False
                    return []
                # Idle (nothing runs, nothing to settle): asleep until add() or unsettled().
                self._wakes_at = min(min(self._runs.values(), default=float("inf")), flush_at)
                self._cond.wait(None if self._wakes_at == float("inf") else self._wakes_at - now)
                self._wakes_at = 0.0
        return None

    def run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._fail(exc)
            return
        try:
            while True:
                runs = self._due()
                if runs is None:
                    return
                if runs:
                    self._renew(conn, runs)
                if self._flush:
                    try:
                        self._flush(conn)
                    except Exception as exc:   # the next claim settles them instead
                        log.warning("tinyq: settling finished jobs failed: %s", exc)
        except BaseException as exc:
            self._fail(exc)
        finally:
            conn.close()

    def _renew(self, conn: Any, runs: List[RunBase]) -> None:
        pairs = lease_pairs(runs)
        try:
            leases = self._writes.write(conn, Write(renew_in, (pairs, self._lease)))
        except Exception as exc:  # busy, most likely: try again soon
            log.warning("tinyq: renewing %d leases failed: %s", len(runs), exc)
            with self._cond:
                renew_soon(self._runs, runs, min(min(r._renew_every for r in runs), 1.0) / 4)
            return
        with self._cond:
            renewed(self._runs, runs, leases)


class _Request:
    """A thread's ask: claim `claim` jobs (0: only settle what is pending). `yielded`: the
    settles went alone, the claim is to come Share.YIELD_S later."""
    __slots__ = ("claim", "jobs", "done", "error", "yielded")

    def __init__(self, claim: int):
        self.claim = claim
        self.jobs: List[Dict[str, Any]] = []
        self.done = False
        self.error: Optional[BaseException] = None
        self.yielded = False


class _Pool:
    """The threads of one queue of a work() call and what they share."""

    BUSY_TRIES = 3

    def __init__(self, work: "_Work", name: str, handler: Callable[..., Any], concurrency: int = 1,
                 lease: Any = None, errors: str = "message", prefetch: Any = "auto"):
        check_work_args(concurrency, errors, prefetch)
        self.owner = work.owner              # the Queue or Worker: its stop() and grace
        self.name = name
        self.handler = handler
        self.connect = work.connect
        self.concurrency = concurrency
        self.worker = work.worker
        self.errors = errors
        self.prefetch = prefetch
        self.lease_options = lease_options(lease)
        self.stopping = work.stopping
        self.call = work
        self.fail = work.fail
        # Every write of the pool in one group: the handlers' steps and progress, the
        # heartbeat's renewals, the threads' settles and claims. The thread that leads the
        # next group serves them all, so a renewal never waits behind 200 threads (when it
        # could, leases ran out and jobs ran twice). Only the leaders of the work() call's
        # pools (one per queue) take its lock: one writer of this process at a time.
        self.writes = Leader(self.serve, work.write_lock)
        self.pending_lock = threading.Lock()
        self.ahead: Deque[Run] = collections.deque()   # claimed ahead, not started (prefetch)
        self.unsettled: List[Tuple[Run, str, Any, float]] = []   # finished, to settle
        self.heartbeat = _Heartbeat(self.connect, self.writes, self.flush, lease=lease_value(lease), fail=self.fail)
        self.wake = threading.Condition()      # idle threads wait here for the waiter
        self.asleep = False                    # in the waiter's list (its idle threads wait here)
        self.generation = 0                    # bumped each time the waiter wakes
        self.handled = 0
        self.running: set = set()              # runs whose handler is running (for stop's grace)
        self.claim_sql = ""
        self.share = Share(name)               # a full concurrency limit: settles go alone
        self.threads: List[threading.Thread] = []

    # -- one worker thread ---------------------------------------------------------------

    def thread_main(self) -> None:
        try:
            conn = self.connect()
        except BaseException as exc:
            self.fail(exc)
            return
        pace = Pace(self.prefetch)
        try:
            while True:
                if self.stopping.is_set():
                    # Jobs claimed ahead go back in line: a snooze of 0 does not use up a try.
                    self.unsettle([(run, "snooze", 0) for run in self.take_all_ahead() if not run.cancelled])
                    self.settle_and_claim(conn, 0)
                    return
                run = self.take_ahead()
                if run is None:
                    claimed = self.settle_and_claim(conn, 1 + pace.ahead())
                    if claimed is None:      # others' turn at a place (Share): claim later
                        self.stopping.wait(self.share.wait_left() or 0.001)
                        continue
                    if not claimed:
                        self.wait_for_work()
                        continue
                    run = claimed[0]
                    self.put_ahead(claimed[1:])
                started = time.perf_counter()
                done = self.run_job(conn, run)
                pace.took(time.perf_counter() - started)
                if done is not None:         # settled with the next claim of any thread
                    self.unsettle([done])
        except BaseException as exc:
            self.fail(exc)
        finally:
            conn.close()

    # Settles wait in one list for the whole pool: the next claim of any thread commits them,
    # and the heartbeat commits those older than FLUSH_AFTER (a thread may be busy with a
    # slow job, or every thread idle).

    FLUSH_AFTER = 0.02

    def unsettle(self, done: List[Tuple[Run, str, Any]]) -> None:
        now = time.monotonic()
        with self.pending_lock:
            self.unsettled.extend((run, outcome, value, now) for run, outcome, value in done)
        self.heartbeat.unsettled()

    def flush(self, conn: Any) -> None:
        with self.pending_lock:
            old = bool(self.unsettled) and self.unsettled[0][3] <= time.monotonic() - self.FLUSH_AFTER
        if old:
            self.settle_and_claim(conn, 0)

    # Jobs claimed ahead wait in one line for the whole pool, so that a slow job holds up
    # only its own thread: any thread takes from the line before it claims.

    def put_ahead(self, runs: List[Run]) -> None:
        for run in runs:
            self.heartbeat.add(run)
        with self.pending_lock:
            self.ahead.extend(runs)

    def take_ahead(self) -> Optional[Run]:
        with self.pending_lock:
            return self.ahead.popleft() if self.ahead else None

    def take_all_ahead(self) -> List[Run]:
        with self.pending_lock:
            runs, self.ahead = list(self.ahead), collections.deque()
        for run in runs:
            self.heartbeat.remove(run)
        return runs

    def run_job(self, conn: Any, run: Run) -> Optional[Tuple[Run, str, Any]]:
        run.conn = conn                # the thread that runs it (it may have been claimed by another)
        self.heartbeat.add(run)
        token = current_run.set(run)   # the thread's context: log lines carry the job
        with self.pending_lock:
            self.running.add(run)
        try:
            if run.cancelled:          # cancelled while it waited, claimed ahead
                return None
            with attempt(self.name, run) as span:   # OpenTelemetry's consumer span, when installed
                outcome, value = outcome_of(self.handler, _decode(run._payload), run, self.errors)
                span.ended(outcome, value)
        finally:
            with self.pending_lock:
                self.running.discard(run)
            run._end("finished")
            current_run.reset(token)
            self.heartbeat.remove(run)
        return None if outcome is None or run.cancelled else (run, outcome, value)

    def settle_and_claim(self, conn: Any, claim: int) -> Optional[List[Run]]:
        """Settle every finished job of the pool and claim this thread's next, in one
        transaction shared with every other thread that asked meanwhile: the thread that
        gets the write lock serves all the requests queued by then (one tq_claim for all
        their places), so under load one commit carries several jobs. None: the settles
        went alone and nothing was claimed (a full limit: Share); claim again a moment later."""
        if not claim and not self.unsettled:
            return []
        request = _Request(claim)
        self.writes.submit(conn, request)
        if request.error is not None:
            raise request.error
        if request.yielded:
            return None
        return [Run(conn, job, self.writes) for job in request.jobs]

    def serve(self, conn: Any, group: List[Any]) -> None:
        """The group's writes (steps, progress, renewals) in one transaction, then one for
        the pending settles and the group's claims (write lock held)."""
        writes = [item for item in group if isinstance(item, Write)]
        if writes:
            commit_group(conn, writes)
        batch = [item for item in group if not isinstance(item, Write)]
        if not batch:
            return
        want = sum(r.claim for r in batch)
        args = claim_args(self.name, self.worker, want, self.lease_options)
        with self.pending_lock:
            settles, self.unsettled = self.unsettled, []

        jobs: List[Dict[str, Any]] = []
        yielded = self.share.yields(bool(settles)) and bool(want)
        if yielded:                    # the settles alone: another process may take the place
            want = 0
        try:
            jobs = settle_and_claim(conn, self.claim_sql, [(r, o, v) for r, o, v, _ in settles],
                                    args if want else None, self.BUSY_TRIES, self.share)
        except Exception as exc:
            for request in batch:
                request.error = exc
        with self.wake:
            self.handled += len(jobs)
        for request in batch:          # in order: the first to ask gets the first jobs
            request.jobs, jobs = jobs[:request.claim], jobs[request.claim:]
            request.yielded = yielded and request.claim > 0
            request.done = True

    def wait_for_work(self) -> None:
        """Sleep until the waiter finds a job of this queue may be claimable, or stop. The
        first thread to fall idle puts the pool to sleep in the waiter; no claim meanwhile:
        tq_wait_any wakes for new jobs and for every due time (a scheduled job, a lease that
        ran out, a rate window, a bound or a timeout)."""
        with self.wake:
            seen = self.generation
            if not self.asleep:
                self.asleep = True
                self.call.waiter.sleep(self.name, self.woke, self.call)
            while self.generation == seen and not self.stopping.is_set():
                self.wake.wait()

    def woke(self) -> None:            # the waiter's tq_wait_any named this queue
        with self.wake:
            self.asleep = False
        self.wake_all()

    def wake_all(self) -> None:
        with self.wake:
            self.generation += 1
            self.wake.notify_all()

    # -- stopping --------------------------------------------------------------------------

    def drain(self, threads: List[threading.Thread]) -> None:
        """Wait for the threads to finish their jobs; once stop(timeout=...)'s grace has
        ended (a stop() during the drain may set or shorten it), abandon the handlers still
        running and settle, on a connection of this thread, what their threads left."""
        for thread in threads:
            while thread.is_alive():
                left = grace_left(self.owner._grace_ends)
                if left == 0.0:
                    break
                thread.join(1.0 if left is None else min(left, 1.0))
        if not any(thread.is_alive() for thread in threads):
            return
        with self.pending_lock:
            running = list(self.running)
        for run in running:
            self.heartbeat.remove(run)
        abandon(running)
        self.unsettle([(run, "snooze", 0) for run in self.take_all_ahead() if not run.cancelled])
        conn = self.connect()
        try:
            self.settle_and_claim(conn, 0)
        finally:
            conn.close()

    # -- starting --------------------------------------------------------------------------

    def start(self) -> None:
        conn = self.connect()
        try:
            self.claim_sql = claim_sql(conn, self.lease_options)
        finally:
            conn.close()
        self.threads = [threading.Thread(target=self.thread_main, name="tinyq-worker-%d" % i, daemon=True)
                        for i in range(self.concurrency)]
        self.heartbeat.start()
        for thread in self.threads:
            thread.start()
