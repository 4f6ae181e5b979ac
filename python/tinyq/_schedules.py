"""Periodic jobs for `tinyq.Queue`: schedule, unschedule, schedules (tq_schedule & co)."""
import json
from typing import Any, Dict, List

from ._sql import _encode, _one, _options, _rows

SCHEDULE_COLUMNS = ("name", "queue", "when", "tz", "next_at", "last_at", "last_id", "paused")


class Schedules:
    """Methods of a Queue (self.conn, self.name; self._writing() for a write) for the schedules
    of its queue."""

    def schedule(self, name: str, when: str, payload: Any, **options: Any) -> Dict[str, Any]:
        """Create or replace the schedule `name` of this queue; returns it as a dict.

        `when`: a cron expression ('0 9 * * mon', 6 fields with seconds first), '@every 10m',
        or '@hourly' '@daily' '@weekly' '@monthly' '@yearly'. Options: tz ('Europe/Paris'),
        missed ('latest', 'skip', 'all'), paused, priority, group, attempts, meta. Each due
        time becomes the job '<name>@<ISO-8601 UTC time>', added by the next claim here.
        """
        opts = _options(**options)
        args = (name, self.name, when, _encode(payload)) + (() if opts is None else (opts,))
        marks = ", ".join("?" * len(args))
        return json.loads(_one(self._writing(), "SELECT tq_schedule(%s)" % marks, *args))

    def unschedule(self, name: str) -> bool:
        """Remove the schedule `name`; False when there was none. Its jobs already added stay."""
        return bool(_one(self._writing(), "SELECT tq_unschedule(?)", name))

    def schedules(self) -> List[Dict[str, Any]]:
        """This queue's schedules (tq_schedules) as dicts, by name."""
        rows = _rows(self.conn, 'SELECT name, queue, "when", tz, next_at, last_at, last_id, paused '
                                "FROM tq_schedules WHERE queue = ?", self.name)
        return [dict(zip(SCHEDULE_COLUMNS, row), paused=bool(row[7])) for row in rows]
