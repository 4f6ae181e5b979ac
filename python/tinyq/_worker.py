"""The loop behind Queue.work: claim, one thread (and connection) per handler, a heartbeat
thread that renews leases at half their length, and a shutdown that waits for the work in
flight."""
import json
import logging
import os
import signal
import socket
import threading
import time

from ._sql import _decode, _encode, _ms, _one, _rows

log = logging.getLogger("tinyq")


class Outcome(BaseException):
    """Raised by run.retry / run.snooze / run.fail to end the handler with that outcome.

    A BaseException (like SystemExit), so a handler's `except Exception:` does not swallow it.
    """

    def __init__(self, outcome, value=None):
        super().__init__(outcome, value)
        self.outcome = outcome
        self.value = value


class Cancelled(Outcome):
    """This attempt no longer holds its job (cancelled, timed out, or taken by a later
    attempt). Raised by run.step when its answer could not be kept; nothing is settled."""

    def __init__(self, reason="cancelled"):
        super().__init__(None, reason)


class Run:
    """What a handler gets besides its payload: the attempt it runs and its controls."""

    def __init__(self, conn, job):
        self.conn = conn                  # this thread's connection, for the handler's own SQL
        self.id = job["id"]
        self.attempt = job["attempt"]
        self.group = job["group_key"]
        self.lease_until = job["lease_until"]
        self.deadline = job["deadline"]
        self.cancelled = False            # True once the job was cancelled or timed out

    def step(self, name, fn):
        """The answer kept under `name` by any attempt; else fn()'s answer, kept (as JSON)."""
        kept = _one(self.conn, "SELECT tq_step_get(?, ?)", self.id, name)
        if kept is None:
            value = json.dumps(fn())
            kept = _one(self.conn, "SELECT tq_step_put(?, ?, ?, ?)",
                        self.id, self.attempt, name, value)
            if kept is None:          # stale attempt: the job is no longer ours
                self.cancelled = True
                raise Cancelled("step %r not kept: attempt %s of %s no longer holds the job"
                                % (name, self.attempt, self.id))
        return _decode(kept)

    def progress(self, value):
        """Record progress (text as is, anything else as JSON); False when the job is gone."""
        ok = bool(_one(self.conn, "SELECT tq_progress(?, ?, ?)",
                       self.id, self.attempt, _encode(value)))
        if not ok:
            self.cancelled = True
        return ok

    def retry(self, delay=None):
        """End this attempt; run again after `delay` (default: the backoff). Counts."""
        raise Outcome("retry", _ms(delay))

    def snooze(self, delay):
        """End this attempt; run again after `delay`. Does not count against the budget."""
        raise Outcome("snooze", _ms(delay))

    def fail(self, reason):
        """Fail the job for good now, with `reason` as its error."""
        raise Outcome("fail", str(reason))

    def __repr__(self):
        return "Run(id=%r, attempt=%r)" % (self.id, self.attempt)


def _is_busy(exc):
    text = "%s %s" % (type(exc).__name__, exc)
    return "locked" in text.lower() or "busy" in text.lower()


def _error_text(exc):
    message = str(exc)
    return "%s: %s" % (type(exc).__name__, message) if message else type(exc).__name__


class _Heartbeat(threading.Thread):
    """Renews every registered run's lease at half the lease length, on its own connection.
    A renewal that returns NULL marks the run cancelled."""

    def __init__(self, connect):
        super().__init__(name="tinyq-heartbeat", daemon=True)
        self._connect = connect
        self._runs = {}               # Run -> monotonic time of its next renewal
        self._cond = threading.Condition()
        self._closed = False

    def add(self, run):
        lease_ms = max(run.lease_until - time.time() * 1000, 100)
        run._renew_every = lease_ms / 2000.0
        with self._cond:
            self._runs[run] = time.monotonic() + run._renew_every
            self._cond.notify()

    def remove(self, run):
        with self._cond:
            self._runs.pop(run, None)

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify()
        self.join()

    def _due(self):
        """Wait until some run is due (returns them) or the heartbeat is closed (None)."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                due = [run for run, at in self._runs.items() if at <= now]
                if due:
                    return due
                self._cond.wait(min(self._runs.values(), default=now + 1.0) - now)
        return None

    def run(self):
        conn = self._connect()
        try:
            while True:
                due = self._due()
                if due is None:
                    return
                for run in due:
                    self._renew(conn, run)
        finally:
            conn.close()

    def _renew(self, conn, run):
        try:
            lease_until = _one(conn, "SELECT tq_renew(?, ?)", run.id, run.attempt)
        except Exception as exc:  # busy, most likely: try again soon
            log.warning("tinyq: renewing %s attempt %s failed: %s", run.id, run.attempt, exc)
            next_at = time.monotonic() + min(run._renew_every, 1.0) / 4
        else:
            if lease_until is None:       # cancelled, timed out, or taken by a later attempt
                run.cancelled = True
                self.remove(run)
                return
            run.lease_until = lease_until
            next_at = time.monotonic() + run._renew_every
        with self._cond:
            if run in self._runs:
                self._runs[run] = next_at


def _settle(conn, run, outcome, value):
    """tq_settle, retried a little when busy. A settle the extension refuses (a bad delay,
    say) is recorded as an error instead, so the job does not sit until its lease ends."""
    args = (run.id, run.attempt, outcome) + (() if value is None else (value,))
    sql = "SELECT tq_settle(%s)" % ", ".join("?" * len(args))
    for attempt in range(3):
        try:
            return _one(conn, sql, *args)
        except Exception as exc:
            if _is_busy(exc) and attempt < 2:
                continue
            if outcome == "error" or _is_busy(exc):
                log.error("tinyq: settling %s attempt %s failed: %s", run.id, run.attempt, exc)
                return None
            return _settle(conn, run, "error", _error_text(exc))


def _run_one(handler, connect, job, heartbeat):
    """One claimed job, in its own thread: run the handler, then settle (unless cancelled)."""
    conn = connect()
    try:
        run = Run(conn, job)
        heartbeat.add(run)
        try:
            result = handler(_decode(job["payload"]), run)
            outcome, value = "done", (None if result is None else _encode(result))
        except Outcome as out:
            outcome, value = out.outcome, out.value
        except BaseException as exc:
            outcome, value = "error", _error_text(exc)
        finally:
            heartbeat.remove(run)
        if outcome is not None and not run.cancelled:
            _settle(conn, run, outcome, value)
    finally:
        conn.close()


def _on_signals(stop):
    """In the main thread, SIGTERM and SIGINT call stop(); a second signal acts as before.
    Returns the function that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}

    def restore():
        while previous:
            sig, old = previous.popitem()
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    def on_signal(signum, frame):
        log.info("tinyq: signal %s: finishing the work in flight", signum)
        stop()
        restore()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.getsignal(sig)
        signal.signal(sig, on_signal)
    return restore


def work_loop(queue, handler, connect, concurrency=1, worker=None, poll=1.0, lease=None):
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    worker = worker or "%s:%d" % (socket.gethostname(), os.getpid())
    options = None if lease is None else json.dumps({"lease": _ms(lease)})
    claim_sql = ("SELECT id, attempt, payload, group_key, lease_until, deadline "
                 "FROM tq_claim(?, ?, ?%s)" % ("" if options is None else ", ?"))
    columns = ("id", "attempt", "payload", "group_key", "lease_until", "deadline")
    running = set()                   # threads running a handler
    slots = threading.Condition()     # notified when a handler thread ends
    handled = 0

    def finished(fn):
        def thread_main(*args):
            try:
                fn(*args)
            finally:
                with slots:
                    running.discard(threading.current_thread())
                    slots.notify_all()
        return thread_main

    conn = connect()
    heartbeat = _Heartbeat(connect)
    heartbeat.start()
    restore_signals = _on_signals(queue.stop)
    try:
        while not queue._stopping.is_set():
            with slots:
                free = concurrency - len(running)
                if free == 0:
                    slots.wait(poll)
                    continue
            args = (queue.name, worker, free) + (() if options is None else (options,))
            try:
                jobs = [dict(zip(columns, row)) for row in _rows(conn, claim_sql, *args)]
            except Exception as exc:
                if not _is_busy(exc):
                    raise
                log.warning("tinyq: claim on %r failed: %s", queue.name, exc)
                jobs = []
            for job in jobs:
                thread = threading.Thread(target=finished(_run_one), name="tinyq-%s" % job["id"],
                                          args=(handler, connect, job, heartbeat))
                with slots:
                    running.add(thread)
                thread.start()
                handled += 1
            if not jobs and not queue._stopping.is_set():
                try:   # sleep without a lock until a job may be claimable, at most `poll`
                    _one(conn, "SELECT tq_wait(?, ?)", queue.name, max(1, int(poll * 1000)))
                except Exception as exc:
                    if not _is_busy(exc):
                        raise
                    time.sleep(poll)
    finally:
        restore_signals()
        with slots:                   # claim nothing more; wait for the work in flight
            while running:
                slots.wait()
        heartbeat.close()
        conn.close()
        queue._stopping.clear()
    return handled
