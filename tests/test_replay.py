"""Replayable (REP-01): with a pinned clock, the same statements leave identical stores, on
fresh stores, on copies of one, and from two processes.
"""
import json
import shutil

from helpers import DAY, T0, add, claim, connect, pin, run_python, settle, snapshot


# ---------------------------------------------------------------- REP-01

SCENARIO = r'''
import json, sqlite3

def scenario(conn, t0):
    """A fixed statement sequence; every result (or error text) is returned."""
    out = []
    def run(sql, *args):
        try:
            rows = conn.execute(sql, args).fetchall()
            out.append(("ok", sql, rows))
            return rows
        except sqlite3.Error as e:
            out.append(("error", sql, str(e)))
            return None
    def val(sql, *args):
        rows = run(sql, *args)
        return rows[0][0] if rows else None

    run("SELECT tq_clock(?)", t0)
    run("SELECT tq_queue('r', ?)", json.dumps({"lease": "10s", "attempts": 3, "timeout": "1m"}))
    gen = [val("SELECT tq_add('r', ?)", json.dumps({"n": k})) for k in range(12)]
    val("SELECT tq_add('r', '{}', ?)", json.dumps({"id": "chosen", "priority": 5}))
    val("SELECT tq_add('r', '{}', ?)", json.dumps({"delay": "3s", "group": "g1"}))
    val("SELECT tq_add('r', NULL)")                           # an error, on both
    val("SELECT tq_add('other', 'x', ?)", json.dumps({"delay": "5s"}))
    rows = run("SELECT * FROM tq_claim('r', 'w1', 8)") or []
    for i, r in enumerate(rows):
        if i % 4 == 0:
            val("SELECT tq_settle(?, ?, 'error', 'boom')", r[0], r[1])
        elif i % 4 == 1:
            val("SELECT tq_settle(?, ?, 'retry')", r[0], r[1])
        elif i % 4 == 2:
            val("SELECT tq_settle(?, ?, 'snooze', '2s')", r[0], r[1])
        # i % 4 == 3: left to run out
    run("SELECT tq_clock(?)", t0 + 1500)
    if len(rows) > 3:
        val("SELECT tq_renew(?, ?)", rows[3][0], rows[3][1])
    run("SELECT tq_clock(?)", t0 + 30000)
    more = run("SELECT * FROM tq_claim('r', 'w2', 20)") or []
    for i, r in enumerate(more):
        if i % 3 == 0:
            val("SELECT tq_settle(?, ?, 'done', ?)", r[0], r[1], json.dumps({"i": i}))
        elif i % 3 == 1:
            val("SELECT tq_settle(?, ?, 'error', 'again')", r[0], r[1])
        else:
            val("SELECT tq_settle(?, ?, 'fail', 'give up')", r[0], r[1])
    gen += [val("SELECT tq_add('r', ?)", json.dumps({"late": k})) for k in range(3)]
    run("SELECT tq_clock(?)", t0 + 3600000)
    run("SELECT * FROM tq_claim('r', 'w3', 50)")
    for i in gen:
        run("SELECT tq_get(?)", i)
    return out
'''

SCENARIO_IN_PROCESS = r'''
import json, sys
from helpers import connect, snapshot
exec(sys.argv[3])
conn = connect(sys.argv[1])
out = scenario(conn, int(sys.argv[2]))
print(json.dumps({"out": out, "tables": snapshot(conn)}, default=repr))
'''

_scenario_ns = {}
exec(SCENARIO, _scenario_ns)
scenario = _scenario_ns["scenario"]


def _normalize(snap):
    return json.loads(json.dumps(snap, default=repr))


def _assert_same_tables(a, b):
    assert set(a) == set(b)
    for table in a:
        assert a[table] == b[table], f"{table} differs between the two stores"


def test_REP_01_same_statements_on_two_fresh_stores_leave_identical_tables(tmp_path):
    a = connect(str(tmp_path / "a.db"))
    b = connect(str(tmp_path / "b.db"))
    try:
        out_a = scenario(a, T0)
        out_b = scenario(b, T0)
        assert [o for o in out_a if o[0] == "error"], "the scenario includes an error"
        assert out_a == out_b
        snap_a, snap_b = snapshot(a), snapshot(b)
        assert snap_a["tinyq_jobs"], "the scenario left jobs"
        _assert_same_tables(snap_a, snap_b)
    finally:
        a.close()
        b.close()


def test_REP_01_same_statements_on_two_copies_of_a_store_leave_identical_tables(tmp_path):
    origin = str(tmp_path / "origin.db")
    conn = connect(origin)
    pin(conn, T0 - DAY)
    for k in range(5):
        add(conn, "r", f'{{"old": {k}}}')
    for r in claim(conn, "r", "w0", 2):
        settle(conn, r["id"], r["attempt"], "error", "old boom")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    shutil.copy(origin, tmp_path / "c1.db")
    shutil.copy(origin, tmp_path / "c2.db")
    c1, c2 = connect(str(tmp_path / "c1.db")), connect(str(tmp_path / "c2.db"))
    try:
        assert scenario(c1, T0) == scenario(c2, T0)
        _assert_same_tables(snapshot(c1), snapshot(c2))
    finally:
        c1.close()
        c2.close()


def test_REP_01_two_processes_replaying_the_same_statements_end_identical(tmp_path):
    """As on a statement-replicated engine: each node runs the statements in its own process."""
    results = []
    for name in ("node1.db", "node2.db"):
        proc = run_python(SCENARIO_IN_PROCESS, str(tmp_path / name), str(T0), SCENARIO)
        assert proc.returncode == 0, proc.stderr
        results.append(json.loads(proc.stdout))
    assert results[0]["out"] == results[1]["out"]
    _assert_same_tables(results[0]["tables"], results[1]["tables"])
