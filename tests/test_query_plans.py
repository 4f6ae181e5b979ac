"""Query plans pinned (part of `make check`).

A workload on one connection reaches every path of tinyq's functions; then each statement
that connection keeps prepared (the `sql` column of `tq_statements`) goes through
`EXPLAIN QUERY PLAN`. A full scan of a table or a temporary b-tree (a sort, DISTINCT or
GROUP BY done in memory) makes a claim's cost grow with the store, so either fails the
test unless the statement is in ALLOWED below with the reason it is fine.

When statements change: run `python3 -m pytest -q tests/test_query_plans.py`; a new plan
step is printed with its statement. Fix the query or the index, or add an entry (a
fragment of the statement that stays stable across rewording, and why).
"""
import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest

from helpers import DAY, EXT, ROOT, T0, add, claim, connect, one, pin, setq

# (fragment of the statement's SQL, fragment of the plan step, why it is fine)
ALLOWED = [
    ("FROM tinyq_events WHERE tinyq_jobs.seq + 0 IS NOT NULL ORDER BY seq DESC LIMIT 1", "SCAN tinyq_events",
     "the seq the job's next event gets (src/timeline.rs): the log's last row, one step of a walk from its "
     "end that LIMIT 1 stops"),
    ("FROM tinyq_events ORDER BY seq DESC LIMIT 1", "SCAN tinyq_events",
     "the seq a new job's first event gets (src/timeline.rs): the log's last row, one step of a walk from its "
     "end that LIMIT 1 stops"),
    ("DELETE FROM tinyq_events WHERE seq <", "SCAN tinyq_events",
     "walks events oldest first to the first one still kept: events are appended in time order, so the "
     "rows it passes are the expired ones this sweep removes"),
    ("INSERT INTO tinyq_groups (queue, grp, running, started, dirty)", "USE TEMP B-TREE FOR GROUP BY",
     "limits::rebuild counts every group afresh: it runs when tq_queue sets or changes a rate or group limit "
     "(or on the first claim of a migrated store), never on an ordinary claim"),
    ("INSERT INTO tinyq_groups (queue, grp, started, dirty)", "USE TEMP B-TREE FOR GROUP BY",
     "a claim counts out, per group, the starts that left the group rate window since the last claim: each "
     "start is counted out once, so the b-tree holds only those"),
    ("SELECT CASE WHEN EXISTS (SELECT 1 FROM tinyq_holders WHERE id IS NOT ?3)", "SCAN tinyq_holders",
     "is another lease-holding process known? stops at the first holder row, one row per worker process"),
    ("WITH range(parked) AS (VALUES (0), (1))", "SCAN ",
     "tq_get's ahead walks both ranges of the claim index (parked or not): two constant rows, each a seek"),
    ("ORDER BY key DESC LIMIT 1) AS b LEFT JOIN tinyq_buckets AS x", "SCAN b",
     "tq_get's `ahead` (src/stats.rs, bucket_of): b is the one bucket row before the job, a seek that LIMIT 1 "
     "stops; the next row and the span are seeks from it"),
    ("WITH RECURSIVE pr(parked, p)", "SCAN pr",
     "tq_stats' oldest due job steps through its own CTE: one row per distinct priority, each a seek"),
    ("FROM tinyq_holders h WHERE NOT EXISTS", "SCAN h",
     "tinyq_holders has one row per worker process that leased a job: a sweep looks at each"),
    ("FROM tinyq_queues", "SCAN ",
     "tinyq_queues has one row per queue; tq_stats and the sweep list them all"),
    ("WHERE seq IN (SELECT value FROM json_each(?1))", "SCAN json_each VIRTUAL TABLE",
     "the claim's own list of picked jobs (at most n), each then found by its primary key"),
    ("FROM json_each(?1) e JOIN tinyq_jobs j ON j.seq = e.value", "SCAN e VIRTUAL TABLE",
     "a job's own list of dependencies (`after`, or a 'wait' for jobs), each then found by its key"),
    ("FROM json_each(?1) e LEFT JOIN tinyq_jobs j ON j.id = e.value", "SCAN e VIRTUAL TABLE",
     "the ids a job waits for, as given (`after`, or a 'wait' for jobs), each then found by its id"),
    ("FROM tinyq_steps s JOIN tinyq_jobs j ON s.job = j.seq", "USE TEMP B-TREE FOR ORDER BY",
     "tq_steps(id) sorts the steps of one job by time: as many as that job kept, never the store"),
    ("FROM tinyq_schedules ORDER BY name", "SCAN tinyq_schedules",
     "tq_schedules lists every schedule: the scan is the answer, in name order by the primary key"),
    ("FROM sqlite_master WHERE type = 'table' AND name = 'tinyq_meta'", "SCAN sqlite_master",
     "is there a store? SQLite's schema table: a few rows, read until the store is known on this connection"),
    ("/* tq_check reads every row */", "",
     "tq_check compares every counter with the rows it counts and every object with a new store's: "
     "an operator's command, O(rows) by design (docs/reference.md, tq_check), never run by a claim"),
    ("UPDATE tinyq_meta SET value = value WHERE 0", "SCAN tinyq_meta",
     "WHERE 0 matches nothing and SQLite reads no row: the statement only takes the write lock"),
]

# Plan steps that are never a cost: a constant row, a search, or stepping through a
# subquery's rows (the subquery's own steps are checked as well, and its LIMIT bounds it).
BAD = re.compile(r"^(SCAN (?!CONSTANT ROW|\(subquery-)|USE TEMP B-TREE)")

# Another process claims a job and exits without settling: its lease has a dead holder.
DIES_HOLDING = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=5)
c.enable_load_extension(True)
c.load_extension(sys.argv[2])
assert c.execute("SELECT count(*) FROM tq_claim('dead', 'gone', 1)").fetchone()[0] == 1
"""


def on_the_real_clock(conn, path):
    """What only runs unpinned: holders (a lease tied to a live process), a dead one freed."""
    one(conn, "SELECT tq_clock(NULL)")
    add(conn, "dead", "{}")
    add(conn, "dead", "{}")
    subprocess.run([sys.executable, "-c", DIES_HOLDING, path, EXT], check=True)
    taken = claim(conn, "dead", "alive", 2)  # the dead process's job waits again at once
    assert len(taken) == 2, taken


def in_transactions(conn):
    """Calls inside the caller's transaction, and a failure inside tinyq's own."""
    conn.execute("BEGIN")
    setq(conn, "tx", lease="5s")
    add(conn, "tx", "{}")
    conn.execute("COMMIT")
    # A trigger of the user's makes the claim's write fail: its transaction rolls back.
    conn.execute("CREATE TEMP TRIGGER boom BEFORE UPDATE ON main.tinyq_jobs BEGIN SELECT RAISE(ABORT, 'boom'); END")
    with pytest.raises(sqlite3.DatabaseError, match="boom"):
        claim(conn, "tx", "w", 1)
    conn.execute("BEGIN")
    with pytest.raises(sqlite3.DatabaseError, match="boom"):
        claim(conn, "tx", "w", 1)
    conn.execute("ROLLBACK")
    conn.execute("DROP TRIGGER boom")


def with_schedules(conn, step):
    """Periodic jobs, where this build has them: made, replaced, listed, then (later steps)
    come due through claims, and removed."""
    try:
        if step == "make":
            one(conn, "SELECT tq_schedule('tick', 'cron', '@every 1m', '{}')")
            one(conn, "SELECT tq_schedule('tick', 'cron', '@every 1m', '{}')")  # the same: keeps its next time
            one(conn, "SELECT tq_schedule('daily', 'cron', '0 9 * * *', '1', ?)",
                json.dumps({"tz": "Europe/Paris", "missed": "all", "group": "d", "meta": {"k": 1}}))
            conn.execute("SELECT * FROM tq_schedules").fetchall()
        elif step == "due":
            one(conn, "SELECT tq_wait('cron', 0)")
            claim(conn, "cron", "w", 10)
        else:
            one(conn, "SELECT tq_unschedule('daily')")
    except sqlite3.OperationalError as e:
        if "no such function: tq_schedule" not in str(e) and "no such function: tq_unschedule" not in str(e):
            raise


def settle_next(conn, queue, outcome="done", value=None):
    (job,) = claim(conn, queue, "wf", 1)
    one(conn, "SELECT tq_settle(?, ?, ?, ?)", job["id"], job["attempt"], outcome, value)
    return job


def with_workflows(conn):
    """Every path of workflows (DEP-01, SIG-01): after, 'wait', signals, timeouts, ends."""
    setq(conn, "wf", dedupe="1s", keep="1s")
    setq(conn, "wg", group_concurrency=1)
    add(conn, "wf", "{}", id="wf-a")
    add(conn, "wf", "{}", id="wf-b", expires="1s")
    add(conn, "wg", "{}", id="wf-c", group="g", after=["wf-a", "wf-b"], after_failed="run")
    add(conn, "wg", "{}", id="wf-d", after=["wf-c"])
    add(conn, "wg", "{}", id="wf-e", after=["wf-c"], after_failed="cancel")
    add(conn, "wg", "{}", id="wf-c", on_conflict="replace", after=["wf-a"])
    one(conn, "SELECT tq_get('wf-c')")
    conn.execute("SELECT * FROM tq_deps('wf-c')").fetchall()
    conn.execute("SELECT * FROM tq_jobs WHERE queue = 'wg' AND state = 'blocked'").fetchall()
    settle_next(conn, "wf")                      # wf-a done: wf-c counts it off
    one(conn, "SELECT tq_clock(tq_now() + 1000)")
    claim(conn, "wf", "wf", 1)                   # wf-b expires: wf-c runs anyway
    settle_next(conn, "wg", "fail", "no")        # wf-c fails: wf-d fails, wf-e is cancelled
    add(conn, "wg", "{}", id="wf-f", after=["wf-c"])  # a failed dependency at once
    one(conn, "SELECT tq_retry('wf-c')")
    settle_next(conn, "wg")
    add(conn, "wg", "{}", id="wf-g", after=["wf-c"])  # a done dependency: due at once
    add(conn, "wf", "{}", id="wf-h")
    add(conn, "wg", "{}", id="wf-i", after=["wf-h"])
    one(conn, "SELECT tq_cancel('wf-h')")
    # A running job waits for jobs, then for signals.
    add(conn, "wf", "{}", id="wf-p")
    (p,) = claim(conn, "wf", "wf", 1)
    add(conn, "wf", "{}", id="wf-k")
    for value in ({"after": ["wf-p"]}, {"after": ["wf-c"]}):
        try:
            one(conn, "SELECT tq_settle('wf-p', ?, 'wait', ?)", p["attempt"], json.dumps(value))
        except sqlite3.Error:
            pass
    one(conn, "SELECT tq_settle('wf-p', ?, 'wait', '{\"after\": [\"wf-g\"]}')", p["attempt"])
    settle_next(conn, "wg")  # wf-g, then wf-p waits for wf-k, then for signals
    (p,) = claim(conn, "wf", "wf", 1)
    one(conn, "SELECT tq_settle('wf-p', ?, 'wait', '{\"after\": [\"wf-k\", \"wf-f\"]}')", p["attempt"])
    (k,) = claim(conn, "wf", "wf", 1)
    one(conn, "SELECT tq_settle(?, ?, 'done')", k["id"], k["attempt"])
    one(conn, "SELECT tq_signal('wf-sent', '1', '{\"keep\": \"1s\"}')")
    one(conn, "SELECT tq_signal('wf-sent', '2')")
    add(conn, "wf", "{}", id="wf-s")
    (s_,) = claim(conn, "wf", "wf", 1)
    one(conn, "SELECT tq_settle('wf-s', ?, 'wait', '{\"signal\": \"wf-sent\"}')", s_["attempt"])
    (s_,) = claim(conn, "wf", "wf", 1)
    one(conn, "SELECT tq_settle('wf-s', ?, 'wait', '{\"signal\": \"wf-later\", \"timeout\": \"1s\"}')", s_["attempt"])
    one(conn, "SELECT tq_get('wf-s')")
    one(conn, "SELECT tq_wait('wf', 0)")
    one(conn, "SELECT tq_signal('wf-later', '3')")
    (s_,) = claim(conn, "wf", "wf", 1)
    one(conn, "SELECT tq_settle('wf-s', ?, 'wait', '{\"signal\": \"wf-never\", \"timeout\": \"1s\"}')", s_["attempt"])
    one(conn, "SELECT tq_clock(tq_now() + 2000)")
    one(conn, "SELECT tq_wait('wf', 0)")
    for job in claim(conn, "wf", "wf", 10):
        one(conn, "SELECT tq_settle(?, ?, 'done')", job["id"], job["attempt"])


def from_an_old_store(path):
    """The file starts as a store of the previous schema, with a job and a cancel tombstone,
    written without tinyq: the workload's first write migrates it, through tinyq's own part
    of the upgrade (src/marks.rs)."""
    old = sqlite3.connect(path, isolation_level=None)
    with open(os.path.join(ROOT, "tests", "fixtures", "v5_store.sql")) as f:
        old.executescript(f.read())
    old.execute("INSERT INTO tinyq_meta VALUES ('schema_version', 5)")
    old.execute("INSERT INTO tinyq_jobs (id, queue, status, run_at, payload, created_at, changed_at)"
                " VALUES ('old', 'old', 'queued', 0, '{}', 0, 0)")
    old.execute("INSERT INTO tinyq_tombstones VALUES ('gone', 2, 0)")
    old.close()


def checked(conn):
    """tq_check on the store the workload left, then a recount after a hand edit of each kind
    it repairs (an unreadable version, a setting out of range, set-aside jobs)."""
    try:
        one(conn, "SELECT tq_check()")
    except sqlite3.OperationalError as e:
        if "no such function: tq_check" in str(e):
            return
        raise
    add(conn, "plain", "{}", id="set-aside")
    conn.executescript("""
        UPDATE tinyq_meta SET value = 'x' WHERE key = 'schema_version';
        UPDATE tinyq_queues SET lease = -1 WHERE name = 'plain';
        UPDATE tinyq_jobs SET parked = 1 WHERE id = 'set-aside';
    """)
    one(conn, "SELECT tq_check('{\"recount\": true}')")


def workload(conn, path):
    """Every path of every function, on one connection."""
    from_an_old_store(path)
    on_the_real_clock(conn, path)
    in_transactions(conn)
    pin(conn, T0)
    setq(conn, "q", lease="10s", timeout="1m", attempts=3, backoff="1s", concurrency=5, rate="100/1m",
         group_concurrency=2, group_rate="50/1m", dedupe="1h", keep="1h")
    setq(conn, "plain")
    with_schedules(conn, "make")
    with_workflows(conn)
    # A group at its limit: its next job waits set aside until a place frees.
    for _ in range(3):
        add(conn, "q", "{}", group="full", priority=9)
    one(conn, "SELECT tq_queue('q')")
    ids = [add(conn, "q", json.dumps({"n": i}), group="g%d" % (i % 2), priority=i % 3) for i in range(8)]
    add(conn, "q", "{}", id="later", delay="30s")
    add(conn, "q", "{}", id="at", at=T0 + 5000, attempts=2)
    add(conn, "q", "{}", id="at")  # idempotent: the id exists
    add(conn, "q", "{}", id="at", on_conflict="replace", at=T0 + 5000, attempts=2, priority=1)
    add(conn, "q", "{}", id="bounded", expires="30s")  # past its bound at the claims of T0 + 61 s
    for group in ("g0", "g1"):
        add(conn, "q", "{}", id="deb", on_conflict="debounce", delay="1s", max_wait="1m", group=group)
    add(conn, "plain", "1")
    add(conn, "plain", "2", id="dup")
    add(conn, "plain", "2", id="dup")
    for i in ids[:2]:
        one(conn, "SELECT tq_get(?)", i)
    one(conn, "SELECT tq_get('no-such')")
    # A line of over 1024 jobs is counted in buckets: tq_get reads them.
    one(conn, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1100)"
             " SELECT count(tq_add('long', '{}', json_object('id', 'long-' || i))) FROM c")
    one(conn, "SELECT tq_get('long-600')")
    add(conn, "long", "{}", id="long-600", on_conflict="replace", priority=1)
    one(conn, "SELECT tq_wait('q', 0)")
    one(conn, "SELECT tq_wait('empty', 0)")

    jobs = claim(conn, "q", "w1", 4, {"lease": "5s"})
    jobs += claim(conn, "q", "w2", 4)
    jobs += claim(conn, "plain", "w3", 10)
    assert len(jobs) >= 4, jobs
    j = iter(jobs)
    a = next(j)
    one(conn, "SELECT tq_renew(?, ?)", a["id"], a["attempt"])
    one(conn, "SELECT tq_renew(?, ?, '20s')", a["id"], a["attempt"])
    one(conn, "SELECT tq_step_put(?, ?, 's1', '\"v\"')", a["id"], a["attempt"])
    one(conn, "SELECT tq_step_put(?, ?, 's1', '\"w\"')", a["id"], a["attempt"])
    one(conn, "SELECT tq_step_get(?, 's1')", a["id"])
    one(conn, "SELECT tq_progress(?, ?, '50%')", a["id"], a["attempt"])
    one(conn, "SELECT tq_settle(?, ?, 'done', 'ok')", a["id"], a["attempt"])
    one(conn, "SELECT tq_settle(?, ?, 'done', 'again')", a["id"], a["attempt"])  # already settled
    for outcome, value in [("error", "boom"), ("retry", "2s"), ("snooze", "1s"), ("fail", "bad")]:
        b = next(j, None)
        if b is None:
            break
        one(conn, "SELECT tq_settle(?, ?, ?, ?)", b["id"], b["attempt"], outcome, value)
    one(conn, "SELECT tq_cancel('later')")
    one(conn, "SELECT tq_cancel('no-such')")
    failed = [r[0] for r in conn.execute("SELECT id FROM tq_jobs WHERE state = 'failed'")]
    for f in failed:
        one(conn, "SELECT tq_retry(?)", f)

    # Leases run out, scheduled jobs come due, limits fill up.
    pin(conn, T0 + 61_000)
    with_schedules(conn, "due")
    one(conn, "SELECT tq_wait('q', 0)")
    claim(conn, "q", "w4", 10)
    claim(conn, "q", "w5", 10)
    one(conn, "SELECT tq_wait('q', 0)")
    setq(conn, "q", paused=True)
    claim(conn, "q", "w6", 1)
    setq(conn, "q", paused=False, concurrency=None, rate=None, group_concurrency=None, group_rate=None)
    for job in claim(conn, "q", "w7", 10):
        one(conn, "SELECT tq_settle(?, ?, 'done')", job["id"], job["attempt"])

    # Reads: every filter of the tables.
    conn.execute("SELECT * FROM tq_jobs").fetchall()
    conn.execute("SELECT * FROM tq_jobs WHERE queue = 'q'").fetchall()
    conn.execute("SELECT * FROM tq_jobs WHERE state = 'waiting'").fetchall()
    conn.execute("SELECT * FROM tq_jobs WHERE queue = 'q' AND state = 'done'").fetchall()
    conn.execute("SELECT * FROM tq_watch(0)").fetchall()
    conn.execute("SELECT * FROM tq_watch(3, 'q')").fetchall()
    conn.execute("SELECT * FROM tq_stats").fetchall()
    conn.execute("SELECT * FROM tq_stats('q')").fetchall()
    # The operator's reads: keyset pages, a job's steps and timeline.
    for state in ["waiting", "scheduled", "running", "done", "failed"]:
        page = conn.execute("SELECT id FROM tq_jobs WHERE queue = 'q' AND state = ? LIMIT 2", (state,)).fetchall()
        if page:
            conn.execute("SELECT id FROM tq_jobs WHERE queue = 'q' AND state = ? AND after = ? LIMIT 2",
                         (state, page[-1][0])).fetchall()
    conn.execute("SELECT id FROM tq_jobs WHERE prefix = 'j' LIMIT 2").fetchall()
    conn.execute("SELECT id FROM tq_jobs WHERE after = ? LIMIT 2", (a["id"],)).fetchall()
    conn.execute("SELECT * FROM tq_steps(?)", (a["id"],)).fetchall()
    conn.execute("SELECT * FROM tq_watch(0) WHERE job = ?", (a["id"],)).fetchall()
    conn.execute("SELECT * FROM tq_watch(0) WHERE job = 'gone'").fetchall()  # no job: the log is read
    one(conn, "SELECT tq_debug()")

    # The clock stepped back under a rate window: starts dated in the future are dated now.
    setq(conn, "back", rate="5/1s", group_rate="2/1s")
    add(conn, "back", "{}", group="g")
    claim(conn, "back", "wb", 1)
    pin(conn, T0 + 61_000 - 10_000)
    claim(conn, "back", "wb", 1)
    pin(conn, T0 + 61_000)

    # Past every retention window: the sweeps, by hand and by the claims.
    pin(conn, T0 + 30 * DAY)
    setq(conn, "q", group_concurrency=2)
    add(conn, "q", "{}", group="last")  # a group that empties: its row goes
    for job in claim(conn, "q", "w9", 10):
        one(conn, "SELECT tq_settle(?, ?, 'done')", job["id"], job["attempt"])
    with_schedules(conn, "due")
    with_schedules(conn, "remove")
    for _ in range(4):
        claim(conn, "q", "w8", 1)
    one(conn, "SELECT tq_sweep()")
    one(conn, "SELECT tq_sweep(10)")
    checked(conn)


def statements(conn):
    """The SQL of every statement tq_statements lists (its other columns may change)."""
    return [r[0] for r in conn.execute("SELECT sql FROM tq_statements")]


def flat(sql):
    """A statement on one line, as ALLOWED's fragments are written."""
    return " ".join(sql.split())


def plan(conn, sql):
    """EXPLAIN QUERY PLAN of `sql` (the plan needs no values: NULL for each parameter)."""
    numbered = [int(n) for n in re.findall(r"\?(\d+)", sql)]
    n = max(numbered) if numbered else sql.count("?")
    return conn.execute("EXPLAIN QUERY PLAN " + sql, [None] * n).fetchall()


def bad_steps(conn, sql):
    """The plan steps of `sql` that scan a table or build a temporary b-tree."""
    return [row[3] for row in plan(conn, sql) if BAD.match(row[3])]


def gone(conn, sql):
    """Does `sql` read a table that is gone? Only a migration's own statements do (the
    tables it reads, then drops): they run once per store, never on a claim."""
    try:
        plan(conn, sql)
        return False
    except sqlite3.OperationalError as e:
        return str(e).startswith("no such table: tinyq_")


def allowed(sql, step):
    return any(frag in flat(sql) and step_frag in step for frag, step_frag, _ in ALLOWED)


def source_statements():
    """The SQL literals tinyq's Rust code prepares: the workload must reach each."""
    found = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        for name in files:
            if name.endswith(".rs"):
                text = open(os.path.join(dirpath, name)).read()
                for m in re.finditer(r'\.(?:exec|query|one|one_int|prepare)\(\s*"((?:[^"\\]|\\.)*)"', text):
                    found.add(m.group(1))
    return found


def test_workload_reaches_every_statement_in_the_source(tmp_path):
    path = str(tmp_path / "q.db")
    conn = connect(path)
    workload(conn, path)
    prepared = {flat(s) for s in statements(conn)}
    missing = sorted(s for s in source_statements() if flat(s) not in prepared)
    assert not missing, "statements the workload never ran (extend workload()):\n\n" + "\n\n".join(missing)


def test_no_statement_scans_or_sorts_unless_allowed(tmp_path):
    path = str(tmp_path / "q.db")
    conn = connect(path)
    workload(conn, path)
    sqls = statements(conn)
    assert len(sqls) > 30, sqls
    viewer = connect(path)
    found = []
    for sql in sqls:
        if gone(viewer, sql):
            continue
        for step in bad_steps(viewer, sql):
            if not allowed(sql, step):
                found.append(f"{step}\n    in: {flat(sql)}")
    assert not found, "plan steps that grow with the store (fix, or add to ALLOWED with a reason):\n" + "\n".join(found)


def test_every_allowlist_entry_is_still_used(tmp_path):
    """An entry whose statement is gone or no longer scans is removed, not kept "just in case"."""
    path = str(tmp_path / "q.db")
    conn = connect(path)
    workload(conn, path)
    sqls = statements(conn)
    viewer = connect(path)
    used = set()
    for sql in sqls:
        if gone(viewer, sql):
            continue
        for step in bad_steps(viewer, sql):
            for i, (frag, step_frag, _) in enumerate(ALLOWED):
                if frag in flat(sql) and step_frag in step:
                    used.add(i)
    stale = [ALLOWED[i] for i in range(len(ALLOWED)) if i not in used]
    assert not stale, f"allowlist entries that match no scan any more: {stale}"


def test_the_bucket_split_merges_the_claim_index_in_order(tmp_path):
    """Statements in triggers are not prepared on their own (tq_statements does not list
    them): the one that walks jobs, the cut of a bucket (sql/store.sql, tinyq_buckets_split),
    must merge the index ranges of the claim index in claim order, with no sort."""
    with open(os.path.join(ROOT, "sql", "store.sql")) as f:
        store = f.read()
    body = store[store.index("CREATE TRIGGER tinyq_buckets_split"):]
    walk = body[body.index("FROM (SELECT") + len("FROM ("):body.index("OFFSET 512)") + len("OFFSET 512")]
    sql = re.sub(r"NEW\.\w+", "?", walk)
    conn = connect(str(tmp_path / "q.db"))
    one(conn, "SELECT tq_add('q', '{}')")
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, [None] * sql.count("?")).fetchall()]
    assert "MERGE (UNION ALL)" in plan, plan
    assert not [step for step in plan if BAD.match(step)], plan
    # (newer SQLite says "USING COVERING INDEX" here)
    assert sum(re.search(r"USING (COVERING )?INDEX tinyq_jobs_queued", step) is not None for step in plan) == 6, plan
