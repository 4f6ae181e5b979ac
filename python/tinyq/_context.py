"""What both workers share of a run: outcomes, a run's attributes, the job context.

What the thread and asyncio workers share: the outcomes a handler raises, the run's
attributes, the job context (a contextvar) and the logging filter that reads it."""
from __future__ import annotations

import contextvars
import datetime
import json
import logging
import math
import time
from typing import Any, Dict, Optional, Set, Tuple

from ._sql import _decode, _ms

log = logging.getLogger("tinyq")

__all__ = ["Outcome", "Cancelled", "RunBase", "current_run", "JobContextFilter"]


class Outcome(BaseException):
    """Raised by run.retry / run.snooze / run.fail to end the handler with that outcome.

    A BaseException (like SystemExit), so a handler's `except Exception:` does not swallow it.
    """

    def __init__(self, outcome: Optional[str], value: Any = None):
        super().__init__(outcome, value)
        self.outcome = outcome
        self.value = value


class Cancelled(Outcome):
    """This attempt no longer holds its job (cancelled, timed out, or taken by a later
    attempt). Raised by run.step when its answer could not be kept; nothing is settled."""

    def __init__(self, reason: str = "cancelled"):
        super().__init__(None, reason)


#: The run whose handler is executing in this context (a thread's or an asyncio task's), or None.
current_run: "contextvars.ContextVar[Optional[RunBase]]" = contextvars.ContextVar("tinyq_run", default=None)

#: Keys of a job's meta read as its correlation id, first found wins.
CORRELATION_KEYS = ("correlation_id", "correlationId", "request_id")


class RunBase:
    """A claimed attempt: its id, attempt, group, lease, deadline and meta, and the
    controls that end it (retry, snooze, fail)."""

    def __init__(self, job: Dict[str, Any]):
        self.id: str = job["id"]
        self.attempt: int = job["attempt"]
        self.group: Optional[str] = job["group_key"]
        self.lease_until: int = job["lease_until"]
        self.deadline: Optional[int] = job["deadline"]
        meta = _decode(job.get("meta"))
        self.meta: Dict[str, Any] = meta if isinstance(meta, dict) else {}
        self.cancelled = False            # True once the job was cancelled or timed out
        self._renew_every = 0.0
        self._ended: Optional[str] = None  # why this attempt is over for the worker (ENDED)
        self._told_ended = False
        self._steps: Dict[str, Any] = {}   # answers this attempt read or kept, as stored
        self._wait_names: Set[str] = set()  # the sleep: and signal: steps this attempt's waits used

    def _kept_here(self, name: str) -> Tuple[bool, Any]:
        """(known, the stored answer) of the step `name` without asking the store: an
        answer this attempt read or kept never changes (the first one kept wins), and on a
        job's first attempt none is kept but by the attempt itself (an earlier attempt's,
        a signal's or a kept wait's steps go to a job that is then claimed again, so at
        attempt 2 or later). Anything else asks the store (tq_step_get)."""
        if name in self._steps:
            return True, self._steps[name]
        return self.attempt == 1, None

    # Why an attempt is over for its worker while code of the handler may still run (a task
    # it spawned, or the handler itself once abandoned): what run.progress / run.step say.
    ENDED = {
        "finished": "its handler has finished, so the job is settled",
        "abandoned": "stop()'s grace ended while it ran: abandoned, the job runs again once its lease has run out",
    }

    def _end(self, why: str) -> None:
        if self._ended is None:
            self._ended = why

    def _abandon(self) -> bool:
        """stop()'s grace ended while this attempt ran: the worker stops renewing it and
        will settle nothing of it. Returns whether it still held its job."""
        held = not self.cancelled
        self.cancelled = True
        self._end("abandoned")
        return held

    def _progress_after_end(self) -> bool:
        """True when the attempt is over (ENDED): progress is not written; said once."""
        if self._ended is None:
            return False
        if not self._told_ended:
            self._told_ended = True
            log.warning("tinyq: run.progress for job %s (attempt %s) after the attempt ended: %s; "
                        "not recorded, returns False", self.id, self.attempt, self.ENDED[self._ended])
        return True

    def _step_after_end(self, name: str) -> None:
        if self._ended is not None:
            raise Cancelled("step %r not kept: attempt %s of %s is over (%s)"
                            % (name, self.attempt, self.id, self.ENDED[self._ended]))

    def _new_wait(self, call: str, step: str, name: str) -> None:
        """A sleep or signal wait keeps its state in steps named after it, so a second one
        of the same name in a job would return at once (the first one's wake time or
        timeout): refused. Counted per attempt: a replay makes the same calls again, each
        once, and is no second use."""
        if step in self._wait_names:
            raise ValueError("run.%s: the name %r was used already by this job: each sleep and signal wait "
                             "needs a name of its own (e.g. f'%s-{n}')" % (call, name, name))
        self._wait_names.add(step)

    @property
    def correlation_id(self) -> Optional[str]:
        """The meta's correlation id (`correlation_id`, `correlationId` or `request_id`)."""
        for key in CORRELATION_KEYS:
            if self.meta.get(key) is not None:
                return str(self.meta[key])
        return None

    def _lost_step(self, name: str) -> None:
        self.cancelled = True
        raise Cancelled("step %r not kept: attempt %s of %s no longer holds the job"
                        % (name, self.attempt, self.id))

    def retry(self, delay: Any = None) -> None:
        """End this attempt; run again after `delay` (default: the backoff). Counts."""
        raise Outcome("retry", _delay("retry", delay))

    def snooze(self, delay: Any) -> None:
        """End this attempt; run again after `delay`. Does not count against the budget."""
        raise Outcome("snooze", _delay("snooze", delay))

    def fail(self, reason: Any) -> None:
        """Fail the job for good now, with `reason` as its error."""
        raise Outcome("fail", str(reason))

    def __repr__(self) -> str:
        return "%s(id=%r, attempt=%r)" % (type(self).__name__, self.id, self.attempt)


def stop_grace(timeout: Any) -> Optional[float]:
    """The monotonic time at which stop(timeout=seconds)'s grace ends (None: no timeout)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0 \
            or math.isinf(timeout):
        raise ValueError("stop(timeout): timeout must be a number of seconds >= 0 or None, not %r" % (timeout,))
    return time.monotonic() + timeout


def _delay(name: str, delay: Any) -> Any:
    """A delay as tq_settle takes it: integer ms, text such as '2.5s', or a timedelta. A
    float is refused here, where the handler's author sees it: 0.5 is surely seconds, and
    tinyq's numbers are ms (the job would otherwise end as an error, counted)."""
    if isinstance(delay, bool) or not (delay is None or isinstance(delay, (int, str, datetime.timedelta))):
        raise TypeError("run.%s(delay): delay must be integer ms, text such as '2.5s', or a timedelta, not %r"
                        % (name, delay))
    return _ms(delay)


class JobContextFilter(logging.Filter):
    """A logging filter that puts the running job on every record: `job_id`, `attempt`
    and `correlation_id` (None outside a job), whichever thread or task logs.

        handler.addFilter(tinyq.JobContextFilter())
        logging.Formatter("%(job_id)s %(correlation_id)s %(message)s")
    """

    def filter(self, record: logging.LogRecord) -> bool:
        run = current_run.get()
        record.job_id = run.id if run else None
        record.attempt = run.attempt if run else None
        record.correlation_id = run.correlation_id if run else None
        return True


def step_text(name: str, answer: Any) -> str:
    """A step's answer as stored JSON. One that JSON cannot hold (a datetime, a set, bytes,
    a cycle) fails the job for good: its function has run, and a retry would run it (and
    its side effect) again; a placeholder kept instead would give a replay something else
    than this attempt got."""
    try:
        return json.dumps(answer)
    except (TypeError, ValueError) as exc:
        raise Outcome("fail", "run.step %r: its answer cannot be stored as JSON (%s): the job fails rather than "
                      "run the step again (return what JSON can hold: a datetime as ISO text, a set as a list, "
                      "bytes as text)" % (name, error_text(exc))) from exc


def error_text(exc: BaseException, errors: str = "message") -> str:
    """What a failure records: "Class: message" (errors='message', the default), or only
    the class (errors='class'), for messages that should not travel with the job."""
    message = str(exc)
    if errors == "class" or not message:
        return type(exc).__name__
    return "%s: %s" % (type(exc).__name__, message)


def is_busy(exc: BaseException) -> bool:
    text = "%s %s" % (type(exc).__name__, exc)
    return "locked" in text.lower() or "busy" in text.lower()
