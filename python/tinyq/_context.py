"""What the thread and asyncio workers share: the outcomes a handler raises, the run's
attributes, the job context (a contextvar) and the logging filter that reads it."""
from __future__ import annotations

import contextvars
import datetime
import logging
from typing import Any, Dict, Optional

from ._sql import _decode, _ms

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
