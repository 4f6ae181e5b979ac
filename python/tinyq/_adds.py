"""What Queue.add and Queue.add_many send to tq_add: the options, and many adds at once.

The options of one add, and many adds in one transaction and one statement."""
import datetime
import json
from typing import Any, List, Optional, Sequence

from ._otel import with_trace
from ._sql import _encode, _options, _rows, atomic

# Many adds, one statement: each element of the JSON array is a payload as stored (text) ...
ADD_EACH = "SELECT tq_add(?, value, ?) FROM json_each(?)"
# ... or [payload, id]: the id joins the options every add shares.
ADD_EACH_WITH_ID = ("SELECT tq_add(?, value ->> 0, json_set(coalesce(?, '{}'), '$.id', value ->> 1)) "
                    "FROM json_each(?)")


def add_options(**kw: Any) -> Optional[str]:
    """tq_add's options as JSON (None when there are none). `expires` as a timedelta is a
    duration from the add, sent as text ('90000ms'): a number there is a time."""
    kw["meta"] = with_trace(kw.get("meta"))   # OpenTelemetry: the active span's context (_otel.py)
    expires = kw.get("expires")
    if isinstance(expires, datetime.timedelta):
        kw["expires"] = "%dms" % int(expires.total_seconds() * 1000)
    return _options(**kw)


def after_list(after: Any) -> Optional[List[str]]:
    """`after` as a list of ids (one id alone is a list of one); None stays None."""
    if after is None:
        return None
    return [after] if isinstance(after, str) else list(after)


def add_many(conn: Any, queue: str, payloads: Sequence[Any], ids: Optional[Sequence[str]],
             options: Optional[str]) -> List[str]:
    """Adds every payload with the same options (and its own id, when `ids` is given) in one
    statement and one transaction (sql.atomic): a bad add rolls back every add of the call."""
    payloads = list(payloads)
    if ids is not None:
        ids = list(ids)
        if len(ids) != len(payloads):
            raise ValueError("add_many: %d ids for %d payloads" % (len(ids), len(payloads)))
    if not payloads:
        return []
    if ids is None:
        sql, items = ADD_EACH, [_encode(p) for p in payloads]
    else:
        sql, items = ADD_EACH_WITH_ID, [[_encode(p), i] for p, i in zip(payloads, ids)]
    added = atomic(conn, lambda: _rows(conn, sql, queue, options, json.dumps(items)))
    return [row[0] for row in added]
