"""What the tests share besides fixtures (those are in conftest.py): paths, time units, the
connection a worker opens, and short wrappers of tinyq's functions. Every test loads the real
dist/tinyq.so through a real driver.

Run with Debian's /usr/bin/python3 (its sqlite3 module can load extensions).
"""
import json
import os
import re
import sqlite3
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

T0 = 1_800_000_000_000          # a fixed "now" (2027-01-15T08:00:00Z), pinned with tq_clock
SEC = 1000
MIN = 60 * SEC
HOUR = 60 * MIN
DAY = 24 * HOUR
LEASE = 30 * SEC                # the default lease (docs/reference.md, tq_queue)
EXT = os.path.join(ROOT, "dist", "tinyq")          # SQLite adds the .so itself
SO = EXT + ".so"
# `make test-all` (TINYQ_FULL=1) runs the longest tests in their long form: the stores of
# 1,000,000 jobs, the full fuzz budget; `make test` runs them at a tenth of that.
FULL = os.environ.get("TINYQ_FULL") == "1"
MILLION = 1_000_000 if FULL else 100_000


def connect(path, busy_ms=5000):
    """A connection the way a worker opens one: tinyq loaded, WAL, busy timeout, autocommit."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_ms / 1000)
    conn.enable_load_extension(True)
    conn.load_extension(EXT)
    conn.enable_load_extension(False)
    for attempt in range(200):          # with busy_ms=0 even these may meet a lock
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or attempt == 199:
                raise
            time.sleep(0.005)
    return conn


def one(conn, sql, *args):
    """The single value a query returns."""
    row = conn.execute(sql, args).fetchone()
    return None if row is None else row[0]


def get(conn, job_id):
    """tq_get as a dict (or None)."""
    text = one(conn, "SELECT tq_get(?)", job_id)
    return None if text is None else json.loads(text)



def line_key(priority, run_at, seq):
    """A job's claim-order key as the store writes it (sql/store.sql, tinyq_buckets)."""
    return "%08x%d%016x%016x" % (2147483647 - priority, run_at >= 0, run_at & (2**64 - 1), seq)


def check_buckets(conn):
    """Each queue's line is counted as sql/store.sql says (its long-lines block): one bucket of
    at most 1024 jobs and no rows (`spill`, `front` and next_* NULL), or a first bucket
    counted by tinyq_counts.front (1 to 1024 jobs) ending where the first row of
    tinyq_buckets starts (next_*), and rows each starting at its own key, holding 1 to 1024
    queued jobs (parked or not), together all of them; and the spans of those rows
    (tinyq_spans), from key '', each 1 to 64 of them and their jobs."""
    import bisect
    lines = {}
    for queue, p, r, s in conn.execute("SELECT queue, priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued'"):
        lines.setdefault(queue, []).append(line_key(p, r, s))
    for queue, queued, spill, front, *first_end in conn.execute(
            "SELECT queue, queued, spill, front, next_priority, next_run_at, next_seq FROM tinyq_counts"):
        rows = conn.execute("SELECT key, n, priority, run_at, seq FROM tinyq_buckets WHERE queue = ? ORDER BY key",
                            (queue,)).fetchall()
        keys = sorted(lines.get(queue, []))
        assert queued == len(keys), (queue, queued, len(keys))
        if not rows:
            assert spill is None and front is None and first_end == [None] * 3 and queued <= 1024, \
                (queue, spill, front, first_end, queued)
            continue
        assert spill is not None and first_end == list(rows[0][2:]), (queue, spill, first_end, rows[:1])
        real_front = bisect.bisect_left(keys, rows[0][0])
        assert front == real_front and 1 <= front <= 1024, (queue, front, real_front)
        starts = [k for k, *_ in rows]
        for i, (key, n, p, r, s) in enumerate(rows):
            assert key == line_key(p, r, s), (queue, key, p, r, s)
            end = starts[i + 1] if i + 1 < len(rows) else None
            real = (bisect.bisect_left(keys, end) if end else len(keys)) - bisect.bisect_left(keys, key)
            assert n == real and 1 <= n <= 1024, (queue, key, n, real)
        spans = conn.execute("SELECT key, n, buckets FROM tinyq_spans WHERE queue = ? ORDER BY key", (queue,)).fetchall()
        assert spans and spans[0][0] == "", (queue, spans[:1])
        for i, (key, n, buckets) in enumerate(spans):
            end = spans[i + 1][0] if i + 1 < len(spans) else None
            inside = [r for r in rows if r[0] >= key and (end is None or r[0] < end)]
            assert (n, buckets) == (sum(r[1] for r in inside), len(inside)) and 1 <= buckets <= 64, (queue, key, n, buckets)
    alone = conn.execute("SELECT DISTINCT queue FROM tinyq_spans WHERE queue NOT IN (SELECT queue FROM tinyq_buckets)")
    assert not alone.fetchall(), "spans of a line without buckets"


def plain_ahead(conn, job_id):
    """`ahead` counted the plain way: every waiting job of the queue before this one in claim order."""
    return one(conn, """
        SELECT count(*) FROM tinyq_jobs o JOIN tinyq_jobs j ON j.id = ? AND o.queue = j.queue
        WHERE (o.status = 'queued' OR (o.status = 'scheduled' AND o.run_at <= tq_now()))
          AND (o.priority > j.priority OR (o.priority = j.priority
               AND (o.run_at < j.run_at OR (o.run_at = j.run_at AND o.seq < j.seq))))""", job_id)

def trigger_order(conn, table="tinyq_jobs"):
    """The names of `table`'s triggers in the order they were created: SQLite fires one
    change's triggers newest first, and some read what another wrote, so the order is part
    of the store."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? ORDER BY rowid", (table,))]


def claim(conn, queue, worker="w1", n=1, options=None):
    """tq_claim's rows as dicts."""
    if options is None:
        cur = conn.execute("SELECT * FROM tq_claim(?, ?, ?)", (queue, worker, n))
    else:
        cur = conn.execute("SELECT * FROM tq_claim(?, ?, ?, ?)",
                           (queue, worker, n, json.dumps(options)))
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def snapshot(conn):
    """Every row of every tinyq_* table: to assert that a failed call changed nothing."""
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'tinyq%' ORDER BY name")]
    return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}


# Small SQL wrappers the tests share.

def pin(conn, ms):
    one(conn, "SELECT tq_clock(?)", ms)

def setq(conn, queue, **settings):
    return json.loads(one(conn, "SELECT tq_queue(?, ?)", queue, json.dumps(settings)))

def add(conn, queue, payload="{}", **options):
    if options:
        return one(conn, "SELECT tq_add(?, ?, ?)", queue, payload, json.dumps(options))
    return one(conn, "SELECT tq_add(?, ?)", queue, payload)

def settle(conn, job_id, attempt, outcome="done", value=None):
    if value is None:
        return one(conn, "SELECT tq_settle(?, ?, ?)", job_id, attempt, outcome)
    return one(conn, "SELECT tq_settle(?, ?, ?, ?)", job_id, attempt, outcome, value)

def renew(conn, job_id, attempt, lease=None):
    if lease is None:
        return one(conn, "SELECT tq_renew(?, ?)", job_id, attempt)
    return one(conn, "SELECT tq_renew(?, ?, ?)", job_id, attempt, lease)

def ids(rows):
    return [r["id"] for r in rows]


def watch_all(conn, queue=None):
    """Every tq_watch event (paging by seq, in case a call returns a bounded number)."""
    events, since = [], 0
    while True:
        if queue is None:
            cur = conn.execute("SELECT seq, id, queue, state, attempt, at, detail FROM tq_watch(?)",
                               (since,))
        else:
            cur = conn.execute("SELECT seq, id, queue, state, attempt, at, detail "
                               "FROM tq_watch(?, ?)", (since, queue))
        cols = [c[0] for c in cur.description]
        batch = [dict(zip(cols, r)) for r in cur.fetchall()]
        if not batch:
            return events
        events.extend(batch)
        since = batch[-1]["seq"]


def shell(db_path, *sql, check=True):
    """Run statements through the sqlite3 shell with tinyq loaded; returns the CompletedProcess."""
    args = ["sqlite3", "-bail", db_path, f".load {EXT}"] + list(sql)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"sqlite3 failed ({proc.returncode}): {proc.stderr}")
    return proc


def run_python(code, *args, timeout=60):
    """Run a snippet in a fresh Debian python3 process (for crash and concurrency tests)."""
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "tests"))
    return subprocess.run(["/usr/bin/python3", "-c", code, *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


SIGNAL_TAKEN = "finishing the work in flight"   # what a worker logs once it took a signal in


def read_until(stream, text):
    """Lines of a process's `stream` up to the first that holds `text` (an AssertionError with
    what came if it ends first). A test that signals a worker waits for its log line: on a
    loaded machine the handler may run on before the worker has taken the signal in."""
    seen = []
    while not any(text in line for line in seen):
        line = stream.readline()
        assert line, "".join(seen)
        seen.append(line)
    return seen


def open_handles(path):
    """This process's open file descriptors on the database at `path` (or its -wal / -shm):
    what a test checks to see that a worker let go of the file."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + fd).startswith(path):
                found.append(fd)
        except OSError:
            pass  # closed meanwhile
    return found


# -- jobs, claims and the watch log, as the lifecycle tests read them -------------------------

GENERATED_ID = re.compile(r"tq_[0-9A-HJKMNP-TV-Z]{26}")


def claim_one(conn, queue, worker="w1", options=None):
    rows = claim(conn, queue, worker, 1, options)
    assert len(rows) == 1, f"expected one claimable job in {queue!r}, got {rows}"
    return rows[0]


def progress(conn, job_id, attempt, value):
    return one(conn, "SELECT tq_progress(?, ?, ?)", job_id, attempt, value)


def cancel(conn, job_id):
    return one(conn, "SELECT tq_cancel(?)", job_id)


def retry(conn, job_id):
    return one(conn, "SELECT tq_retry(?)", job_id)


def sweep(conn, limit=None):
    if limit is None:
        return one(conn, "SELECT tq_sweep()")
    return one(conn, "SELECT tq_sweep(?)", limit)


def rows(conn, sql, *args):
    cur = conn.execute(sql, args)
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def watch(conn, since=0, queue=None):
    cols = "seq, id, queue, state, attempt, at, detail"
    if queue is None:
        return rows(conn, f"SELECT {cols} FROM tq_watch(?)", since)
    return rows(conn, f"SELECT {cols} FROM tq_watch(?, ?)", since, queue)


def jobs(conn, where="", *args):
    return rows(conn, f"SELECT id, queue, state FROM tq_jobs {where}", *args)


def event_count(conn):
    return len(watch(conn, 0))


def claim_ids(conn, queue, n=1, worker="w1", options=None):
    return [(r["id"], r["attempt"]) for r in claim(conn, queue, worker, n, options)]


RECURSE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) "


def bulk_add(conn, queue, n, id_prefix=None, payload_bytes=0, priority=None):
    """Add n jobs in one transaction (ids id_prefix1..n when given); returns seconds taken."""
    opts = []
    if id_prefix is not None:
        opts.append(f"'id', '{id_prefix}' || x")
    if priority is not None:
        opts.append(f"'priority', {int(priority)}")
    payload = f"json_object('n', x, 'pad', printf('%.{payload_bytes}c', 'x'))" if payload_bytes \
        else "json_object('n', x)"
    call = f"tq_add(?, {payload}, json_object({', '.join(opts)}))" if opts \
        else f"tq_add(?, {payload})"
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    try:
        assert one(conn, RECURSE + f"SELECT count({call}) FROM c", n, queue) == n
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return time.perf_counter() - started


def settle_all(conn, claimed, outcome="done", value=None):
    conn.execute("BEGIN IMMEDIATE")
    try:
        for job_id, attempt in claimed:
            assert settle(conn, job_id, attempt, outcome, value) == 1
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def sweep_all(conn, limit=None):
    total = 0
    for _ in range(100_000):
        n = sweep(conn, limit)
        total += n
        if n == 0:
            return total
    raise AssertionError("tq_sweep never reached 0")


def cargo_version():
    """The version as Cargo.toml writes it: the one place it is written (tests/test_release.py)."""
    import tomllib
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        return tomllib.load(f)["package"]["version"]


# What examples/rust (its src/main.rs) prints after its versions line, job ids read as ID: the
# same on Linux (tests/test_rust_crate.py) and on WASI (tests/test_wasi.py).
RUST_EXAMPLE_LINES = [
    "added ID",
    "added ID",
    "worker-1 sent ada@example.com (attempt 1): settled 1, now done",
    "worker-1 sent grace@example.com (attempt 1): settled 1, now done",
    "2 jobs done",
    "closed",
]


def check_rust_example_output(out):
    """examples/rust's printed lines `out`: this tinyq's version and some SQLite's, then
    RUST_EXAMPLE_LINES."""
    assert re.fullmatch(r"tinyq %s on SQLite \S+" % re.escape(cargo_version()), out[0]), out
    assert [re.sub(r"tq_\w+", "ID", line) for line in out[1:]] == RUST_EXAMPLE_LINES, out
