"""What the operator's view reads from tinyq (issue 15): keyset pages of tq_jobs (queue,
state, group, id prefix, `after`), one job's timeline (tq_watch WHERE job = ?), its steps
(tq_steps), and that a page deep in a list of a million jobs does bounded work: its query
walks an index (EXPLAIN QUERY PLAN) and its SQLite VM steps do not grow with the list."""
import json
import re
import sqlite3

import pytest

import helpers
import stores
from helpers import MILLION, add, claim, get, one, pin, settle, snapshot

T0 = 1_800_000_000_000
STATES = ["waiting", "scheduled", "running", "done", "failed"]


def page(conn, queue, state, after=None, limit=3, **where):
    sql = "SELECT id FROM tq_jobs WHERE queue = ? AND state = ?"
    args = [queue, state]
    for col, value in dict(where, after=after).items():
        if value is not None:
            sql += " AND %s = ?" % col
            args.append(value)
    return [r[0] for r in conn.execute(sql + " LIMIT ?", args + [limit])]


def every_page(conn, queue, state, limit=3, **where):
    out, after = [], None
    while True:
        ids = page(conn, queue, state, after, limit, **where)
        if not ids:
            return out
        assert len(set(ids) & set(out)) == 0, "a page repeats a job"
        out += ids
        after = ids[-1]


@pytest.fixture
def mixed(db):
    """Queue q: jobs in every state, with ties (the clock is pinned), groups and priorities."""
    pin(db, T0)
    for n in range(40):
        add(db, "q", id="j%02d" % n, priority=n % 3, group="g%d" % (n % 2) if n % 5 else None)
    for n in range(6):
        add(db, "q", id="later%d" % n, delay="%dm" % (n % 2 + 1))
    add(db, "other", id="j99")
    jobs = claim(db, "q", "w1", 14)
    for n, job in enumerate(jobs[:8]):
        settle(db, job["id"], job["attempt"], "done" if n % 2 else "fail", "boom %d" % n)
    pin(db, T0 + 1000)
    # Two scheduled jobs come due: they are waiting before being moved into line.
    add(db, "q", id="due1", delay="500ms")
    add(db, "q", id="due2", delay="500ms")
    pin(db, T0 + 2000)
    return db


def test_pages_list_each_state_once_in_the_order_of_the_whole_list(mixed):
    for state in STATES:
        whole = [r[0] for r in mixed.execute(
            "SELECT id FROM tq_jobs WHERE queue = 'q' AND state = ?", (state,))]
        assert whole, state
        assert set(whole) == {r[0] for r in mixed.execute(
            "SELECT id FROM tq_jobs WHERE state = ?", (state,))} - {"j99"}
        for size in (1, 3, 7):
            assert every_page(mixed, "q", state, size) == whole, (state, size)
    waiting = every_page(mixed, "q", "waiting")
    assert waiting[:2] == ["due1", "due2"]            # due, not yet in line: by time first
    line = [get(mixed, i) for i in waiting[2:]]
    assert [j["priority"] for j in line] == sorted((j["priority"] for j in line), reverse=True)
    done = [get(mixed, i)["settled_at"] for i in every_page(mixed, "q", "done")]
    assert done == sorted(done, reverse=True)          # newest first


def test_pages_by_group_and_by_prefix(mixed):
    g1 = every_page(mixed, "q", "waiting", group_key="g1")
    assert g1 and all(get(mixed, i)["group"] == "g1" for i in g1)
    assert set(g1) == {r[0] for r in mixed.execute(
        "SELECT id FROM tq_jobs WHERE state = 'waiting' AND group_key = 'g1'")}
    assert [r[0] for r in mixed.execute("SELECT id FROM tq_jobs WHERE prefix = 'later'")] == \
        ["later%d" % n for n in range(6)]
    assert [r[0] for r in mixed.execute(
        "SELECT id FROM tq_jobs WHERE prefix = 'j' AND after = 'j3' AND state = 'waiting'")] == \
        [i for i in sorted(every_page(mixed, "q", "waiting")) if i.startswith("j") and i > "j3"] + ["j99"]


def test_a_page_continues_after_a_job_that_changed_state(mixed):
    first = page(mixed, "q", "waiting", limit=5)
    [job] = [j for j in claim(mixed, "q", "w2", 1)]     # the head of the line is claimed
    assert job["id"] == first[2]
    assert page(mixed, "q", "waiting", after=first[4], limit=2) == \
        [i for i in every_page(mixed, "q", "waiting") if i not in first][:2]
    assert page(mixed, "q", "running", after=job["id"], limit=100) == \
        every_page(mixed, "q", "running")[every_page(mixed, "q", "running").index(job["id"]) + 1:]


def test_timeline_of_one_job_and_its_steps(db):
    pin(db, T0)
    add(db, "q", id="a", attempts=3)
    add(db, "q", id="b")
    [job] = claim(db, "q", "worker-7")
    assert one(db, "SELECT tq_step_put('a', 1, 'draft', 'v1')") == "v1"
    assert one(db, "SELECT tq_progress('a', 1, '{\"page\": 2}')") == 1
    settle(db, "a", 1, "error", "timeout")
    pin(db, T0 + 5000)
    claim(db, "q", "worker-8", 2)
    assert one(db, "SELECT tq_step_put('a', 2, 'sent', '7')") == "7"
    assert one(db, "SELECT tq_cancel('a')") == 1
    timeline = db.execute("SELECT state, attempt, detail FROM tq_watch WHERE job = 'a'").fetchall()
    assert timeline == [("waiting", 0, None), ("running", 1, "worker-7"), ("progress", 1, '{"page": 2}'),
                        ("scheduled", 1, "timeout"), ("waiting", 1, None), ("running", 2, "worker-8"),
                        ("cancelled", 2, None)]
    assert db.execute("SELECT count(*) FROM tq_watch WHERE job = 'b'").fetchone()[0] == 2
    since = db.execute("SELECT seq FROM tq_watch WHERE job = 'a' AND state = 'progress'").fetchone()[0]
    assert [r[0] for r in db.execute("SELECT state FROM tq_watch WHERE job = 'a' AND since = ?", (since,))] == \
        ["scheduled", "waiting", "running", "cancelled"]
    assert db.execute("SELECT count(*) FROM tq_steps('a')").fetchone()[0] == 0   # cancelled: gone
    add(db, "q", id="c")
    [job] = [j for j in claim(db, "q", "w", 5) if j["id"] == "c"]
    one(db, "SELECT tq_step_put('c', ?, 'first', 'x')", job["attempt"])
    pin(db, T0 + 6000)
    one(db, "SELECT tq_step_put('c', ?, 'second', '{\"n\": 2}')", job["attempt"])
    assert db.execute("SELECT * FROM tq_steps('c')").fetchall() == \
        [("first", job["attempt"], "x", T0 + 5000), ("second", job["attempt"], '{"n": 2}', T0 + 6000)]


@pytest.mark.parametrize("sql,args,words", [
    ("SELECT * FROM tq_steps", (), ["tq_steps", "expects (id)"]),
    ("SELECT * FROM tq_steps(?)", (None,), ["tq_steps", "id"]),
    ("SELECT * FROM tq_steps(?)", (7,), ["tq_steps", "id must be text"]),
    ("SELECT * FROM tq_steps(?)", ("",), ["tq_steps", "id must not be empty"]),
    ("SELECT * FROM tq_watch WHERE job = ?", (3,), ["tq_watch", "job must be text"]),
    ("SELECT * FROM tq_watch WHERE job = ?", ("x" * 1001,), ["tq_watch", "job is longer"]),
    ("SELECT * FROM tq_jobs WHERE queue = 'q' AND state = 'waiting' AND after = ?", ("nope",),
     ["tq_jobs", "after", "no job 'nope'"]),
    ("SELECT * FROM tq_jobs WHERE after = ?", ("nope",), ["tq_jobs", "after", "no job 'nope'"]),
    ("SELECT * FROM tq_jobs WHERE queue = 'q' AND state = 'failed' AND after = ?", (5,),
     ["tq_jobs", "after must be text"]),
    ("SELECT * FROM tq_jobs WHERE prefix = ?", ("",), ["tq_jobs", "prefix must not be empty"]),
    ("SELECT * FROM tq_jobs WHERE prefix = ?", (b"\x00",), ["tq_jobs", "prefix must be valid UTF-8"]),
])
def test_ERR_01_operator_reads_name_the_bad_value(mixed, sql, args, words):
    before = snapshot(mixed)
    with pytest.raises(sqlite3.Error) as err:
        mixed.execute(sql, args).fetchall()
    assert str(err.value).startswith(words[0] + ":")
    for word in words[1:]:
        assert word in str(err.value)
    assert snapshot(mixed) == before


# -- bounded work at scale -------------------------------------------------------------------

def inner_statements(conn):
    """The SQL tinyq prepared for tq_jobs pages (from tq_statements)."""
    return [s for (s,) in conn.execute("SELECT sql FROM tq_statements") if "LIMIT 1000000000" in s]


def plan(conn, sql):
    n = max([int(k) for k in re.findall(r"\?(\d+)", sql)] or [0])
    return [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, [None] * n)]


def vm_steps(conn, sql, *args, every=1):
    """SQLite VM instructions run by a query (to `every`), its statements inside tinyq
    included (the progress handler is the connection's, so it counts nested statements too)."""
    count = [0]

    def tick():
        count[0] += every
    conn.set_progress_handler(tick, every)
    try:
        rows = conn.execute(sql, args).fetchall()
    finally:
        conn.set_progress_handler(None, 1)
    return count[0], rows


def build(conn, waiting, held):
    """`waiting` jobs in line (3 priorities, 2 groups), as many scheduled / 10, and `held`
    running, done and failed jobs each, all in queue q."""
    pin(conn, T0)
    conn.execute("BEGIN")
    counter = ("(WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < ?) "
               "SELECT v FROM n)")
    conn.execute("SELECT count(tq_add('q', '{}', json_object('priority', v % 3, 'group', 'g' || (v % 2), "
                 "'id', 'held' || v))) FROM " + counter, (3 * held,)).fetchall()
    conn.execute("COMMIT")
    jobs = []
    for _ in range(0, 3 * held, 1000):
        jobs += claim(conn, "q", "w", 1000)
    conn.execute("BEGIN")
    for n, job in enumerate(jobs[held:]):
        settle(conn, job["id"], job["attempt"], "done" if n % 2 else "fail", "boom")
    conn.execute("SELECT count(tq_add('q', '{}', json_object('priority', v % 3, 'group', 'g' || (v % 2), "
                 "'id', 'w' || v))) FROM " + counter, (waiting,)).fetchall()
    conn.execute("SELECT count(tq_add('q', '{}', json_object('delay', v * 1000))) FROM " + counter,
                 (waiting // 10,)).fetchall()
    conn.execute("COMMIT")


def deep_page_costs(conn):
    """{state: VM steps of a page of 50 that continues after a job near the end of the list}."""
    costs = {}
    waiting = one(conn, "SELECT waiting FROM tq_stats('q')")
    for state in STATES:
        if state == "waiting":      # claim order: priority 2, 1, 0, each in add order
            ids = ["w%d" % v for p in (2, 1, 0) for v in range(1, waiting + 1) if v % 3 == p]
            assert [r[0] for r in conn.execute(
                "SELECT id FROM tq_jobs WHERE queue = 'q' AND state = 'waiting' LIMIT 3")] == ids[:3]
        else:
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM tq_jobs WHERE queue = 'q' AND state = ?", (state,))]
        after = ids[-60]
        steps, rows = vm_steps(conn, "SELECT * FROM tq_jobs WHERE queue = 'q' AND state = ? AND after = ? "
                                     "LIMIT 50", state, after)
        assert [r[0] for r in rows] == ids[-59:-9], state
        costs[state] = steps
    steps, rows = vm_steps(conn, "SELECT * FROM tq_jobs WHERE queue = 'q' AND state = 'waiting' "
                                 "AND group_key = 'g1' LIMIT 50")
    assert len(rows) == 50
    costs["group"] = steps
    return costs


def opened(path):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.enable_load_extension(True)
    conn.load_extension(helpers.EXT)
    return conn


def built(tmp_path, waiting, held):
    """A connection to this test's own copy of the store build() makes (built once, then
    copied: tests/stores.py), its clock pinned where build() pinned it."""
    def make(path):
        conn = opened(path)
        build(conn, waiting, held)
        conn.close()
    key = "pages build %d %d" % (waiting, held)
    conn = opened(stores.store(str(tmp_path / (stores.slug(key) + ".db")), key, make, [__file__, helpers.__file__]))
    pin(conn, T0)
    return conn


def test_pages_do_bounded_work_at_a_million_jobs(tmp_path):
    """(100,000 jobs in make test's quick form; a million in make test-all: helpers.MILLION.)"""
    small, big = built(tmp_path, 1000, 200), built(tmp_path, MILLION, 5000)
    assert one(big, "SELECT waiting FROM tq_stats('q')") == MILLION
    cheap, deep = deep_page_costs(small), deep_page_costs(big)
    print("\nVM steps of a page of 50, 1000 vs %d waiting:" % MILLION, cheap, deep)
    for state, steps in deep.items():
        # The same work, up to the depth of a b-tree: no part of the list is read twice.
        assert steps < 1.5 * cheap[state] + 500, (state, cheap[state], steps)
    # The measure can tell: OFFSET reads every row it skips.
    offset, _ = vm_steps(big, "SELECT * FROM tq_jobs WHERE queue = 'q' AND state = 'waiting' "
                              "LIMIT 50 OFFSET %d" % (MILLION * 9 // 10), every=1000)
    print("VM steps of the same page by OFFSET %d:" % (MILLION * 9 // 10), offset)
    assert offset > 100 * deep["waiting"]
    # Each page statement tinyq ran walks an index: no scan of the jobs, no sort.
    statements = inner_statements(big)
    assert len(statements) >= 5
    for sql in statements:
        steps = plan(big, sql)
        assert all(s.startswith(("SEARCH tinyq_jobs USING INDEX", "COMPOUND", "LEFT-MOST", "CO-ROUTINE",
                                 "SCAN (subquery", "UNION ALL")) for s in steps), (sql, steps)
    for conn in (small, big):
        conn.close()
