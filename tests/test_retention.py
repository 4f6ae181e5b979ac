"""How long settled jobs are kept (RET-01): `dedupe` for done ids, `keep` for failed jobs,
and tq_sweep and the claims that remove what is past its window.

Time is pinned with tq_clock, so nothing sleeps for a window. Figures (pages after sweeping)
are printed: run with `-s` to see them.
"""
import json
import time

from helpers import (T0, add, bulk_add, claim, claim_ids, event_count, get, jobs, one, pin, settle,
                     settle_all, sweep, sweep_all, watch)
from helpers import DAY as D, HOUR as H, MIN as M, SEC as S


# --------------------------------------------------------------------------- helpers

def job_count(conn):
    return one(conn, "SELECT count(*) FROM tq_jobs")


# --------------------------------------------------------------------------- RET-01 dedupe / keep / sweep

def test_RET_01_a_done_id_adds_nothing_during_dedupe_then_is_free(db):
    pin(db, T0)
    add(db, "r", json.dumps({"v": 1}), id="reply:41")
    claim(db, "r")
    pin(db, T0 + 5 * S)
    assert settle(db, "reply:41", 1, "done", json.dumps({"sent": True})) == 1
    events, count = event_count(db), job_count(db)
    # inside the default 1d window (counted from the settlement): the old job, nothing added
    for at in (T0 + 5 * S + H, T0 + 5 * S + D - M):
        pin(db, at)
        assert add(db, "r", json.dumps({"v": 2}), id="reply:41") == "reply:41"
        job = get(db, "reply:41")
        assert job["state"] == "done" and job["payload"] == {"v": 1}
        assert job["result"] == {"sent": True}
        assert (event_count(db), job_count(db)) == (events, count)
        assert claim_ids(db, "r") == []
    # after it, a new job
    pin(db, T0 + 5 * S + D + M)
    assert add(db, "r", json.dumps({"v": 3}), id="reply:41") == "reply:41"
    job = get(db, "reply:41")
    assert job["state"] == "waiting" and job["payload"] == {"v": 3}
    # (its attempts continue after the old job's: an attempt belongs to one job, JOB-05)
    assert job["result"] is None and job["attempt"] == 1
    assert job_count(db) == count
    assert claim_ids(db, "r") == [("reply:41", 2)]


def test_RET_01_the_queue_dedupe_setting_sets_the_window(db):
    pin(db, T0)
    one(db, "SELECT tq_queue('r10', ?)", json.dumps({"dedupe": "10m"}))
    add(db, "r10", "{}", id="k")
    claim(db, "r10")
    settle(db, "k", 1, "done", "first")
    pin(db, T0 + 9 * M)
    assert add(db, "r10", "{}", id="k") == "k"
    assert get(db, "k")["state"] == "done"
    pin(db, T0 + 11 * M)
    assert add(db, "r10", "{}", id="k") == "k"
    assert get(db, "k")["state"] == "waiting"


def test_RET_01_a_failed_job_is_kept_with_its_error_during_keep_then_freed(db):
    pin(db, T0)
    add(db, "r", json.dumps({"v": 1}), id="bad")
    add(db, "r", json.dumps({"v": 1}), id="bad2")
    claim(db, "r", "w1", 2)
    assert settle(db, "bad", 1, "fail", "the PDF is encrypted") == 1
    assert settle(db, "bad2", 1, "fail", "the PDF is encrypted") == 1
    # kept for the default 7d, with its error; its id adds nothing
    pin(db, T0 + 7 * D - M)
    job = get(db, "bad")
    assert job["state"] == "failed" and job["error"] == "the PDF is encrypted"
    assert add(db, "r", json.dumps({"v": 2}), id="bad") == "bad"
    job = get(db, "bad")
    assert job["state"] == "failed" and job["payload"] == {"v": 1}
    assert sweep_all(db) >= 0 and get(db, "bad")["state"] == "failed"
    # after it, the id is free: adding makes a new job ...
    pin(db, T0 + 7 * D + M)
    assert add(db, "r", json.dumps({"v": 2}), id="bad") == "bad"
    job = get(db, "bad")
    assert job["state"] == "waiting" and job["payload"] == {"v": 2} and job["error"] is None
    # ... and sweeping removes the other one
    assert sweep_all(db) >= 1
    assert get(db, "bad2") is None
    assert get(db, "bad")["state"] == "waiting"


def test_RET_01_sweep_removes_what_is_past_its_window_and_returns_the_count(db):
    pin(db, T0)
    one(db, "SELECT tq_queue('s', ?)", json.dumps({"dedupe": "1h", "keep": "2h"}))
    for i in range(12):
        add(db, "s", "{}", id=f"s{i}")
    claimed = claim_ids(db, "s", 12)
    settle_all(db, claimed[:7], "done")
    settle_all(db, claimed[7:], "fail", "x")          # 5 failed
    for i in range(3):
        add(db, "s", "{}", id=f"live{i}")

    def removed_by(fn):
        jobs_before, events_before = job_count(db), event_count(db)
        returned = fn()
        gone = (jobs_before - job_count(db)) + (events_before - event_count(db))
        return returned, jobs_before - job_count(db), gone

    # nothing is past its window yet
    pin(db, T0 + 30 * M)
    returned, jobs_gone, gone = removed_by(lambda: sweep_all(db))
    assert jobs_gone == 0 and returned == gone
    # past dedupe, not past keep: the 7 done jobs go, in limited sweeps
    pin(db, T0 + 90 * M)
    returned, jobs_gone, gone = removed_by(lambda: sweep(db, 4))
    assert 1 <= returned <= 4 and returned == gone
    returned, jobs_gone, gone = removed_by(lambda: sweep_all(db, 4))
    assert returned == gone
    assert sorted(j["id"] for j in jobs(db, "WHERE queue = 's' AND state = 'done'")) == []
    assert len(jobs(db, "WHERE queue = 's' AND state = 'failed'")) == 5
    assert len(jobs(db, "WHERE queue = 's' AND state = 'waiting'")) == 3
    assert sweep(db) == 0
    # past keep: the failed go too; the waiting jobs stay
    pin(db, T0 + 3 * H)
    returned, jobs_gone, gone = removed_by(lambda: sweep(db))
    assert jobs_gone == 5 and returned == gone
    assert sorted(j["id"] for j in jobs(db)) == ["live0", "live1", "live2"]
    assert sweep(db) == 0


def test_RET_01_claims_also_sweep_a_bounded_amount(db):
    n = 3000
    pin(db, T0)
    one(db, "SELECT tq_queue('cs', ?)", json.dumps({"dedupe": "1m"}))
    bulk_add(db, "cs", n, id_prefix="c")
    for _ in range(n // 1000):
        settle_all(db, claim_ids(db, "cs", 1000), "done")
    assert len(jobs(db, "WHERE queue = 'cs' AND state = 'done'")) == n
    pin(db, T0 + H)
    per_claim = []
    remaining = n
    for _ in range(n + 1):
        assert claim_ids(db, "cs", 10) == []
        now = len(jobs(db, "WHERE queue = 'cs' AND state = 'done'"))
        per_claim.append(remaining - now)
        remaining = now
        if remaining == 0:
            break
    print(f"\nclaims sweep: {n} expired done jobs gone after {len(per_claim)} empty claims; "
          f"first claims removed {per_claim[:5]}")
    # Each claim sweeps one kind of expired row in turn (jobs, events, starts).
    assert sum(per_claim[:3]) > 0, "three claims swept no job"
    assert remaining == 0, "claims alone never emptied the store"


def test_RET_01_an_unattended_store_stays_bounded(db):
    """No one calls tq_sweep: a worker claims 10 at a time (as in the README's example) and settles.
    Each round adds 1,000 jobs and then time moves past every window (dedupe and keep 1m).
    What is left after a round (done jobs and events, as tq_jobs and tq_watch show them)
    must not grow with the number of rounds: claims sweep what the work leaves behind."""
    rounds, per_round, batch = 12, 1000, 10
    pin(db, T0)
    one(db, "SELECT tq_queue('un', ?)", json.dumps({"dedupe": "1m", "keep": "1m"}))
    now = T0
    left = []
    for _ in range(rounds):
        bulk_add(db, "un", per_round)
        while True:
            claimed = claim_ids(db, "un", batch)
            if not claimed:
                break
            for job_id, attempt in claimed:
                assert settle(db, job_id, attempt, "done") == 1
        left.append((len(jobs(db, "WHERE queue = 'un' AND state = 'done'")),
                     len(watch(db, 0, "un"))))
        now += 2 * M
        pin(db, now)
    print(f"\nunattended store, claims of {batch}: (done jobs, events) left after each round of "
          f"{per_round}: {left}")
    made_per_round = per_round * 4            # a job and its 3 events (waiting, running, done)
    for done_left, events_left in left:
        assert done_left + events_left <= 2 * made_per_round, left


def test_RET_01_a_swept_store_keeps_its_live_pages_bounded(db):
    """Rounds of add -> claim -> settle done -> (time passes) -> sweep. The live pages
    (page_count - freelist_count) after each sweep stay where they were after the first."""
    rounds, per_round = 20, 15_000
    pin(db, T0)
    now = T0
    live_after = []
    peak = 0
    started = time.perf_counter()
    for r in range(rounds):
        bulk_add(db, "pg", per_round, payload_bytes=200)
        settled = 0
        while True:
            claimed = claim_ids(db, "pg", 1000)
            if not claimed:
                break
            settle_all(db, claimed, "done", json.dumps({"ok": True}))
            settled += len(claimed)
        assert settled == per_round
        peak = max(peak, one(db, "PRAGMA page_count") - one(db, "PRAGMA freelist_count"))
        now += 30 * D                    # past dedupe, keep and any event window
        pin(db, now)
        sweep_all(db)
        assert job_count(db) == 0
        live_after.append(one(db, "PRAGMA page_count") - one(db, "PRAGMA freelist_count"))
    took = time.perf_counter() - started
    total = rounds * per_round
    print(f"\nswept store: {total:,} jobs in {rounds} rounds in {took:.1f}s; live pages "
          f"before sweeping up to {peak}, after each sweep {live_after}; "
          f"file {one(db, 'PRAGMA page_count')} pages, events left {event_count(db)}")
    assert live_after[-1] <= live_after[0] * 1.5 + 20, live_after
    assert live_after[-1] * 5 < peak, (live_after, peak)
