"""Workflows in a handler: run.wait_for, run.wait_signal and run.sleep, for both runs.

Shared by the thread (Run) and asyncio (AsyncRun) runs. Each one either returns at once
(what it waited for is there) or ends the attempt with a 'wait' or 'snooze' outcome; the
job runs again from the top later, and its kept steps bring it back to the same call,
which then returns. The decisions are here; the runs only read the store (sync or async)."""
from __future__ import annotations

import datetime
import json
import re
from typing import Any, Dict, List, Optional, Sequence

from ._context import Outcome

# Each id of a JSON array (?2) with its job (tq_get: NULL when there is none), and whether
# the job ?1 is already linked to it (tq_deps lists the jobs ?1 waits or waited for).
JOBS_OF = "SELECT value, tq_get(value), value IN (SELECT id FROM tq_deps(?1)) FROM json_each(?2)"
NOW = "SELECT tq_now()"
# A step as a row: a signal sent without a payload keeps the step with a NULL value, which
# tq_step_get cannot tell from no step at all (a timeout).
STEP_ROW = "SELECT value FROM tq_steps(?) WHERE name = ?"

FINISHED = ("done", "failed")
UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(value: Any, what: str = "duration") -> int:
    """A duration as integer ms: ms (int), a timedelta, or text such as '30s' or '1.5h'."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return int(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", value) if isinstance(value, str) else None
    if match is None:
        raise ValueError("%s: not a duration: %r (ms, or text such as '30s', '10m', '7d')" % (what, value))
    return int(float(match.group(1)) * UNITS_MS[match.group(2)])


def wait_ids(ids: Any) -> List[str]:
    """wait_for's ids as a list of text (one id alone is a list of one)."""
    ids = [ids] if isinstance(ids, str) else list(ids)
    if not all(isinstance(i, str) for i in ids):
        raise TypeError("wait_for: job ids are text, not %r" % (ids,))
    return ids


def after_results(ids: Sequence[str], rows: Sequence[Sequence[Any]]) -> List[Any]:
    """The results of `ids` (in order) once all are done and linked to this job; else the
    attempt ends: 'wait', or 'fail' (as a dependency's default after_failed) when one failed
    for good or is gone (a cancelled job is removed, with its edges: it cannot be told from
    an id never added). `rows` are JOBS_OF's: (id, tq_get text, linked).

    The 'wait' names those not finished and those not linked yet: the settle links every one
    (an edge keeps a done job until this one has finished, whatever its dedupe: DEP-01), and
    when all have finished the job is due again at once and its replay returns here. Without
    it, jobs already done at the first wait would hold nothing, and a later long wait
    (wait_signal) could outlast their dedupe: swept, the replay would find them gone."""
    jobs = {i: None if text is None else json.loads(text) for i, text, _ in rows}
    linked = {i for i, _, is_linked in rows if is_linked}
    for i in ids:
        job = jobs[i]
        if job is None:
            raise Outcome("fail", "dependency %r is gone: cancelled, or never added" % (i,))
        if job["state"] == "failed":
            raise Outcome("fail", "dependency %r failed: %s" % (i, job.get("error")))
    waits = [i for i in dict.fromkeys(ids) if jobs[i]["state"] not in FINISHED or i not in linked]
    if waits:
        raise Outcome("wait", json.dumps({"after": waits}))
    return [jobs[i].get("result") for i in ids]


def signal_steps(name: str) -> tuple:
    """The steps of a signal wait: the payload (tq_signal keeps it as `signal:<name>`), and
    when the wait ends (kept by the helper before it waits, so a replay knows it waited)."""
    if not isinstance(name, str) or not name:
        raise ValueError("wait_signal: a signal's name is text, not %r" % (name,))
    return "signal:" + name, "until:signal:" + name


def signal_wait(name: str, until: Optional[int], now: int) -> None:
    """After the payload step was missing: return (None: timed out) when `until` has passed,
    else end the attempt waiting for the signal, for what is left of the timeout."""
    if until is None:
        raise Outcome("wait", json.dumps({"signal": name}))
    if now >= until:
        return
    raise Outcome("wait", json.dumps({"signal": name, "timeout": until - now}))


def sleep_step(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("sleep: a sleep's name is text, not %r" % (name,))
    return "sleep:" + name


def sleep_until(until: int, now: int) -> None:
    """Return once `until` has passed; before, end the attempt snoozing for what is left."""
    if now < until:
        raise Outcome("snooze", until - now)
