"""The worker protocol both helpers share: work()'s arguments and the claim / settle SQL.

What the thread (_worker.py) and asyncio (_aio.py) workers share: their arguments and
name, the claim / settle / renew / step / progress SQL, and the tq_wait slices an idle
worker sleeps in. How a work() call stops (stop()'s grace, SIGTERM / SIGINT) is
_stopping.py's."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._context import Outcome, RunBase, error_text, is_busy
from ._sql import _ms, _one, _rows, atomic, transaction

log = logging.getLogger("tinyq")

# -- work()'s arguments ---------------------------------------------------------------------


def check_work_args(concurrency: int, errors: str, prefetch: Any = "auto") -> None:
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if errors not in ("message", "class"):
        raise ValueError("errors must be 'message' or 'class', not %r" % (errors,))
    if prefetch != "auto" and (not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0):
        raise ValueError("prefetch must be 'auto' or a whole number >= 0, not %r" % (prefetch,))


class Pace:
    """How many jobs a thread claims ahead of the one it runs (asyncio's rule extends it). A whole number is fixed.
    "auto" claims AUTO_AHEAD ahead only while the thread's recent handlers (a moving
    average) took under FAST seconds: then a job claimed ahead waits a few milliseconds at
    most, and a queue of tiny jobs is drained with one commit per AUTO_AHEAD + 1 jobs instead
    of one per job. The first job, and every job after a slow one, is claimed alone."""

    AUTO_AHEAD = 7
    FAST = 0.001

    def __init__(self, prefetch: Any):
        self.fixed = None if prefetch == "auto" else prefetch
        self.average: Optional[float] = None

    def took(self, seconds: float) -> None:
        self.average = moving_average(self.average, seconds)

    def ahead(self) -> int:
        if self.fixed is not None:
            return self.fixed
        return self.AUTO_AHEAD if self.average is not None and self.average < self.FAST else 0


def moving_average(average: Optional[float], value: float) -> float:
    return value if average is None else 0.7 * average + 0.3 * value


QUEUE_OPTIONS = ("concurrency", "lease", "errors", "prefetch")


def queue_specs(queues: Any, options: Tuple[str, ...] = QUEUE_OPTIONS) -> Dict[str, Tuple[Callable[..., Any], Dict[str, Any]]]:
    """A Worker's queues: {name: handler} or {name: (handler, {option: value})}, each queue
    with its own options among `options` (work()'s), as name -> (handler, options)."""
    if not isinstance(queues, dict) or not queues:
        raise ValueError("queues must be a non-empty dict of queue name -> handler or (handler, options), "
                         "not %r" % (queues,))
    specs = {}
    for name, spec in queues.items():
        if not isinstance(name, str) or not name:
            raise ValueError("a queue's name is non-empty text, not %r" % (name,))
        handler, opts = spec if isinstance(spec, tuple) else (spec, {})
        if not callable(handler) or not isinstance(opts, dict):
            raise TypeError("queue %r: expected a handler or (handler, options dict), not %r" % (name, spec))
        unknown = sorted(set(opts) - set(options))
        if unknown:
            raise ValueError("queue %r: unknown option %r (one of %s)" % (name, unknown[0], ", ".join(options)))
        specs[name] = (handler, dict(opts))
    return specs


def worker_name(worker: Optional[str]) -> str:
    """The name a worker claims under: the one given, else host:pid."""
    return worker or "%s:%d" % (socket.gethostname(), os.getpid())


def lease_options(lease: Any) -> Optional[str]:
    """tq_claim's options for a lease given to work() (None: the queue's own lease)."""
    return None if lease is None else json.dumps({"lease": _ms(lease)})


def lease_value(lease: Any) -> Any:
    """tq_renew's lease argument for a lease given to work() (None: the queue's own)."""
    return None if lease is None else _ms(lease)


# -- claiming and settling ------------------------------------------------------------------

COLUMNS = ("id", "attempt", "payload", "group_key", "lease_until", "deadline")


def claim_sql(conn: Any, lease_options: Optional[str]) -> str:
    """The claim statement, with the job's meta when this build's tq_claim has its hidden
    `meta` column (store schema 3 and later), else NULL in its place."""
    meta = "meta" if has_column(conn, "tq_claim", "meta") else "NULL"
    return "SELECT %s, %s FROM tq_claim(?, ?, ?%s)" % (
        ", ".join(COLUMNS), meta, "" if lease_options is None else ", ?")


def claim_args(queue: str, worker: str, want: int, lease_options: Optional[str]) -> tuple:
    """The arguments of claim_sql's statement: `want` jobs of `queue` for `worker`."""
    return (queue, worker, want) + (() if lease_options is None else (lease_options,))


def has_column(conn: Any, table: str, column: str) -> bool:
    return any(row[0] == column for row in _rows(conn, "SELECT name FROM pragma_table_xinfo(?)", table))


def settle_args(run: RunBase, outcome: str, value: Any) -> Tuple[str, tuple]:
    args = (run.id, run.attempt, outcome) + (() if value is None else (value,))
    return "SELECT tq_settle(%s)" % ", ".join("?" * len(args)), args


def settle_in(conn: Any, run: RunBase, outcome: str, value: Any) -> Any:
    """tq_settle inside the caller's transaction. A settle the extension refuses (a bad
    delay, say) is recorded as an error instead, so the job does not sit until its lease
    ends; but a done job stays done, its result dropped (a result over the size limit).
    Busy errors go up: the transaction is retried as a whole."""
    sql, args = settle_args(run, outcome, value)
    try:
        return _one(conn, sql, *args)
    except Exception as exc:
        if is_busy(exc) or outcome == "error":
            raise
        if outcome == "done" and value is not None:
            return settle_in(conn, run, "done", dropped_result(run, error_text(exc)))
        return settle_in(conn, run, "error", error_text(exc))


def result_outcome(run: RunBase, result: Any) -> Tuple[str, Any]:
    """What a handler's return settles: done, with its result as stored text (JSON, and
    strict JSON: no NaN). A result that cannot be stored (a set, bytes, NaN...) drops the
    result, not the job: the handler's work is done and must not run again."""
    if result is None:
        return "done", None
    if isinstance(result, str):
        return "done", result
    try:
        return "done", json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return "done", dropped_result(run, error_text(exc))


def dropped_result(run: RunBase, reason: str) -> str:
    """The result a done job keeps when its own could not be stored: why, logged too."""
    log.warning("tinyq: job %s finished, but its result could not be stored (%s): dropped", run.id, reason)
    return json.dumps({"result_dropped": reason})


def settle_and_claim(conn: Any, claim: str, settles: List[Tuple[RunBase, str, Any]],
                     args: Optional[tuple], tries: int = 3, share: Optional["Share"] = None) -> List[Dict[str, Any]]:
    """Settle every finished run and claim (args given: tq_claim's) in one transaction: one
    commit for several jobs. Busy: tried `tries` times, then the settles are dropped (their
    leases run out and the jobs run again) and the claim returns nothing."""
    for attempt in range(tries):
        try:
            return transaction(conn, lambda: settle_and_claim_in(conn, claim, settles, args, share))
        except Exception as exc:
            if not is_busy(exc):
                raise
            if attempt == tries - 1:
                log.error("tinyq: settling %d jobs / claiming failed: %s", len(settles), exc)
    return []


def settle_and_claim_in(conn: Any, claim: str, settles: List[Tuple[RunBase, str, Any]],
                        args: Optional[tuple], share: Optional["Share"] = None) -> List[Dict[str, Any]]:
    """settle_and_claim's work inside the caller's transaction (a group commit's); `share`
    learns after the claim whether the queue's concurrency limit is full."""
    settle_all_in(conn, settles)
    if args is None:
        return []
    jobs = claim_in(conn, claim, args)
    if share is not None:
        share.claimed_in(conn, args[2], len(jobs))
    return jobs


# The queue's concurrency limit (NULL: none), and the leases it counts.
LIMIT_OF = "SELECT json_extract(tq_queue(?), '$.concurrency')"
LEASES_OF = "SELECT leases FROM tq_stats(?)"


class Share:
    """Other processes' chance at a place of a queue whose concurrency limit is full
    (issue 46). A worker settles a job and claims its next in one commit: under a full
    limit, the place the settle frees is taken back by the claim in the same commit, and
    another process, woken by that commit, finds the limit full again. One process ran
    every job of a backlog, the other none. So when the limit was full at this worker's
    last claim, its settles commit alone (yields()) and its claims wait YIELD_S (all of
    them: its idle places, woken by that commit too, would take the place back): another
    process waiting for the queue (woken by the settle's commit within about a millisecond)
    claims the place first. A worker alone with a full limit would leave the
    place idle that long at every job: when its claim after a yield got what it asked (no
    one took the place), it yields at every 2nd settle, then 4th... up to every MAX_EVERY-th,
    and at every settle again once another process took a place. Queues without a limit
    (the limit is read at most every CHECK_EVERY_S) never yield and cost no statement."""

    YIELD_S = 0.02
    MAX_EVERY = 32
    CHECK_EVERY_S = 1.0

    def __init__(self, queue: str):
        self.queue = queue
        self.limit: Optional[int] = None
        self.checked = float("-inf")     # when the limit was read (monotonic)
        self.full = False                # the limit was full after the last claim
        self.every = 1                   # yield at every `every`-th settle while full
        self.settles = 0                 # settles while full since the last yield
        self.yielded = False             # the next claim is the first after a yield
        self.until = 0.0                 # no claim before then (monotonic): a yield

    def claimed_in(self, conn: Any, want: int, got: int) -> None:
        """After a claim of `want` jobs that got `got`, in its transaction."""
        if self.yielded:                 # got all: nobody took the place meanwhile
            self.yielded = False
            self.every = min(self.every * 2, self.MAX_EVERY) if got >= want else 1
        now = time.monotonic()
        if now - self.checked >= self.CHECK_EVERY_S:
            self.limit, self.checked = _one(conn, LIMIT_OF, self.queue), now
        self.full = self.limit is not None and (_one(conn, LEASES_OF, self.queue) or 0) >= self.limit

    def yields(self, settling: bool) -> bool:
        """Before a commit of settles (`settling`), a claim or both: whether claims wait
        (for wait_left(); the settles commit alone). A commit of settles alone, a claim
        waiting for the waiter, makes claims wait too."""
        if self.wait_left() > 0:
            return True
        if not (settling and self.full):
            return False
        self.settles += 1
        if self.settles < self.every:
            return False
        self.settles, self.yielded = 0, True
        self.until = time.monotonic() + self.YIELD_S
        return True

    def wait_left(self) -> float:
        """How long claims still wait for others to take a place (seconds, 0: none)."""
        return max(self.until - time.monotonic(), 0.0)


# Every settle of a batch in one statement: one statement, not hundreds, for the SQL thread
# (each one waits for the GIL on a busy event loop). A missing value is NULL to tq_settle.
SETTLE_ALL = ("SELECT tq_settle(json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
              "json_extract(value, '$[2]'), json_extract(value, '$[3]')) FROM json_each(?)")


def settle_all_in(conn: Any, settles: List[Tuple[RunBase, str, Any]]) -> None:
    """Every settle in one statement (a savepoint of its own); if the extension refuses one
    of them, the statement is rolled back and each is settled alone (settle_in)."""
    if len(settles) > 1:
        pairs = json.dumps([[run.id, run.attempt, outcome, value] for run, outcome, value in settles])
        try:
            atomic(conn, lambda: _rows(conn, SETTLE_ALL, pairs))
            return
        except Exception as exc:
            if is_busy(exc):
                raise
    for run, outcome, value in settles:
        settle_in(conn, run, outcome, value)


MAX_CLAIM = 1000   # tq_claim's n is 1 to 1000: a larger want is claimed in parts


def claim_in(conn: Any, claim: str, args: tuple) -> List[Dict[str, Any]]:
    """claim_sql's statement for claim_args' `want` jobs, in parts of MAX_CLAIM at most (a
    pool of 200 threads asks for up to 1,600 at once), until one part comes back short."""
    queue, worker, want, *rest = args
    jobs: List[Dict[str, Any]] = []
    while want > 0:
        n = min(want, MAX_CLAIM)
        part = [dict(zip(COLUMNS + ("meta",), row)) for row in _rows(conn, claim, queue, worker, n, *rest)]
        jobs += part
        want -= n
        if len(part) < n:
            break
    return jobs


def outcome_of_exception(exc: BaseException, errors: str) -> Tuple[Optional[str], Any]:
    """What a handler's exception settles: its Outcome, else an error with its text. A
    KeyboardInterrupt or SystemExit (sys.exit) is no job's error: it goes up, work() stops
    and raises it, and the interrupted job runs again once its lease has run out. An
    asyncio handler that was cancelled (CancelledError) did not fail either: its job is not
    settled, and runs again once its lease has run out (its attempt counted, as JOB-03 says,
    so a handler cancelled every time still ends failed)."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        raise exc
    if isinstance(exc, asyncio.CancelledError):
        log.warning("tinyq: a handler was cancelled: its job is not settled, and runs again "
                    "once its lease has run out")
        return None, None
    if isinstance(exc, Outcome):
        return exc.outcome, exc.value
    return "error", error_text(exc, errors)


# -- a run's own writes: steps and progress -------------------------------------------------

STEP_GET = "SELECT tq_step_get(?, ?)"
STEP_PUT = "SELECT tq_step_put(?, ?, ?, ?)"
PROGRESS = "SELECT tq_progress(?, ?, ?)"


# -- leases ---------------------------------------------------------------------------------


def schedule_renewal(run: RunBase) -> float:
    """Sets how often `run` is renewed (half what is left of its lease, 50 ms at least) and
    returns the monotonic time of its next renewal. Called at the claim and after each
    renewal: the pace follows the lease the store answered, not the first one."""
    run._renew_every = max(run.lease_until - time.time() * 1000, 100) / 2000.0
    return time.monotonic() + run._renew_every


def renewed(due: Dict[Any, float], runs: List[RunBase], leases: List[Any]) -> None:
    """After a renewal: each run's new lease and next renewal in `due` (run -> monotonic
    time); a NULL lease (cancelled, timed out, or taken by a later attempt) cancels the run."""
    for run, lease_until in zip(runs, leases):
        if lease_until is None:
            run.cancelled = True
            due.pop(run, None)
        else:
            run.lease_until = lease_until
            if run in due:
                due[run] = schedule_renewal(run)


def renew_soon(due: Dict[Any, float], runs: List[RunBase], seconds: float) -> None:
    """After a failed renewal (busy, most likely): try again in `seconds`."""
    soon = time.monotonic() + seconds
    for run in runs:
        if run in due:
            due[run] = soon


# The third argument is work()'s lease (NULL: the queue's): a renewal extends by the same
# lease as the claim, or a worker's longer lease would shrink to the queue's at its first one.
RENEW_ALL = ("SELECT tq_renew(json_extract(value, '$[0]'), json_extract(value, '$[1]'), ?) "
             "FROM json_each(?)")


def renew_in(conn: Any, pairs: str, lease: Any = None) -> List[Any]:
    """tq_renew of every [id, attempt] in `pairs` (JSON) by `lease` (work()'s, None: the
    queue's), in one statement, inside the caller's transaction (a group commit's)."""
    return [row[0] for row in _rows(conn, RENEW_ALL, lease, pairs)]


def lease_pairs(runs: List[RunBase]) -> str:
    """renew_in's argument for `runs`."""
    return json.dumps([[run.id, run.attempt] for run in runs])


# -- waiting for work -----------------------------------------------------------------------

WAIT_SLICE_MS = 250  # how often the waiter looks at stop(); tq_wait sleeps until the store is written
WAITER_JOIN_S = 2.0  # the longest a stopping worker waits for its tq_wait thread to end


def _wait(conn: Any, queue: str, seconds: float, stopped: Callable[[], bool] = lambda: False) -> int:
    """tq_wait for up to `seconds`, in slices short enough that it keeps polling every
    millisecond: 1 as soon as a job may be claimable, 0 when the time is up or, between
    slices, `stopped()` is true (so a worker's stop need not wait out a whole poll)."""
    end = time.monotonic() + seconds
    while True:
        if stopped():
            return 0
        left_ms = int((end - time.monotonic()) * 1000)
        if _one(conn, "SELECT tq_wait(?, ?)", queue, max(1, min(left_ms, WAIT_SLICE_MS))):
            return 1
        if left_ms <= WAIT_SLICE_MS:
            return 0


def wait_for_work(conn: Any, queue: str, poll: float, stopped: Callable[[], bool]) -> None:
    """The waiter's sleep: until a job of `queue` may be claimable, `poll` seconds or
    stopped(); busy, it sleeps `poll` instead. Other errors go up."""
    try:
        _wait(conn, queue, poll, stopped)
    except Exception as exc:
        if not is_busy(exc):
            raise
        time.sleep(poll)
