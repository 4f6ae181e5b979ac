"""Where a job stands and what a queue holds: `ahead` (tq_get), tq_jobs and tq_stats.

Figures (ahead at 100k, tq_jobs filter vs scan) are printed: run with `-s` to see them.
"""
import json
import sqlite3
import statistics
import time

import pytest

from helpers import (T0, add, bulk_add, cancel, claim, claim_ids, connect, get, jobs, one, pin, rows, settle,
                     settle_all)
from helpers import HOUR as H, MIN as M, SEC as S


# --------------------------------------------------------------------------- helpers

def best_of(k, fn):
    times = []
    result = None
    for _ in range(k):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times), result


# --------------------------------------------------------------------------- ahead

def test_ahead_counts_the_jobs_that_start_before(db):
    pin(db, T0)
    add(db, "q", "{}", id="r", priority=99)
    assert claim_ids(db, "q") == [("r", 1)]           # running: not ahead of anyone
    add(db, "q", "{}", id="a", at=T0 - 1000)
    add(db, "q", "{}", id="b", at=T0 - 500, priority=5)
    add(db, "q", "{}", id="c", at=T0 - 3000)
    add(db, "q", "{}", id="d", at=T0 - 1000)           # same time as a, added after it
    add(db, "q", "{}", id="e", at=T0 - 2000, priority=5)
    add(db, "q", "{}", id="f", at=T0 - 10_000, priority=-1)
    add(db, "elsewhere", "{}", id="x", priority=100)   # another queue: not ahead
    order = ["e", "b", "c", "a", "d", "f"]              # priority, then time, then add order
    for i, job_id in enumerate(order):
        job = get(db, job_id)
        assert job["state"] == "waiting"
        assert job["ahead"] == i, (job_id, job["ahead"], i)
    assert get(db, "b")["run_at"] == T0 - 500
    assert get(db, "x")["ahead"] == 0
    assert get(db, "r").get("ahead") is None
    # the jobs do start in that order, and ahead moves up
    assert claim_ids(db, "q", 2) == [("e", 1), ("b", 1)]
    for i, job_id in enumerate(order[2:]):
        assert get(db, job_id)["ahead"] == i
    assert settle(db, "r", 1, "done") == 1
    # a scheduled job reports no ahead until it is due
    add(db, "q", "{}", id="s", delay="1h", priority=50)
    assert get(db, "s")["state"] == "scheduled"
    assert get(db, "s").get("ahead") is None
    pin(db, T0 + H + S)
    job = get(db, "s")
    assert job["state"] == "waiting" and job["ahead"] == 0
    assert get(db, "c")["ahead"] == 1


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """100,000 waiting jobs in `bulk` (ids b1..b100000, added in that order), plus 5 failed
    `bulk` jobs and a `mail` queue with 50 running, 30 done, 20 failed and 500 waiting."""
    path = str(tmp_path_factory.mktemp("big") / "big.db")
    conn = connect(path)
    pin(conn, T0)
    started = time.perf_counter()
    bulk_add(conn, "mail", 100, id_prefix="m")
    claimed = claim_ids(conn, "mail", 100)
    assert len(claimed) == 100
    settle_all(conn, claimed[:30], "done")
    settle_all(conn, claimed[30:50], "fail", "bounced")
    bulk_add(conn, "mail", 500, id_prefix="mw")
    bulk_add(conn, "bulk", 5, id_prefix="bf", priority=10)
    settle_all(conn, claim_ids(conn, "bulk", 5), "fail", "bad")
    took = bulk_add(conn, "bulk", 100_000, id_prefix="b")
    print(f"\nbig store: 100,000 tq_add in one transaction took {took:.2f}s "
          f"(build {time.perf_counter() - started:.2f}s)")
    yield conn
    conn.close()


def test_ahead_at_100k_waiting_jobs(big_store):
    conn = big_store
    assert get(conn, "b1")["ahead"] == 0
    figures = {}
    for job_id, ahead in (("b1", 0), ("b50000", 49_999), ("b100000", 99_999)):
        fastest, median, text = best_of(7, lambda: one(conn, "SELECT tq_get(?)", job_id))
        job = json.loads(text)
        assert job["state"] == "waiting"
        assert job["ahead"] == ahead, (job_id, job["ahead"])
        figures[job_id] = (fastest, median)
    print("\nahead at 100,000 waiting jobs: tq_get "
          + ", ".join(f"{k} {v[0] * 1000:.2f} ms (median {v[1] * 1000:.2f} ms)"
                      for k, v in figures.items()))


# --------------------------------------------------------------------------- tq_jobs, tq_stats

def test_jobs_lists_every_job_with_its_derived_state(db):
    pin(db, T0)
    add(db, "j", "{}", id="j-scheduled", delay="1h")
    add(db, "j", "{}", id="j-due-soon", delay="10s")
    add(db, "j", "{}", id="j-running")
    add(db, "j", "{}", id="j-done")
    add(db, "j", "{}", id="j-failed")
    add(db, "j", "{}", id="j-waiting")
    add(db, "j", "{}", id="j-cancelled")
    add(db, "k", "{}", id="k-waiting")
    assert [i for i, _ in claim_ids(db, "j", 3)] == ["j-running", "j-done", "j-failed"]
    settle(db, "j-done", 1, "done")
    settle(db, "j-failed", 1, "fail", "no")
    cancel(db, "j-cancelled")
    pin(db, T0 + M)                                     # j-due-soon is due now
    got = {j["id"]: (j["queue"], j["state"]) for j in jobs(db)}
    assert got == {
        "j-scheduled": ("j", "scheduled"),
        "j-due-soon": ("j", "waiting"),
        "j-running": ("j", "running"),
        "j-done": ("j", "done"),
        "j-failed": ("j", "failed"),
        "j-waiting": ("j", "waiting"),
        "k-waiting": ("k", "waiting"),
    }
    assert sorted(j["id"] for j in jobs(db, "WHERE queue = ? AND state = ?", "j", "waiting")) \
        == ["j-due-soon", "j-waiting"]
    assert [j["id"] for j in jobs(db, "WHERE state = ?", "scheduled")] == ["j-scheduled"]
    assert [j["id"] for j in jobs(db, "WHERE queue = ?", "k")] == ["k-waiting"]
    assert jobs(db, "WHERE queue = ? AND state = ?", "j", "cancelled") == []
    assert jobs(db, "WHERE queue = ?", "nope") == []


def test_jobs_filter_by_queue_and_state_beats_a_full_scan_20x(big_store):
    conn = big_store
    total = 100_000 + 5 + 600
    full_best, full_median, n = best_of(
        3, lambda: one(conn, "SELECT count(*) FROM tq_jobs"))
    assert n == total
    sql = "SELECT id, state FROM tq_jobs WHERE queue = ? AND state = ?"
    figures = []
    for queue, state, expect in (("mail", "running", 50), ("bulk", "failed", 5),
                                 ("mail", "failed", 20)):
        best, median, found = best_of(7, lambda: conn.execute(sql, (queue, state)).fetchall())
        assert len(found) == expect and {s for _, s in found} == {state}
        figures.append((queue, state, best, median))
    assert one(conn, "SELECT count(*) FROM tq_jobs WHERE queue = 'bulk' AND state = 'waiting'") \
        == 100_000
    print(f"\ntq_jobs at {total:,} jobs: full count(*) {full_best * 1000:.1f} ms "
          f"(median {full_median * 1000:.1f}); "
          + "; ".join(f"queue={q} state={s}: {b * 1000:.3f} ms (median {m * 1000:.3f}), "
                      f"{full_best / b:.0f}x faster" for q, s, b, m in figures))
    for queue, state, best, _ in figures:
        assert full_best >= 20 * best, \
            f"queue={queue} state={state}: {best * 1000:.2f} ms vs full {full_best * 1000:.2f} ms"


def stats(conn, queue=None):
    if queue is None:
        return rows(conn, "SELECT * FROM tq_stats")
    return rows(conn, "SELECT * FROM tq_stats(?)", queue)


def test_stats_per_queue(db):
    pin(db, T0)
    one(db, "SELECT tq_queue('st', ?)", json.dumps({"rate": "10/1m"}))
    for i in range(6):
        add(db, "st", "{}", id=f"w{i}")
    for i in range(3):
        add(db, "st", "{}", id=f"s{i}", delay="1h")
    add(db, "other", "{}", id="o1")
    assert [i for i, _ in claim_ids(db, "st", 3)] == ["w0", "w1", "w2"]
    settle(db, "w0", 1, "done")
    settle(db, "w1", 1, "fail", "x")
    pin(db, T0 + 4 * S)

    every = stats(db)
    assert sorted(r["queue"] for r in every) == ["other", "st"]
    (st,) = stats(db, "st")
    assert st["queue"] == "st"
    assert (st["scheduled"], st["waiting"], st["running"], st["done"], st["failed"]) \
        == (3, 3, 1, 1, 1), st
    assert st["leases"] == 1, st
    assert st["oldest_waiting_ms"] == 4 * S, st
    assert st["started_in_window"] == 3, st
    (other,) = stats(db, "other")
    assert (other["waiting"], other["running"], other["done"]) == (1, 0, 0)
    assert other["oldest_waiting_ms"] == 4 * S

    # later: the rate window has moved on; the oldest waiting job has waited longer
    pin(db, T0 + 2 * M)
    (st,) = stats(db, "st")
    assert st["started_in_window"] == 0, st
    assert st["oldest_waiting_ms"] == 2 * M, st
    # a queue with nothing waiting has no oldest waiting age
    claim(db, "other")
    (other,) = stats(db, "other")
    assert other["waiting"] == 0 and other["running"] == 1
    assert other["oldest_waiting_ms"] in (None, 0)
    assert stats(db, "nope") == [] or stats(db, "nope")[0]["waiting"] == 0


def test_tq_jobs_with_a_queue_in_parentheses_says_where_the_queue_goes(db):
    """`tq_jobs('emails')` binds the first hidden column (`after`), not the queue: the error
    says so and gives the query that lists a queue's jobs, instead of naming only `after`."""
    add(db, "emails", id="e1")
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT * FROM tq_jobs('emails')").fetchall()
    assert "tq_jobs: after: no job 'emails'" in str(e.value)
    assert "SELECT * FROM tq_jobs WHERE queue = 'emails'" in str(e.value)
    assert [r[0] for r in db.execute("SELECT * FROM tq_jobs WHERE queue = 'emails'")] == ["e1"]
