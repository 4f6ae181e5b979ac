"""KEY-01: tq_add's `on_conflict`. 'replace' and 'debounce' change only a job that has not
started (scheduled or waiting), never a running, done or failed one, never make a second job
with the same id, and a debounced burst from any number of processes leaves one job with the
last payload committed. Watchers see a replace; counts, buckets and group heads follow it.
Also REP-01 with both options, and `expires` (EXP-01) beside them.
"""
import json
import random
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import (DAY, HOUR, MIN, SEC, T0, add, check_buckets, claim, connect, get, ids, one, pin, plain_ahead,
                      run_python, settle, setq, snapshot, watch_all)
from test_fuzz import check_counters


def events_of(db, job_id):
    return [(e["state"], e["detail"]) for e in watch_all(db) if e["id"] == job_id]


REPLACED = '{"replaced":true}'


def test_KEY_01_keep_is_the_default_a_present_id_adds_nothing(db):
    pin(db, T0)
    add(db, "q", '{"v": 1}', id="j", priority=1)
    assert add(db, "q", '{"v": 2}', id="j", priority=9, on_conflict="keep") == "j"
    assert add(db, "q", '{"v": 3}', id="j") == "j"
    assert (get(db, "j")["payload"], get(db, "j")["priority"]) == ({"v": 1}, 1)
    assert events_of(db, "j") == [("waiting", None)]


def test_KEY_01_replace_gives_a_waiting_job_everything_of_the_new_add(db):
    pin(db, T0)
    add(db, "q", '{"v": 1}', id="j", priority=1, group="a", attempts=3, meta={"t": 1}, expires="1h")
    pin(db, T0 + SEC)
    assert add(db, "q", '{"v": 2}', id="j", on_conflict="replace", priority=5, group="b", attempts=7,
               meta={"t": 2}, delay="1m", expires="2h") == "j"
    job = get(db, "j")
    assert {k: job[k] for k in ("payload", "meta", "priority", "group", "attempts", "run_at", "expires", "state",
                                "created_at")} == {
        "payload": {"v": 2}, "meta": {"t": 2}, "priority": 5, "group": "b", "attempts": 7,
        "run_at": T0 + SEC + MIN, "expires": T0 + SEC + 2 * HOUR, "state": "scheduled", "created_at": T0}
    # What the new add leaves out is gone: no meta, no group, default priority and budget, now.
    assert add(db, "q", '{"v": 3}', id="j", on_conflict="replace") == "j"
    job = get(db, "j")
    assert (job["meta"], job["group"], job["priority"], job["attempts"], job["run_at"], job["expires"],
            job["state"]) == (None, None, 0, 20, T0 + SEC, None, "waiting")
    assert one(db, "SELECT count(*) FROM tinyq_jobs WHERE id = 'j'") == 1
    (r,) = claim(db, "q")
    assert (r["id"], json.loads(r["payload"])) == ("j", {"v": 3})


def test_KEY_01_watchers_see_each_replace_as_an_event_of_its_state(db):
    pin(db, T0)
    add(db, "q", "{}", id="j")
    add(db, "q", "{}", id="j", on_conflict="replace")                # stays waiting
    add(db, "q", "{}", id="j", on_conflict="replace", delay="1m")    # waiting -> scheduled
    add(db, "q", "{}", id="j", on_conflict="replace", delay="2m")    # stays scheduled
    add(db, "q", "{}", id="j", on_conflict="replace")                # scheduled -> waiting
    assert events_of(db, "j") == [("waiting", None), ("waiting", REPLACED), ("scheduled", REPLACED),
                                  ("scheduled", REPLACED), ("waiting", REPLACED)]


@pytest.mark.parametrize("state", ["running", "done", "failed"])
def test_KEY_01_replace_and_debounce_never_touch_a_started_job(db, state):
    pin(db, T0)
    add(db, "q", '{"v": 1}', id="j", priority=1)
    (r,) = claim(db, "q", options={"lease": "1h"})
    if state == "done":
        settle(db, "j", r["attempt"], "done", '{"ok": 1}')
    elif state == "failed":
        settle(db, "j", r["attempt"], "fail", "no")
    before = snapshot(db)
    assert add(db, "q", '{"v": 2}', id="j", on_conflict="replace", priority=9) == "j"
    assert add(db, "q", '{"v": 3}', id="j", on_conflict="debounce", delay="1s") == "j"
    assert snapshot(db) == before
    assert (get(db, "j")["state"], get(db, "j")["payload"]) == (state, {"v": 1})
    if state == "running":
        assert settle(db, "j", r["attempt"], "done") == 1  # its attempt goes on as it was


def test_KEY_01_a_job_between_attempts_is_replaced_and_its_old_attempt_cannot_settle_it(db):
    """A lease that ran out puts the job back in line, and its attempt may still settle it
    late (JOB-05); once replaced, the job holds work that attempt never ran: its settle is stale."""
    pin(db, T0)
    add(db, "q", '{"v": 1}', id="j")
    add(db, "q", '{"v": 1}', id="k")
    claim(db, "q", n=2, options={"lease": "1s"})
    setq(db, "q", paused=True)
    pin(db, T0 + 2 * SEC)
    assert claim(db, "q") == []           # a paused queue's claim still ends the leases that ran out
    assert get(db, "j")["state"] == get(db, "k")["state"] == "waiting"
    assert add(db, "q", '{"v": 2}', id="j", on_conflict="replace") == "j"
    assert settle(db, "j", 1, "done") == 0
    assert settle(db, "k", 1, "done") == 1  # not replaced: its late settle counts
    setq(db, "q", paused=False)
    (r,) = claim(db, "q")
    assert (r["id"], r["attempt"], json.loads(r["payload"])) == ("j", 2, {"v": 2})


def test_KEY_01_a_scheduled_retry_is_replaced_keeping_its_attempts(db):
    pin(db, T0)
    setq(db, "q", backoff="1m")
    add(db, "q", '{"v": 1}', id="j")
    (r,) = claim(db, "q")
    settle(db, "j", r["attempt"], "error", "boom")
    assert add(db, "q", '{"v": 2}', id="j", on_conflict="replace") == "j"
    job = get(db, "j")
    assert (job["state"], job["payload"], job["attempt"], job["tries"]) == ("waiting", {"v": 2}, 1, 1)
    assert claim(db, "q")[0]["attempt"] == 2


def test_KEY_01_debounce_moves_the_time_at_every_add_but_never_past_max_wait(db):
    pin(db, T0)
    opts = dict(on_conflict="debounce", delay="10s", max_wait="1m")
    add(db, "q", '{"v": 0}', id="d", **opts)
    assert get(db, "d")["run_at"] == T0 + 10 * SEC
    for k in range(1, 7):   # an add every 9 s: each pushes the time 10 s past itself, to the cap
        pin(db, T0 + k * 9 * SEC)
        add(db, "q", json.dumps({"v": k}), id="d", **opts)
        assert get(db, "d")["run_at"] == min(T0 + k * 9 * SEC + 10 * SEC, T0 + MIN)
    pin(db, T0 + 59 * SEC)
    assert claim(db, "q") == []
    pin(db, T0 + MIN)        # max_wait after the add that created it
    (r,) = claim(db, "q")
    assert json.loads(r["payload"]) == {"v": 6}
    # Without max_wait the time moves on at every add.
    pin(db, T0 + HOUR)
    for k in range(20):
        pin(db, T0 + HOUR + k * MIN)
        add(db, "q", "{}", id="e", on_conflict="debounce", delay="2m")
    assert get(db, "e")["run_at"] == T0 + HOUR + 21 * MIN


def test_KEY_01_a_debounced_burst_runs_once_with_the_last_payload(db):
    pin(db, T0)
    for k in range(50):
        pin(db, T0 + k * 100)
        add(db, "reindex", json.dumps({"edit": k}), id="doc:7", on_conflict="debounce", delay="5s")
    pin(db, T0 + 49 * 100 + 5 * SEC - 1)
    assert claim(db, "reindex") == []
    pin(db, T0 + 49 * 100 + 5 * SEC)
    (r,) = claim(db, "reindex", n=10)
    assert json.loads(r["payload"]) == {"edit": 49}
    assert settle(db, "doc:7", r["attempt"]) == 1
    assert [s for s, _ in events_of(db, "doc:7")] == ["scheduled"] * 50 + ["waiting", "running", "done"]


DEBOUNCER = r"""
import json, sqlite3, sys, time
from helpers import connect, one
db = connect(sys.argv[1], busy_ms=60000)
me, n, start = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
while time.time() < start:
    time.sleep(0.001)
for k in range(n):
    payload = json.dumps({"by": me, "k": k})
    # The add and its record in the log commit together: the log's order is the commit order.
    db.execute("BEGIN IMMEDIATE")
    one(db, "SELECT tq_add('reindex', ?, ?)", payload,
        json.dumps({"id": "doc:1", "on_conflict": "debounce", "delay": "1h", "max_wait": "2h", "meta": {"by": me}}))
    db.execute("INSERT INTO adds_log (payload) VALUES (?)", (payload,))
    db.execute("COMMIT")
    time.sleep(0.001)  # lets the others take the lock between adds (else one runs a long streak)
    # and some in autocommit, as the helpers add
    one(db, "SELECT tq_add('reindex', ?, ?)", json.dumps({"by": me, "k": k, "plain": 1}),
        json.dumps({"id": "doc:2", "on_conflict": "debounce", "delay": "1h"}))
print("ok")
"""


def test_KEY_01_four_processes_debouncing_one_id_leave_one_job_with_the_last_committed_payload(db, db_path):
    n = 150
    db.execute("CREATE TABLE adds_log (seq INTEGER PRIMARY KEY, payload TEXT)")
    one(db, "SELECT tq_queue('reindex', '{}')")  # the store exists before they race
    start = time.time() + 1.5
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(run_python, DEBOUNCER, db_path, f"p{k}", str(n), str(start), timeout=300)
                   for k in range(4)]
        procs = [f.result() for f in futures]
    for proc in procs:
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert one(db, "SELECT count(*) FROM adds_log") == 4 * n
    last = one(db, "SELECT payload FROM adds_log ORDER BY seq DESC LIMIT 1")
    job = get(db, "doc:1")
    order = [json.loads(p)["by"] for (p,) in db.execute("SELECT payload FROM adds_log ORDER BY seq")]
    turns = sum(a != b for a, b in zip(order, order[1:]))
    print(f"\n4 processes x {n} debounced adds of doc:1 ({turns} turns from one process to another in commit"
          f" order): committed last {last}, the job holds {json.dumps(job['payload'])} (meta"
          f" {json.dumps(job['meta'])}), state {job['state']}")
    assert one(db, "SELECT count(*) FROM tinyq_jobs WHERE id = 'doc:1'") == 1
    assert job["payload"] == json.loads(last) and job["meta"] == {"by": json.loads(last)["by"]}
    # One add event, then one replace event per later add, in commit order.
    assert [d for s, d in events_of(db, "doc:1")] == [None] + [REPLACED] * (4 * n - 1)
    assert one(db, "SELECT count(*) FROM tinyq_jobs WHERE id = 'doc:2'") == 1
    assert len(events_of(db, "doc:2")) == 4 * n
    assert db.execute("SELECT scheduled, waiting FROM tq_stats('reindex')").fetchone() == (2, 0)
    check_counters(db)


def test_KEY_01_replace_from_a_trigger_commits_or_rolls_back_with_the_row(db):
    pin(db, T0)
    db.executescript("""
        CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT);
        CREATE TRIGGER docs_reindex AFTER UPDATE ON docs BEGIN
            SELECT tq_add('reindex', json_object('body', NEW.body),
                          json_object('id', 'doc:' || NEW.id, 'on_conflict', 'debounce', 'delay', '5s'));
        END;
        INSERT INTO docs VALUES (1, 'a');
    """)
    db.execute("UPDATE docs SET body = 'b' WHERE id = 1")
    db.execute("UPDATE docs SET body = 'c' WHERE id = 1")
    db.execute("BEGIN")
    db.execute("UPDATE docs SET body = 'rolled back' WHERE id = 1")
    db.execute("ROLLBACK")
    assert get(db, "doc:1")["payload"] == {"body": "c"}
    assert len(events_of(db, "doc:1")) == 2


def test_KEY_01_a_freed_or_cancelled_id_is_added_anew(db):
    pin(db, T0)
    setq(db, "q", dedupe="1s")
    add(db, "q", '{"v": 1}', id="j")
    (r,) = claim(db, "q")
    settle(db, "j", r["attempt"])
    pin(db, T0 + 2 * SEC)
    assert add(db, "q", '{"v": 2}', id="j", on_conflict="replace") == "j"
    assert (get(db, "j")["state"], get(db, "j")["payload"], get(db, "j")["created_at"]) == (
        "waiting", {"v": 2}, T0 + 2 * SEC)
    assert one(db, "SELECT tq_cancel('j')") == 1
    assert add(db, "q", '{"v": 3}', id="j", on_conflict="debounce", delay="1s") == "j"
    assert (get(db, "j")["state"], get(db, "j")["payload"]) == ("scheduled", {"v": 3})


def test_KEY_01_replaces_that_move_jobs_keep_counts_buckets_and_group_heads_exact(db):
    """A long line (cut into buckets) in a queue with group limits; replaces move jobs along
    it (priority, time), between groups, out of it (into the future) and back; `ahead`, the
    counters and the group heads stay exact, and claims take jobs in order within the limits."""
    rnd = random.Random(7)
    pin(db, T0)
    setq(db, "q", group_concurrency=1)
    db.execute("BEGIN IMMEDIATE")
    one(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2500)"
            " SELECT count(tq_add('q', '{}', json_object('id', 'j' || i, 'priority', i % 3,"
            " 'group', CASE WHEN i % 4 = 0 THEN 'g' || (i % 3) END))) FROM c")
    db.execute("COMMIT")
    claim(db, "q", n=3, options={"lease": "1h"})
    now = T0
    for step in range(300):
        job_id = f"j{rnd.randint(1, 2600)}"
        opts = {"id": job_id, "on_conflict": rnd.choice(["replace", "replace", "debounce"]),
                "priority": rnd.randint(-2, 4)}
        if rnd.random() < 0.5:
            opts["group"] = rnd.choice(["g0", "g1", "g2", "g3"])
        if opts["on_conflict"] == "debounce":
            opts["delay"] = rnd.choice([0, 500, 3000])
        elif rnd.random() < 0.3:
            opts["at"] = now + rnd.choice([-5000, 0, 2000])
        one(db, "SELECT tq_add('q', ?, ?)", json.dumps({"step": step}), json.dumps(opts))
        if step % 25 == 0:
            now += 1000
            pin(db, now)
            taken = claim(db, "q", n=5, options={"lease": "1h"})
            for r in taken[::2]:
                settle(db, r["id"], r["attempt"])
        if step % 10 == 0:
            check_buckets(db)
            check_counters(db)
            waiting = [r[0] for r in db.execute("SELECT id FROM tq_jobs WHERE queue = 'q' AND state = 'waiting'")]
            for w in rnd.sample(waiting, 3):
                assert get(db, w)["ahead"] == plain_ahead(db, w), (step, w)
    stats = db.execute("SELECT scheduled, waiting, running, done FROM tq_stats('q')").fetchone()
    assert stats == tuple(one(db, "SELECT count(*) FROM tq_jobs WHERE queue = 'q' AND state = ?", s)
                          for s in ("scheduled", "waiting", "running", "done"))
    # The groups' heads are right: each claim takes the first waiting job, its group being free.
    now += DAY
    pin(db, now)
    for r in claim(db, "q", n=1000, options={"lease": "1h"}):
        settle(db, r["id"], r["attempt"])
    while True:
        first = one(db, "SELECT id FROM tinyq_jobs WHERE queue = 'q' AND (status = 'queued'"
                        " OR (status = 'scheduled' AND run_at <= tq_now())) ORDER BY priority DESC, run_at, seq LIMIT 1")
        if first is None:
            break
        (r,) = claim(db, "q", n=1)
        assert r["id"] == first
        settle(db, r["id"], r["attempt"])
    check_buckets(db)
    check_counters(db)


@pytest.mark.parametrize("options, message", [
    ({"on_conflict": "overwrite"}, "tq_add: option \"on_conflict\" must be 'keep', 'replace' or 'debounce', not 'overwrite'"),
    ({"on_conflict": 1}, "tq_add: option \"on_conflict\" must be text, not a number"),
    ({"id": None, "on_conflict": "replace"}, "tq_add: option \"on_conflict\" other than 'keep' needs an \"id\""),
    ({"on_conflict": "debounce"}, "tq_add: option \"on_conflict\" 'debounce' needs a \"delay\""),
    ({"on_conflict": "debounce", "at": T0}, "tq_add: option \"on_conflict\" 'debounce' sets the job's time from \"delay\""),
    ({"on_conflict": "debounce", "delay": "1m", "max_wait": "10s"},
     "tq_add: option \"max_wait\" (10000ms) must not be shorter than \"delay\" (60000ms)"),
    ({"on_conflict": "replace", "max_wait": "1m"}, "tq_add: option \"max_wait\" goes with \"on_conflict\": 'debounce' only"),
    ({"max_wait": "x"}, "tq_add: option \"max_wait\": bad duration 'x'"),
    ({"on_conflict": "replace", "queue": "other"},
     "tq_add: option \"id\": 'j' is a job of queue 'q', not 'other': on_conflict never moves a job to another queue"),
    ({"queue": "other"}, "tq_add: option \"id\": 'j' is a job of queue 'q', not 'other': an id names one job of the store"),
])
def test_KEY_01_ERR_01_bad_options_are_errors_naming_them_and_change_nothing(db, options, message):
    pin(db, T0)
    add(db, "q", "{}", id="j")
    before = snapshot(db)
    options = dict({"id": "j"}, **options)
    queue = options.pop("queue", "q")
    if options["id"] is None:
        del options["id"]
    with pytest.raises(sqlite3.OperationalError) as e:
        one(db, "SELECT tq_add(?, '{}', ?)", queue, json.dumps(options))
    assert str(e.value).startswith(message), str(e.value)
    assert snapshot(db) == before


# ---------------------------------------------------------------- REP-01, with both options

def keyed_scenario(conn, t0):
    """Adds with `expires`, 'replace' and 'debounce' (generated ids, jitter and replaces
    included), claims, settles and clock moves; every result or error is returned."""
    out = []

    def run(sql, *args):
        try:
            rows = conn.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            rows = str(e)
        out.append((sql, rows))
        return rows if isinstance(rows, list) else []

    run("SELECT tq_clock(?)", t0)
    run("SELECT tq_queue('k', ?)", json.dumps({"group_concurrency": 1, "backoff": "1s", "lease": "5s"}))
    for k in range(30):
        run("SELECT tq_add('k', ?, ?)", json.dumps({"n": k}), json.dumps(
            {"priority": k % 3, "expires": ["2s", "1h", "3s"][k % 3], "group": ["a", None, "b"][k % 3]}))
    for k in range(20):
        run("SELECT tq_clock(?)", t0 + 100 * k)
        run("SELECT tq_add('k', ?, ?)", json.dumps({"burst": k}),
            json.dumps({"id": f"doc:{k % 4}", "on_conflict": "debounce", "delay": "1s", "max_wait": "1500ms",
                        "expires": "1m"}))
        run("SELECT tq_add('k', ?, ?)", json.dumps({"r": k}),
            json.dumps({"id": f"rep:{k % 3}", "on_conflict": "replace", "priority": k % 5, "group": ["a", "b"][k % 2]}))
        rows = run("SELECT id, attempt FROM tq_claim('k', 'w', 2)")
        for i, (jid, attempt) in enumerate(rows):
            run("SELECT tq_settle(?, ?, ?, ?)", jid, attempt, ["error", "snooze", "done"][(k + i) % 3],
                ["boom", "1500ms", None][(k + i) % 3])
    run("SELECT tq_clock(?)", t0 + 5000)
    run("SELECT id, attempt FROM tq_claim('k', 'w', 100)")
    run("SELECT id, state, error, run_at FROM tq_jobs ORDER BY id")
    return out


def test_REP_01_statements_with_expires_replace_and_debounce_leave_identical_stores(tmp_path):
    a, b = connect(str(tmp_path / "a.db")), connect(str(tmp_path / "b.db"))
    try:
        out_a, out_b = keyed_scenario(a, T0), keyed_scenario(b, T0)
        assert out_a == out_b
        failed = one(a, "SELECT count(*) FROM tinyq_jobs WHERE error = 'expired'")
        replaced = one(a, "SELECT count(*) FROM tinyq_events WHERE detail = ?", REPLACED)
        assert failed > 0 and replaced > 0, (failed, replaced)
        snap_a, snap_b = snapshot(a), snapshot(b)
        assert set(snap_a) == set(snap_b)
        for table in snap_a:
            assert snap_a[table] == snap_b[table], f"{table} differs between the two stores"
    finally:
        a.close()
        b.close()


REPLAY_IN_PROCESS = r"""
import json, sys
from helpers import connect, snapshot
from test_keys import keyed_scenario
conn = connect(sys.argv[1])
out = keyed_scenario(conn, int(sys.argv[2]))
print(json.dumps({"out": out, "tables": snapshot(conn)}, default=repr))
"""


def test_REP_01_two_processes_replaying_expires_and_debounce_end_identical(tmp_path):
    results = []
    for name in ("node1.db", "node2.db"):
        proc = run_python(REPLAY_IN_PROCESS, str(tmp_path / name), str(T0), timeout=120)
        assert proc.returncode == 0, proc.stderr
        results.append(json.loads(proc.stdout))
    assert results[0] == results[1]
