"""DEP-01: a job with `after` waits for the jobs it names, becomes due in the transaction
that finishes the last of them, exactly once, and follows `after_failed` when one fails."""
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from helpers import (ROOT, SO, add, cancel, claim, connect, get, one, pin, rows, settle, setq, snapshot,
                     sweep, watch)

NOW = 1_900_000_000_000


def run(db, queue, job_id, outcome="done", value=None):
    """Claims the next job of `queue`, which must be `job_id`, and settles it."""
    (row,) = claim(db, queue, "w", 1)
    assert row["id"] == job_id
    assert settle(db, job_id, row["attempt"], outcome, value) == 1
    return row


def deps(db, job_id):
    return [tuple(r) for r in db.execute("SELECT id, state, result, error FROM tq_deps(?)", (job_id,))]


def test_DEP_01_fan_in_waits_for_every_child_and_reads_their_results(db):
    for i in range(3):
        add(db, "pages", json.dumps({"page": i}), id=f"page-{i}")
    add(db, "collect", "{}", id="collect", after=["page-0", "page-1", "page-2"])
    assert get(db, "collect")["state"] == "blocked"
    assert get(db, "collect")["blocked_on"] == {"after": ["page-0", "page-1", "page-2"]}
    assert claim(db, "collect", "w", 5) == []
    for i in range(3):
        run(db, "pages", f"page-{i}", "done", json.dumps({"summary": i}))
        state = get(db, "collect")["state"]
        assert state == ("waiting" if i == 2 else "blocked")
    assert "blocked_on" not in get(db, "collect")
    assert deps(db, "collect") == [("page-0", "done", '{"summary": 0}', None),
                                   ("page-1", "done", '{"summary": 1}', None),
                                   ("page-2", "done", '{"summary": 2}', None)]
    run(db, "collect", "collect")
    states = [(e["id"], e["state"]) for e in watch(db) if e["id"] == "collect"]
    assert states == [("collect", "blocked"), ("collect", "waiting"), ("collect", "running"), ("collect", "done")]


def test_DEP_01_chain_runs_in_order(db):
    add(db, "q", "{}", id="a")
    add(db, "q", "{}", id="b", after=["a"])
    add(db, "q", "{}", id="c", after=["b"])
    for job_id in ("a", "b", "c"):
        assert [r["id"] for r in claim(db, "q", "w", 10)] == [job_id]
        one(db, "SELECT tq_settle(?, 1, 'done')", job_id)
    assert [get(db, i)["state"] for i in "abc"] == ["done"] * 3


def test_DEP_01_after_done_dependency_runs_at_once_and_at_applies(db):
    pin(db, NOW)
    add(db, "q", "{}", id="a")
    run(db, "q", "a")
    add(db, "q", "{}", id="b", after=["a"])
    assert get(db, "b")["state"] == "waiting"  # nothing left to wait for
    add(db, "q", "{}", id="x")
    add(db, "q", "{}", id="later", after=["x"], delay="1h")
    run(db, "q", "b")
    run(db, "q", "x")
    assert get(db, "later")["state"] == "scheduled"  # unblocked, but its time is later
    assert get(db, "later")["run_at"] == NOW + 3_600_000
    pin(db, NOW + 3_600_000)
    run(db, "q", "later")


@pytest.mark.parametrize("how", ["fail", "expire", "cancel"])
def test_DEP_01_failed_dependency_fails_dependents_and_theirs_by_default(db, how):
    pin(db, NOW)
    add(db, "q", "{}", id="a", expires="1m")
    add(db, "w", "{}", id="b", after=["a"])
    add(db, "w", "{}", id="c", after=["b"])
    if how == "fail":
        run(db, "q", "a", "fail", "broken")
        why = "dependency 'a' failed: broken"
    elif how == "expire":
        pin(db, NOW + 60_000)
        assert claim(db, "q", "w", 1) == []  # the claim ends it as expired
        why = "dependency 'a' failed: expired"
    else:
        assert cancel(db, "a") == 1
        why = "dependency 'a' was cancelled"
    assert (get(db, "b")["state"], get(db, "b")["error"]) == ("failed", why)
    assert (get(db, "c")["state"], get(db, "c")["error"]) == ("failed", "dependency 'b' failed: " + why)
    assert claim(db, "w", "w", 10) == []
    stats = db.execute("SELECT blocked, failed FROM tq_stats('w')").fetchone()
    assert stats == (0, 2)


def test_DEP_01_after_failed_run_runs_anyway(db):
    add(db, "q", "{}", id="a")
    add(db, "q", "{}", id="ok")
    add(db, "w", "{}", id="b", after=["a", "ok"], after_failed="run")
    run(db, "q", "a", "fail", "broken")
    assert get(db, "b")["state"] == "blocked"
    run(db, "q", "ok")
    assert get(db, "b")["state"] == "waiting"
    assert deps(db, "b") == [("a", "failed", None, "broken"), ("ok", "done", None, None)]


def test_DEP_01_after_failed_cancel_cancels_dependents_and_theirs(db):
    add(db, "q", "{}", id="a")
    add(db, "w", "{}", id="b", after=["a"], after_failed="cancel")
    add(db, "w", "{}", id="c", after=["b"], after_failed="run")
    run(db, "q", "a", "fail", "broken")
    assert get(db, "b") is None  # cancelled: gone
    assert get(db, "c")["state"] == "waiting"  # its dependency was cancelled: 'run' runs it
    assert [e["state"] for e in watch(db) if e["id"] == "b"] == ["blocked", "cancelled"]


def test_DEP_01_dependency_already_failed_applies_policy_at_add(db):
    add(db, "q", "{}", id="a")
    run(db, "q", "a", "fail", "broken")
    add(db, "w", "{}", id="b", after=["a"])
    assert (get(db, "b")["state"], get(db, "b")["error"]) == ("failed", "dependency 'a' failed: broken")
    add(db, "w", "{}", id="c", after=["a"], after_failed="run")
    assert get(db, "c")["state"] == "waiting"


def test_DEP_01_cancelled_blocked_job_releases_its_dependencies(db):
    setq(db, "q", dedupe="1s")
    pin(db, NOW)
    add(db, "q", "{}", id="a")
    add(db, "w", "{}", id="b", after=["a"])
    add(db, "w", "{}", id="c", after=["a"])
    assert cancel(db, "b") == 1  # blocked jobs can be cancelled
    assert [e["state"] for e in watch(db) if e["id"] == "b"] == ["blocked", "cancelled"]
    run(db, "q", "a")
    pin(db, NOW + 10_000)
    sweep(db)
    assert get(db, "a")["state"] == "done"  # kept: c has not finished
    run(db, "w", "c")
    pin(db, NOW + 20_000)
    sweep(db)
    assert get(db, "a") is None  # b and c finished (b cancelled): a's window applies again


def test_DEP_01_done_dependency_is_kept_until_dependents_finish(db):
    setq(db, "q", dedupe="1s")
    pin(db, NOW)
    add(db, "q", "{}", id="a")
    add(db, "q", "{}", id="other")
    add(db, "w", "{}", id="b", after=["a", "other"])
    run(db, "q", "a", "done", '"A"')
    pin(db, NOW + 86_400_000)
    sweep(db)
    assert get(db, "a")["result"] == "A"
    assert deps(db, "b")[0] == ("a", "done", '"A"', None)
    run(db, "q", "other")
    run(db, "w", "b")
    pin(db, NOW + 2 * 86_400_000)
    sweep(db)
    assert get(db, "a") is None


def test_DEP_01_unknown_or_bad_ids_are_refused_and_change_nothing(db):
    add(db, "q", "{}", id="a")
    before = snapshot(db)
    for options, message in [
        ({"after": ["a", "nope"]}, "tq_add: option \"after\": no job 'nope'"),
        ({"after": []}, "tq_add: option \"after\" must name at least one job id"),
        ({"after": "a"}, "tq_add: option \"after\" must be an array"),
        ({"after": [1]}, "tq_add: option \"after\" must hold ids as text, not a number"),
        ({"after": [""]}, "tq_add: option \"after\": an id must not be empty"),
        ({"after": ["a"], "after_failed": "explode"}, "tq_add: option \"after_failed\" must be 'fail', 'run' or 'cancel'"),
        ({"after_failed": "run"}, "tq_add: option \"after_failed\" goes with \"after\""),
        ({"after": ["me"], "id": "me"}, "tq_add: option \"after\": a job cannot wait for itself ('me')"),
    ]:
        with pytest.raises(sqlite3.Error) as e:
            one(db, "SELECT tq_add('w', '{}', ?)", json.dumps(options))
        assert str(e.value).startswith(message), (options, str(e.value))
    assert snapshot(db) == before


def test_DEP_01_ten_thousand_dependencies(db):
    db.execute("BEGIN")
    ids = [add(db, "kids", "{}") for _ in range(10_000)]
    db.execute("COMMIT")
    add(db, "parent", "{}", id="parent", after=ids)
    assert len(get(db, "parent")["blocked_on"]["after"]) == 10_000
    while True:
        got = claim(db, "kids", "w", 1000)
        if not got:
            break
        db.execute("BEGIN")
        for r in got:
            settle(db, r["id"], r["attempt"])
        db.execute("COMMIT")
    assert get(db, "parent")["state"] == "waiting"
    assert len(deps(db, "parent")) == 10_000


def test_DEP_01_blocked_job_holds_no_place_in_any_limit(db):
    setq(db, "q", concurrency=1, group_concurrency=1, rate="1/1h")
    add(db, "deps", "{}", id="dep")
    add(db, "q", "{}", id="blocked", group="g", after=["dep"])
    add(db, "q", "{}", id="free", group="g")
    (row,) = claim(db, "q", "w", 5)
    assert row["id"] == "free"  # the blocked job is not in line, its group has room
    s = db.execute("SELECT waiting, running, blocked FROM tq_stats('q')").fetchone()
    assert s == (0, 1, 1)


def test_DEP_01_replace_keeps_a_blocked_job_blocked_on_its_own_dependencies(db):
    add(db, "q", "{}", id="a")
    add(db, "q", "{}", id="z")
    add(db, "w", '{"v": 1}', id="b", after=["a"])
    add(db, "w", '{"v": 2}', id="b", after=["z"], on_conflict="replace")
    job = get(db, "b")
    assert (job["state"], job["payload"], job["blocked_on"]) == ("blocked", {"v": 2}, {"after": ["a"]})
    run(db, "q", "a")
    assert get(db, "b")["state"] == "waiting"


def test_DEP_01_wait_for_children_added_by_the_running_job(db):
    add(db, "parent", "{}", id="p")
    (row,) = claim(db, "parent", "w", 1)
    kids = [add(db, "kids", "{}", id=f"k{i}") for i in range(3)]
    assert one(db, "SELECT tq_settle('p', ?, 'wait', ?)", row["attempt"], json.dumps({"after": kids})) == 1
    job = get(db, "p")
    assert (job["state"], job["tries"], job["lease_until"]) == ("blocked", 0, None)
    # stale: a wait by an attempt that lost the job changes nothing
    assert one(db, "SELECT tq_settle('p', ?, 'wait', ?)", row["attempt"], json.dumps({"after": kids})) == 0
    for k in kids:
        run(db, "kids", k)
    (again,) = claim(db, "parent", "w", 1)
    assert (again["id"], again["attempt"]) == ("p", 2)
    assert get(db, "p")["tries"] == 1  # the waiting attempt did not count


def test_DEP_01_wait_refuses_unknown_ids_and_cycles(db):
    add(db, "q", "{}", id="p")
    (row,) = claim(db, "q", "w", 1)
    add(db, "w", "{}", id="child", after=["p"])
    before = snapshot(db)
    for value, message in [
        ({"after": ["nope"]}, "tq_settle: outcome 'wait': \"after\": no job 'nope'"),
        ({"after": ["child"]}, "tq_settle: outcome 'wait': \"after\" names 'child', which waits for this job (child -> p)"),
        ({"after": ["p"]}, "tq_settle: outcome 'wait': \"after\" names 'p', which is this job: it would never run"),
        ({"after": ["child"], "timeout": "1m"}, "tq_settle: outcome 'wait': \"timeout\" goes with \"signal\""),
        ({}, "tq_settle: outcome 'wait' needs {\"after\": [ids]}"),
        ({"after": ["child"], "signal": "s"}, "tq_settle: outcome 'wait' needs"),
        ({"colour": 1}, "tq_settle: outcome 'wait': unknown option \"colour\""),
    ]:
        with pytest.raises(sqlite3.Error) as e:
            one(db, "SELECT tq_settle('p', ?, 'wait', ?)", row["attempt"], json.dumps(value))
        assert str(e.value).startswith(message), (value, str(e.value))
    with pytest.raises(sqlite3.Error, match=r"^tq_settle: outcome 'wait' needs"):
        one(db, "SELECT tq_settle('p', ?, 'wait')", row["attempt"])
    with pytest.raises(sqlite3.Error, match=r"^tq_settle: outcome 'wait': options must be a JSON object"):
        one(db, "SELECT tq_settle('p', ?, 'wait', '[1]')", row["attempt"])
    assert snapshot(db) == before


def wait_steps(db, job_id, attempt, after):
    """tq_settle(job_id, attempt, 'wait', {"after": after}): its answer or error, and the VM
    steps tinyq's statements took for it (tq_statements)."""
    before = one(db, "SELECT total(vm_steps) FROM tq_statements")
    try:
        got = one(db, "SELECT tq_settle(?, ?, 'wait', ?)", job_id, attempt, json.dumps({"after": after}))
    except sqlite3.Error as e:
        got = str(e)
    return got, int(one(db, "SELECT total(vm_steps) FROM tq_statements") - before)


def test_DEP_01_a_wait_cannot_close_a_cycle_of_any_length(db):
    add(db, "q", "{}", id="A")
    (row,) = claim(db, "q", "w", 1)
    add(db, "w", "{}", id="C", after=["A"])
    add(db, "w", "{}", id="B", after=["C"])
    before = snapshot(db)
    with pytest.raises(sqlite3.Error) as e:
        settle(db, "A", row["attempt"], "wait", json.dumps({"after": ["B"]}))
    assert str(e.value) == ("tq_settle: outcome 'wait': \"after\" names 'B', which waits for this job "
                            "(B -> C -> A): it would never run")
    assert snapshot(db) == before
    # among other jobs, and for a job named twice
    add(db, "q", "{}", id="other")
    with pytest.raises(sqlite3.Error, match=r"names 'B', which waits for this job \(B -> C -> A\)"):
        settle(db, "A", row["attempt"], "wait", json.dumps({"after": ["other", "B", "B"]}))
    assert get(db, "A")["state"] == "running"
    # the job runs on: a wait on a job outside the chain blocks it, then it finishes
    assert settle(db, "A", row["attempt"], "wait", json.dumps({"after": ["other"]})) == 1
    run(db, "q", "other")
    run(db, "q", "A")
    run(db, "w", "C")
    run(db, "w", "B")


def test_DEP_01_a_cycle_through_ten_thousand_jobs_is_refused_at_a_bounded_cost(db):
    """A chain of 10,000 jobs: the head's wait on the tail walks the chain once (its cost
    is counted in VM steps, not timed); a wait on a job outside it walks nothing."""
    n = 10_000
    add(db, "q", "{}", id="head")
    add(db, "q", "{}", id="apart")
    (row,) = claim(db, "q", "w", 1)
    assert row["id"] == "head"
    db.execute("BEGIN")
    for i in range(1, n + 1):
        add(db, "w", "{}", id=f"c{i}", after=["head" if i == 1 else f"c{i - 1}"])
    db.execute("COMMIT")
    before = snapshot(db)
    got, refused = wait_steps(db, "head", row["attempt"], [f"c{n}"])
    assert got == (f"tq_settle: outcome 'wait': \"after\" names 'c{n}', which waits for this job "
                   f"(c{n} -> c{n - 1} -> c{n - 2} -> c{n - 3} -> ({n - 7} more) -> c3 -> c2 -> c1 -> head): "
                   "it would never run")
    assert snapshot(db) == before
    got, accepted = wait_steps(db, "head", row["attempt"], ["apart"])
    assert got == 1 and get(db, "head")["state"] == "blocked"
    print(f"VM steps: refused wait over {n} jobs {refused}, wait on an unrelated job {accepted}")
    assert refused < 50 * n  # a seek per job of the chain
    assert accepted < 2_000


def test_DEP_01_tq_deps_and_blocked_bad_input(db):
    with pytest.raises(sqlite3.Error, match=r"^tq_deps: expects \(id\)"):
        db.execute("SELECT * FROM tq_deps").fetchall()
    with pytest.raises(sqlite3.Error, match=r"^tq_deps: id must be text"):
        db.execute("SELECT * FROM tq_deps(1)").fetchall()
    assert deps(db, "nobody") == []
    add(db, "q", "{}", id="a")
    add(db, "q", "{}", id="b", after=["a"])
    assert [r[0] for r in db.execute("SELECT id FROM tq_jobs WHERE queue = 'q' AND state = 'blocked'")] == ["b"]


FAN_IN_WORKER = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
db.enable_load_extension(True)
db.load_extension(sys.argv[2])
db.execute("PRAGMA busy_timeout = 60000")
while True:
    got = db.execute("SELECT id, attempt FROM tq_claim('kids', ?, 1)", (sys.argv[3],)).fetchall()
    if not got:
        break
    for job_id, attempt in got:
        db.execute("SELECT tq_settle(?, ?, 'done')", (job_id, attempt))
"""


def test_DEP_01_four_processes_settling_a_fan_in_wake_it_exactly_once(db, db_path):
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("BEGIN")
    kids = [add(db, "kids", "{}", id=f"kid-{i}") for i in range(200)]
    db.execute("COMMIT")
    add(db, "parent", "{}", id="parent", after=kids)
    procs = [subprocess.Popen([sys.executable, "-c", FAN_IN_WORKER, db_path, SO, f"w{i}"]) for i in range(4)]
    for p in procs:
        assert p.wait(timeout=300) == 0
    assert db.execute("SELECT count(*) FROM tq_jobs WHERE queue = 'kids' AND state = 'done'").fetchone() == (200,)
    states = [e["state"] for e in watch(db) if e["id"] == "parent"]
    assert states == ["blocked", "waiting"]  # woken exactly once
    assert [r["id"] for r in claim(db, "parent", "w", 5)] == ["parent"]


def test_DEP_01_a_retried_dependent_lets_its_dependency_go_once(db):
    setq(db, "q", dedupe="1s")
    pin(db, NOW)
    add(db, "q", "{}", id="a")
    add(db, "w", "{}", id="b", after=["a"])
    add(db, "w", "{}", id="c", after=["a"])
    run(db, "q", "a")
    run(db, "w", "b", "fail", "no")
    assert one(db, "SELECT tq_retry('b')") == 1
    (row,) = claim(db, "w", "w", 1)
    assert row["id"] == "b"
    settle(db, "b", row["attempt"])
    pin(db, NOW + 10_000)
    sweep(db)
    assert get(db, "a")["state"] == "done"  # c still holds it
    run(db, "w", "c")
    pin(db, NOW + 20_000)
    sweep(db)
    assert get(db, "a") is None


def workflow_scenario(db, t0):
    """Fan-out, fan-in, a wait for children, a signal and a timeout, with generated ids."""
    out = []

    def val(sql, *args):
        try:
            row = db.execute(sql, args).fetchone()
            out.append(row)
            return None if row is None else row[0]
        except sqlite3.Error as e:
            out.append(str(e))
            return None
    val("SELECT tq_clock(?)", t0)
    kids = [val("SELECT tq_add('kids', ?)", json.dumps({"k": k})) for k in range(6)]
    val("SELECT tq_add('fan', '{}', ?)", json.dumps({"after": kids, "after_failed": "run"}))
    val("SELECT tq_add('fan', '{}', ?)", json.dumps({"after": kids[:2]}))
    val("SELECT tq_add('fan', '{}', ?)", json.dumps({"after": ["missing"]}))  # an error, on both
    parent = val("SELECT tq_add('parents', '{}')")
    attempt = val("SELECT attempt FROM tq_claim('parents', 'w', 1)")
    val("SELECT tq_settle(?, ?, 'wait', ?)", parent, attempt, json.dumps({"after": kids[3:]}))
    for i, (jid, att) in enumerate(db.execute("SELECT id, attempt FROM tq_claim('kids', 'w', 6)").fetchall()):
        val("SELECT tq_settle(?, ?, ?, ?)", jid, att, "fail" if i == 1 else "done", "no" if i == 1 else None)
    for jid, att in db.execute("SELECT id, attempt FROM tq_claim('parents', 'w', 5)").fetchall():
        val("SELECT tq_settle(?, ?, 'wait', '{\"signal\": \"go\", \"timeout\": \"1m\"}')", jid, att)
    waiter = val("SELECT tq_add('sig', '{}')")
    att = val("SELECT attempt FROM tq_claim('sig', 'w', 1)")
    val("SELECT tq_settle(?, ?, 'wait', '{\"signal\": \"never\", \"timeout\": \"10s\"}')", waiter, att)
    val("SELECT tq_signal('go', '\"yes\"')")
    val("SELECT tq_clock(?)", t0 + 10_000)
    val("SELECT count(*) FROM tq_claim('sig', 'w', 5)")
    val("SELECT count(*) FROM tq_claim('fan', 'w', 5)")
    return out


def test_REP_01_workflows_replay_identically(tmp_path):
    a, b = connect(str(tmp_path / "a.db")), connect(str(tmp_path / "b.db"))
    out_a, out_b = workflow_scenario(a, NOW), workflow_scenario(b, NOW)
    assert out_a == out_b
    assert any(isinstance(o, str) for o in out_a)  # the error is part of the replay
    snap_a, snap_b = snapshot(a), snapshot(b)
    assert snap_a["tinyq_deps"] and snap_a["tinyq_signals"]
    assert snap_a == snap_b


def test_DEP_01_unblocked_job_of_a_full_group_waits_for_its_group(db):
    setq(db, "q", group_concurrency=1)
    add(db, "d", "{}", id="dep")
    add(db, "q", "{}", id="busy", group="g")
    add(db, "q", "{}", id="next", group="g", after=["dep"])
    (busy,) = claim(db, "q", "w", 5)
    assert busy["id"] == "busy"
    run(db, "d", "dep")
    assert get(db, "next")["state"] == "waiting"
    assert claim(db, "q", "w", 5) == []  # its group is full
    settle(db, "busy", busy["attempt"])
    assert [r["id"] for r in claim(db, "q", "w", 5)] == ["next"]


def test_DEP_01_blocked_jobs_are_not_ahead_of_anyone(db):
    add(db, "d", "{}", id="dep")
    for i in range(5):
        add(db, "q", "{}", id=f"blocked-{i}", priority=9, after=["dep"])
    add(db, "q", "{}", id="first")
    add(db, "q", "{}", id="second")
    assert get(db, "second")["ahead"] == 1
    assert db.execute("SELECT waiting, blocked FROM tq_stats('q')").fetchone() == (2, 5)
