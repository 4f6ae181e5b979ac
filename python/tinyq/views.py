"""What an operator reads about a store, shared by the command line and the dashboard.

The connection to an existing store (`connect`), one job's story (tq_get, tq_steps, and
its timeline from tq_watch), pages of a queue's jobs (tq_jobs, continued by `after`, never
OFFSET), and the schedules (tq_schedules)."""
import json
import os
import urllib.parse

from ._connection import driver, load

# The states of a job, in the order the lists show them.
STATES = ("waiting", "scheduled", "blocked", "running", "done", "failed")
# A list row: what a table shows; payload, result and meta are on the job's page.
LIST_COLUMNS = ("id, queue, state, group_key, priority, attempt, run_at, lease_until, worker, "
                "error, progress, created_at, settled_at")


class Failure(Exception):
    """An error for the operator: one line on stderr and an exit status."""

    def __init__(self, message, status=2):
        super().__init__(message)
        self.status = status


# The sqlite3 module of the connections: the standard library's, or pysqlite3 in a
# Python whose sqlite3 cannot load extensions (_connection.driver).
sqlite3 = driver()


def connect(path, check_same_thread=True, store=True):
    """A connection, with tinyq loaded, to an existing database that has a tinyq store:
    read-write when the file is writable, else read-only (mode=ro); a read-only file in WAL
    mode whose directory is read-only too (SQLite cannot make its -shm there) is read as
    immutable when it has no -wal to read: what the file holds is then the whole store.
    With store=False, a database without a readable store is opened too."""
    if not os.path.exists(path):
        raise Failure("no such file: %s" % path)
    if not os.path.isfile(path):
        raise Failure("not a database file: %s" % path)
    modes = ["rw"] if os.access(path, os.W_OK) else ["ro"]
    wal = path + "-wal"
    if modes == ["ro"] and not (os.path.exists(wal) and os.path.getsize(wal)):
        modes.append("ro&immutable=1")
    for mode in modes:
        try:
            return _connect(path, mode, check_same_thread, store)
        except sqlite3.DatabaseError as err:
            if mode == modes[-1] or code(err) != SQLITE_READONLY:
                raise Failure("%s: %s" % (path, err))
    raise AssertionError("unreachable")


def _connect(path, mode, check_same_thread, store=True):
    uri = "file:%s?mode=%s" % (urllib.parse.quote(os.path.abspath(path)), mode)
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0,
                           check_same_thread=check_same_thread)
    try:
        load(conn)
        # tq_debug reads the stored schema version: "... schema none (...)" without a store.
        found = not store or " schema none " not in one(conn, "SELECT tq_debug()")
    except BaseException:
        conn.close()
        raise
    if not found:
        conn.close()
        raise Failure("%s has no tinyq store (no tinyq_* tables); nothing was changed" % path)
    return conn


SQLITE_ERROR, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY = 1, 5, 6, 8


def code(err):
    """The primary result code of a SQLite error (SQLITE_READONLY for _READONLY_DIRECTORY...)."""
    return getattr(err, "sqlite_errorcode", 0) & 0xff


def busy(err):
    return code(err) in (SQLITE_BUSY, SQLITE_LOCKED)


def refused(err):
    """True when tinyq refused an argument: its message starts with the function's name."""
    return code(err) == SQLITE_ERROR and str(err).startswith("tq_")


def rows(conn, sql, *args):
    """(column names, rows) of a query."""
    cur = conn.execute(sql, args)
    return [c[0] for c in cur.description], cur.fetchall()


def one(conn, sql, *args):
    row = conn.execute(sql, args).fetchone()
    return None if row is None else row[0]


def dicts(conn, sql, *args):
    cur = conn.execute(sql, args)
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, row)) for row in cur]


def job_story(conn, job_id, since=0):
    """None when there is no such job, else {job, steps, timeline}: tq_get's object (None
    for a job that is gone but whose events are kept: a cancelled one), the steps kept, and
    the job's events after `since` (every event, with 0). The event log keeps
    the worker only on an attempt's `running` event (its detail), so each event shows the
    worker of its attempt (for the current attempt, tq_get's worker; else None if that
    attempt's running event is not among these)."""
    text = conn.execute("SELECT tq_get(?)", (job_id,)).fetchone()[0]
    job = None if text is None else json.loads(text)
    # The job's own events (tinyq chains them, schema 7); a job that is gone: the log after `since`.
    timeline = dicts(conn, "SELECT seq, state, attempt, at, detail FROM tq_watch WHERE job = ? AND since = ?",
                     job_id, since)
    if job is None:     # a cancelled job is gone, but its events are kept: job None
        return {"job": None, "steps": [], "timeline": _workers(timeline, {}), "deps": [], "dependents": []} \
            if timeline or since else None
    steps = dicts(conn, "SELECT name, attempt, value, created_at FROM tq_steps(?)", job_id)
    workers = {job["attempt"]: job["worker"]} if job["attempt"] else {}
    return {"job": job, "steps": steps, "timeline": _workers(timeline, workers),
            "deps": deps(conn, job_id), "dependents": dependents(conn, job_id)}


def deps(conn, job_id):
    """The jobs `job_id` waits or waited for (tq_deps): [{id, state, error}] (the results are
    on their own pages); [] before workflows (schema 7)."""
    return _workflow_rows(conn, "SELECT id, state, error FROM tq_deps(?)", job_id)


def dependents(conn, job_id, limit=100):
    """The jobs that wait or waited for `job_id`, the first `limit` by id: [{id, state}]."""
    return _workflow_rows(conn, DEPENDENTS, job_id, limit)


# The store's edges (schema 7): a tinyq_deps row per (dep, job) of job seqs, keyed by dep; a
# job that goes takes its edges with it. In add order of the dependents.
DEPENDENTS = ("SELECT w.id AS id, tq_get(w.id) ->> 'state' AS state FROM main.tinyq_jobs d "
              "JOIN main.tinyq_deps e ON e.dep = d.seq JOIN main.tinyq_jobs w ON w.seq = e.job "
              "WHERE d.id = ? ORDER BY e.job LIMIT ?")


def _workflow_rows(conn, sql, *args):
    try:
        return dicts(conn, sql, *args)
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return []
        raise


def _workers(timeline, workers):
    """Each event with the worker of its attempt: the detail of that attempt's running event."""
    for event in timeline:
        if event["state"] == "running":
            workers[event["attempt"]] = event["detail"]
    for event in timeline:
        event["worker"] = workers.get(event["attempt"])
    return timeline


def page(conn, queue=None, state=None, group=None, prefix=None, after=None, limit=50, columns=LIST_COLUMNS):
    """{jobs, next}: up to `limit` jobs of `queue` in `state` in tinyq's order for that list
    (or, with `prefix`, in id order), after the job `after`; `next` is the `after` of the
    following page, or None on the last page."""
    where, args = [], []
    for column, value in (("queue", queue), ("state", state), ("group_key", group),
                          ("prefix", prefix), ("after", after)):
        if value is not None:
            where.append("%s = ?" % column)
            args.append(value)
    sql = "SELECT %s FROM tq_jobs%s LIMIT ?" % (columns, " WHERE " + " AND ".join(where) if where else "")
    jobs = dicts(conn, sql, *args, limit + 1)
    more = len(jobs) > limit
    return {"jobs": jobs[:limit], "next": jobs[limit - 1]["id"] if more else None}


def schedules(conn):
    """Every schedule (tq_schedules), or None when this tinyq has no schedules."""
    try:
        return dicts(conn, "SELECT * FROM tq_schedules")
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return None
        raise
