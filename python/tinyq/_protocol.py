"""The worker protocol that the thread (_worker.py) and asyncio (_aio.py) workers share:
their arguments and name, the claim / settle / renew / step / progress SQL, the tq_wait
slices an idle worker sleeps in, and SIGTERM / SIGINT while work() runs."""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._context import Outcome, RunBase, error_text, is_busy
from ._sql import _ms, _one, _rows

log = logging.getLogger("tinyq")

# -- work()'s arguments ---------------------------------------------------------------------


def check_work_args(concurrency: int, errors: str, prefetch: Any = "auto") -> None:
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if errors not in ("message", "class"):
        raise ValueError("errors must be 'message' or 'class', not %r" % (errors,))
    if prefetch != "auto" and (not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0):
        raise ValueError("prefetch must be 'auto' or a whole number >= 0, not %r" % (prefetch,))


def worker_name(worker: Optional[str]) -> str:
    """The name a worker claims under: the one given, else host:pid."""
    return worker or "%s:%d" % (socket.gethostname(), os.getpid())


def lease_options(lease: Any) -> Optional[str]:
    """tq_claim's options for a lease given to work() (None: the queue's own lease)."""
    return None if lease is None else json.dumps({"lease": _ms(lease)})


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
    ends. Busy errors go up: the transaction is retried as a whole."""
    sql, args = settle_args(run, outcome, value)
    try:
        return _one(conn, sql, *args)
    except Exception as exc:
        if is_busy(exc) or outcome == "error":
            raise
        return settle_in(conn, run, "error", error_text(exc))


def settle_and_claim(conn: Any, claim: str, settles: List[Tuple[RunBase, str, Any]],
                     args: Optional[tuple], tries: int = 3) -> List[Dict[str, Any]]:
    """Settle every finished run and claim (args given: tq_claim's) in one transaction: one
    commit for several jobs. Busy: tried `tries` times, then the settles are dropped (their
    leases run out and the jobs run again) and the claim returns nothing."""
    def body() -> List[Dict[str, Any]]:
        for run, outcome, value in settles:
            settle_in(conn, run, outcome, value)
        return [] if args is None else [dict(zip(COLUMNS + ("meta",), row)) for row in _rows(conn, claim, *args)]

    for attempt in range(tries):
        try:
            return transaction(conn, body)
        except Exception as exc:
            if not is_busy(exc):
                raise
            if attempt == tries - 1:
                log.error("tinyq: settling %d jobs / claiming failed: %s", len(settles), exc)
    return []


def outcome_of_exception(exc: BaseException, errors: str) -> Tuple[Optional[str], Any]:
    """What a handler's exception settles: its Outcome, else an error with its text."""
    if isinstance(exc, Outcome):
        return exc.outcome, exc.value
    return "error", error_text(exc, errors)


def transaction(conn: Any, body: Callable[[], Any]) -> Any:
    """body() inside BEGIN IMMEDIATE ... COMMIT (rolled back if it raises)."""
    _rows(conn, "BEGIN IMMEDIATE")
    try:
        result = body()
        _rows(conn, "COMMIT")
        return result
    except BaseException:
        try:
            _rows(conn, "ROLLBACK")
        except Exception:
            pass
        raise


# -- a run's own writes: steps and progress -------------------------------------------------

STEP_GET = "SELECT tq_step_get(?, ?)"
STEP_PUT = "SELECT tq_step_put(?, ?, ?, ?)"
PROGRESS = "SELECT tq_progress(?, ?, ?)"


# -- leases ---------------------------------------------------------------------------------


def schedule_renewal(run: RunBase) -> float:
    """Sets how often `run` is renewed (half its lease, 50 ms at least) and returns the
    monotonic time of its first renewal."""
    run._renew_every = max(run.lease_until - time.time() * 1000, 100) / 2000.0
    return time.monotonic() + run._renew_every


def renewed(due: Dict[Any, float], runs: List[RunBase], leases: List[Any]) -> None:
    """After renew_all: each run's new lease and next renewal in `due` (run -> monotonic
    time); a NULL lease (cancelled, timed out, or taken by a later attempt) cancels the run."""
    now = time.monotonic()
    for run, lease_until in zip(runs, leases):
        if lease_until is None:
            run.cancelled = True
            due.pop(run, None)
        else:
            run.lease_until = lease_until
            if run in due:
                due[run] = now + run._renew_every


def renew_soon(due: Dict[Any, float], runs: List[RunBase], seconds: float) -> None:
    """After a failed renew_all (busy, most likely): try again in `seconds`."""
    soon = time.monotonic() + seconds
    for run in runs:
        if run in due:
            due[run] = soon


RENEW_ALL = "SELECT tq_renew(json_extract(value, '$[0]'), json_extract(value, '$[1]')) FROM json_each(?)"


def renew_all(conn: Any, pairs: str) -> List[Any]:
    """tq_renew of every [id, attempt] in `pairs` (JSON), in one statement of one transaction."""
    return [row[0] for row in transaction(conn, lambda: _rows(conn, RENEW_ALL, pairs))]


def lease_pairs(runs: List[RunBase]) -> str:
    """renew_all's argument for `runs`."""
    return json.dumps([[run.id, run.attempt] for run in runs])


# -- waiting for work -----------------------------------------------------------------------

WAIT_SLICE_MS = 90   # tq_wait polls every 1 ms for its first 100 ms, every 3 ms after
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


# -- signals --------------------------------------------------------------------------------


def stop_on_signals(stop: Callable[[], None], loop: Any = None) -> Callable[[], None]:
    """In the main thread, SIGTERM and SIGINT call stop(). Without `loop` (threads) the
    first signal also puts the previous handlers back, so a second one acts as before;
    with an asyncio `loop`, the signals go through the loop and each one calls stop().
    Returns the function that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: Dict[int, Any] = {}

    def restore() -> None:
        while previous:
            sig, old = previous.popitem()
            if loop is not None:
                loop.remove_signal_handler(sig)
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    def on_signal(signum: int, frame: Any = None) -> None:
        log.info("tinyq: signal %s: finishing the work in flight", signum)
        stop()
        if loop is None:
            restore()

    for sig in (signal.SIGTERM, signal.SIGINT):
        old = signal.getsignal(sig)
        if loop is None:
            signal.signal(sig, on_signal)
        else:
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
        previous[sig] = old
    return restore
