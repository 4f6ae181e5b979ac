"""Limits (LIM-01, LIM-02) and busy handling, in one process and across real processes.

Queue settings (docs/reference.md, tq_queue): `concurrency` (most running leases in the queue), `rate`
('N/duration': most starts in a sliding window), `group_concurrency`, `group_rate` (the
same per group); tq_add's `group` option puts a job in a group.

Single-process tests pin the clock with tq_clock, so nothing depends on timing. The load
tests start real worker processes (tests/support/proc_worker.py, Debian's python), each with its
own connection, and audit afterwards from tq_watch (commit order and claim times) and from
the workers' own logs (monotonic timestamps).
"""
import json
import os
import random
import sqlite3
import threading
import time

import pytest

from helpers import T0, add, claim, connect, get, ids, one, pin, setq, settle, watch_all
from support.proc_worker import spawn, wait_all


def window_violations(times, n, w):
    """Places where more than n starts fall in one window of w ms: t[i+n] - t[i] < w."""
    ts = sorted(times)
    return [(ts[i], ts[i + n]) for i in range(len(ts) - n) if ts[i + n] - ts[i] < w]


def max_in_window(times, w):
    """Most starts that fall in one window [t, t + w) of w ms."""
    ts = sorted(times)
    best, j = 0, 0
    for i in range(len(ts)):
        while ts[i] - ts[j] >= w:
            j += 1
        best = max(best, i - j + 1)
    return best


def max_overlap(intervals):
    """Most intervals open at one instant. Closed intervals; at a tie an end comes first,
    so touching intervals do not count as overlapping (the audit never over-counts)."""
    points = []
    for a, b in intervals:
        points.append((a, 1))
        points.append((b, -1))
    points.sort(key=lambda p: (p[0], p[1]))
    live = best = 0
    for _, d in points:
        live += d
        best = max(best, live)
    return best


def snapshot(conn):
    """Every row of every tinyq_* table, in a stable order (some are WITHOUT ROWID, so
    helpers.snapshot's ORDER BY rowid cannot be used on them)."""
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'tinyq%' ORDER BY name")]
    return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}


def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# =========================================================================== LIM-01 units

def test_LIM_01_settings_are_read_back(db):
    s = setq(db, "lim", concurrency=3, rate="10/300ms", group_concurrency=1,
             group_rate="3/400ms")
    assert s["concurrency"] == 3
    assert s["group_concurrency"] == 1
    assert s["rate"] == "10/300ms"            # design.md: reported as "N/<ms>ms"
    assert s["group_rate"] == "3/400ms"
    s = setq(db, "lim2", rate="10/s", group_rate="600/1m")
    assert s["rate"] == "10/1000ms"
    assert s["group_rate"] == "600/60000ms"
    read = json.loads(one(db, "SELECT tq_queue('lim')"))
    assert (read["concurrency"], read["rate"], read["group_concurrency"], read["group_rate"]) \
        == (3, "10/300ms", 1, "3/400ms")
    # the reported form is accepted back
    assert setq(db, "lim3", rate=read["rate"])["rate"] == "10/300ms"


def test_LIM_01_group_option_is_kept_and_returned_by_claim(db):
    pin(db, T0)
    jid = add(db, "g", group="tenant-7")
    assert get(db, jid)["group"] == "tenant-7"
    rows = claim(db, "g", "w1", 1)
    assert rows[0]["group_key"] == "tenant-7"
    nog = add(db, "g")
    assert get(db, nog)["group"] is None
    assert claim(db, "g", "w1", 1)[0]["group_key"] is None


def test_LIM_01_concurrency_counts_live_leases(db):
    pin(db, T0)
    setq(db, "c", concurrency=2)
    jobs = [add(db, "c", id=f"c{i}") for i in range(5)]
    first = claim(db, "c", "w1", 5)
    assert ids(first) == jobs[:2]
    assert claim(db, "c", "w2", 5) == []
    assert settle(db, "c0", 1) == 1
    assert ids(claim(db, "c", "w2", 5)) == ["c2"]
    assert claim(db, "c", "w3", 5) == []
    # any way of ending a lease frees its place: error, snooze, fail, cancel
    assert settle(db, "c1", 1, "snooze", "1h") == 1
    assert ids(claim(db, "c", "w3", 5)) == ["c3"]
    assert one(db, "SELECT tq_cancel('c2')") == 1
    assert ids(claim(db, "c", "w3", 5)) == ["c4"]


def test_LIM_01_concurrency_holds_across_connections(db, db_path):
    pin(db, T0)
    setq(db, "x", concurrency=1)
    add(db, "x", id="x1")
    add(db, "x", id="x2")
    other = connect(db_path)
    try:
        pin(other, T0)
        assert ids(claim(db, "x", "w1", 1)) == ["x1"]
        assert claim(other, "x", "w2", 1) == []
        assert settle(db, "x1", 1) == 1
        assert ids(claim(other, "x", "w2", 1)) == ["x2"]
        assert claim(db, "x", "w1", 1) == []
    finally:
        other.close()


def test_LIM_01_expired_lease_does_not_count_as_live(db):
    pin(db, T0)
    setq(db, "e", concurrency=1, lease="10s")
    add(db, "e", id="e1")
    add(db, "e", id="e2")
    rows = claim(db, "e", "w1", 2)
    assert ids(rows) == ["e1"] and rows[0]["lease_until"] == T0 + 10_000
    pin(db, T0 + 9_999)
    assert claim(db, "e", "w2", 2) == []                   # still live: the place is taken
    pin(db, T0 + 10_001)
    rows = claim(db, "e", "w2", 2)                          # expired: not live any more
    # the expired job is waiting again at its old place in line, as attempt 2
    assert [(r["id"], r["attempt"]) for r in rows] == [("e1", 2)]
    assert claim(db, "e", "w3", 2) == []


def test_LIM_01_expired_lease_frees_a_group_place(db):
    pin(db, T0)
    setq(db, "eg", group_concurrency=1, lease="10s")
    add(db, "eg", id="a1", group="a")
    add(db, "eg", id="a2", group="a")
    assert ids(claim(db, "eg", "w1", 5)) == ["a1"]
    assert settle(db, "a1", 1, "fail", "gave up") == 1
    assert ids(claim(db, "eg", "w1", 5)) == ["a2"]
    pin(db, T0 + 10_001)
    add(db, "eg", id="a3", group="a")
    assert ids(claim(db, "eg", "w1", 5)) == ["a2"]        # a2's lease ran out: attempt 2
    assert get(db, "a2")["attempt"] == 2


def test_LIM_01_rate_is_a_sliding_window_of_starts(db):
    pin(db, T0)
    setq(db, "r", rate="3/10s")
    for i in range(10):
        add(db, "r", id=f"r{i}")
    got = claim(db, "r", "w1", 10)
    assert ids(got) == ["r0", "r1", "r2"]
    for r in got:                                      # settling does not give starts back
        assert settle(db, r["id"], r["attempt"]) == 1
    pin(db, T0 + 5_000)
    assert claim(db, "r", "w1", 10) == []
    pin(db, T0 + 9_999)
    assert claim(db, "r", "w1", 10) == []
    pin(db, T0 + 10_001)
    got = claim(db, "r", "w1", 1)
    assert ids(got) == ["r3"]                           # one start at T0+10_001
    pin(db, T0 + 12_000)
    assert ids(claim(db, "r", "w1", 10)) == ["r4", "r5"]  # starts: 10_001, 12_000 x2
    # sliding, not fixed: the window (T0+12_000-10s, T0+12_000] still holds 3 starts ...
    pin(db, T0 + 20_000)
    assert claim(db, "r", "w1", 10) == []
    # ... and at T0+20_002 only the start at 10_001 has left the window: exactly one place
    pin(db, T0 + 20_002)
    assert ids(claim(db, "r", "w1", 10)) == ["r6"]
    pin(db, T0 + 22_001)
    assert ids(claim(db, "r", "w1", 10)) == ["r7", "r8"]


def test_LIM_01_rate_counts_every_start_including_a_second_attempt(db):
    pin(db, T0)
    setq(db, "rs", rate="2/10s")
    add(db, "rs", id="s1")
    add(db, "rs", id="s2")
    add(db, "rs", id="s3")
    assert ids(claim(db, "rs", "w1", 1)) == ["s1"]
    assert settle(db, "s1", 1, "snooze", 0) == 1            # back at once
    assert ids(claim(db, "rs", "w1", 5)) == ["s1"]           # second start of s1
    assert claim(db, "rs", "w1", 5) == []                    # 2 starts in the window


def test_LIM_01_group_concurrency_is_per_group(db):
    pin(db, T0)
    setq(db, "gc", group_concurrency=2)
    order = []
    for i in range(4):
        order.append(add(db, "gc", id=f"a{i}", group="a"))
    for i in range(4):
        order.append(add(db, "gc", id=f"b{i}", group="b"))
    got = claim(db, "gc", "w1", 10)
    assert ids(got) == ["a0", "a1", "b0", "b1"]
    assert claim(db, "gc", "w1", 10) == []
    assert settle(db, "b0", 1) == 1
    assert ids(claim(db, "gc", "w1", 10)) == ["b2"]


def test_LIM_01_group_rate_is_per_group(db):
    pin(db, T0)
    setq(db, "gr", group_rate="2/10s")
    for i in range(4):
        add(db, "gr", id=f"a{i}", group="a")
    for i in range(4):
        add(db, "gr", id=f"b{i}", group="b")
    got = claim(db, "gr", "w1", 10)
    assert ids(got) == ["a0", "a1", "b0", "b1"]
    for r in got:
        assert settle(db, r["id"], r["attempt"]) == 1
    pin(db, T0 + 9_000)
    assert claim(db, "gr", "w1", 10) == []
    pin(db, T0 + 10_001)
    assert ids(claim(db, "gr", "w1", 10)) == ["a2", "a3", "b2", "b3"]


def test_LIM_01_all_limits_apply_inside_one_batch(db):
    pin(db, T0)
    setq(db, "all", concurrency=3, group_concurrency=1, rate="4/10s", group_rate="5/10s")
    for jid, g in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c"), ("d1", "d"),
                   ("b2", "b"), ("e1", "e")]:
        add(db, "all", id=jid, group=g)
    got = claim(db, "all", "w1", 10)
    assert ids(got) == ["a1", "b1", "c1"]                  # concurrency 3, one per group
    assert settle(db, "a1", 1) == 1
    assert ids(claim(db, "all", "w1", 10)) == ["a2"]         # 4th start: the rate is full
    assert settle(db, "b1", 1) == 1
    assert claim(db, "all", "w1", 10) == []                  # rate 4/10s
    pin(db, T0 + 10_001)
    assert ids(claim(db, "all", "w1", 10)) == ["d1"]         # a2, c1 live + d1 = 3


def test_LIM_01_jobs_without_a_group_are_not_group_limited(db):
    pin(db, T0)
    setq(db, "ng", group_concurrency=1, group_rate="1/1h")
    for i in range(3):
        add(db, "ng", id=f"n{i}")
    add(db, "ng", id="g1", group="g")
    add(db, "ng", id="g2", group="g")
    assert ids(claim(db, "ng", "w1", 10)) == ["n0", "n1", "n2", "g1"]


def test_LIM_01_raising_a_limit_takes_effect_at_the_next_claim(db):
    pin(db, T0)
    setq(db, "ch", concurrency=1)
    for i in range(4):
        add(db, "ch", id=f"h{i}")
    assert ids(claim(db, "ch", "w1", 10)) == ["h0"]
    setq(db, "ch", concurrency=3)
    assert ids(claim(db, "ch", "w1", 10)) == ["h1", "h2"]


# =========================================================================== LIM-01 load

LOAD_LIMITS = dict(concurrency=3, group_concurrency=1, rate="10/400ms", group_rate="3/400ms")
RATE_N, RATE_W = 10, 400
GRATE_N, GRATE_W = 3, 400


def test_LIM_01_exact_limits_under_load_from_four_processes(db, db_path, tmp_path):
    """4 real worker processes claim (batches of 1-3), run 20-120 ms, settle, on one file.

    Audit 1 (tq_watch, commit order): replaying 'running' -> 'done' events in seq order,
    never more live leases than concurrency / group_concurrency; sorted by the claim
    time `at`, no window of the rate's length holds more starts than allowed.
    Audit 2 (worker logs, monotonic clock): the interval from "claim returned" to "settle
    called" lies inside each lease, so those intervals must never overlap beyond the limits.
    """
    rnd = random.Random(1234)
    settings = setq(db, "lim", **LOAD_LIMITS)
    assert settings["concurrency"] == 3 and settings["group_concurrency"] == 1
    groups = ["g0", "g1", "g2", "g3", "g4"]
    njobs = 60
    group_of = {}
    db.execute("BEGIN IMMEDIATE")
    for i in range(njobs):
        g = rnd.choice(groups)
        jid = add(db, "lim", json.dumps({"i": i}), id=f"j{i:03d}", group=g)
        group_of[jid] = g
    db.execute("COMMIT")

    stop = str(tmp_path / "stop")
    procs, logs = [], []
    started = time.monotonic()
    for w in range(4):
        log = str(tmp_path / f"load{w}.log")
        logs.append(log)
        procs.append(spawn("load", db_path, dict(
            queue="lim", stop=stop, log=log, handler_ms=[20, 120], n=[1, 3],
            name=f"w{w}", seed=w, max_s=300, busy_ms=60_000)))
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            states = [get(db, j)["state"] for j in group_of]
            if all(s == "done" for s in states):
                break
            assert all(p.poll() is None for p in procs), \
                f"a worker exited early: {[p.poll() for p in procs]}"
            time.sleep(0.1)
        elapsed = time.monotonic() - started
    finally:
        open(stop, "w").close()
        wait_all(procs)
    assert [p.returncode for p in procs] == [0, 0, 0, 0]

    # ---- every job done, exactly once, first attempt
    for j in group_of:
        job = get(db, j)
        assert (job["state"], job["attempt"], job["group"]) == ("done", 1, group_of[j]), job

    # ---- worker logs: no errors at all (busy timeout set), every settlement applied
    recs = [r for log in logs for r in read_log(log)]
    errors = [r for r in recs if r["ev"] == "err"]
    claims = [(j, r) for r in recs if r["ev"] == "claim" for j in r["jobs"]]
    settles = {(r["id"], r["attempt"]): r for r in recs if r["ev"] == "settle"}
    assert sorted(j[0] for j, _ in claims) == sorted(group_of), "each job claimed once"
    assert all(s["r"] == 1 for s in settles.values())
    assert all(len(r["jobs"]) <= r["n"] for r in recs if r["ev"] == "claim")

    # ---- audit 1: tq_watch in commit order
    events = watch_all(db, "lim")
    live, glive = set(), {}
    max_live, max_glive = 0, 0
    starts, gstarts = [], {g: [] for g in groups}
    bad = []
    for ev in events:
        jid, st = ev["id"], ev["state"]
        if st == "running":
            assert jid not in live, f"{jid} started twice without ending: {ev}"
            live.add(jid)
            g = group_of[jid]
            glive[g] = glive.get(g, 0) + 1
            starts.append(ev["at"])
            gstarts[g].append(ev["at"])
            if len(live) > LOAD_LIMITS["concurrency"] or glive[g] > LOAD_LIMITS["group_concurrency"]:
                bad.append((ev, len(live), dict(glive)))
            max_live = max(max_live, len(live))
            max_glive = max(max_glive, glive[g])
        elif st in ("done", "failed", "waiting", "scheduled", "cancelled") and jid in live:
            live.discard(jid)
            glive[group_of[jid]] -= 1
    assert bad == [], f"limits exceeded (event, live, per group): {bad[:3]}"
    running = [e for e in events if e["state"] == "running"]
    done = [e for e in events if e["state"] == "done"]
    assert sorted(e["id"] for e in running) == sorted(group_of)
    assert sorted(e["id"] for e in done) == sorted(group_of)
    assert all(e["attempt"] == 1 for e in running)
    assert all(isinstance(e["at"], int) for e in running)
    viol = window_violations(starts, RATE_N, RATE_W)
    assert viol == [], f"more than {RATE_N} starts within {RATE_W} ms: {viol[:3]}"
    for g, ts in gstarts.items():
        gv = window_violations(ts, GRATE_N, GRATE_W)
        assert gv == [], f"group {g}: more than {GRATE_N} starts within {GRATE_W} ms: {gv[:3]}"

    # ---- audit 2: worker logs, monotonic time
    inner = []
    ginner = {g: [] for g in groups}
    for (jid, attempt, gkey, _payload), rec in claims:
        s = settles[(jid, attempt)]
        assert gkey == group_of[jid]
        iv = (rec["t1"], s["t0"])
        inner.append(iv)
        ginner[gkey].append(iv)
    log_max = max_overlap(inner)
    assert log_max <= LOAD_LIMITS["concurrency"], f"{log_max} leases overlapped in time"
    for g, ivs in ginner.items():
        assert max_overlap(ivs) <= LOAD_LIMITS["group_concurrency"], g
    span = (max(starts) - min(starts)) / 1000
    print(f"\nLIM-01 load: {njobs} jobs, 4 processes, {elapsed:.2f} s; most live leases "
          f"(events) {max_live}, per group {max_glive}; (logs) {log_max}; starts span "
          f"{span:.2f} s, {len(starts) / max(span, 1e-9):.1f}/s; most starts in {RATE_W} ms "
          f"{max_in_window(starts, RATE_W)} (limit {RATE_N}), per group "
          f"{max(max_in_window(ts, GRATE_W) for ts in gstarts.values())} (limit {GRATE_N})")
    assert max_live >= 2, "the load never ran two jobs at once: the test proved nothing"
    # asserted last, so that the audits above report on the limits either way
    assert errors == [], f"{len(errors)} errors with a 60 s busy timeout set: {errors[:3]}"


# =========================================================================== LIM-02

def test_LIM_02_full_group_is_set_aside_other_groups_start_in_order(db):
    pin(db, T0)
    setq(db, "s", group_concurrency=1)
    for jid, g in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a"), ("c1", "c"),
                   ("b2", "b"), ("d1", "d")]:
        add(db, "s", id=jid, group=g)
    assert ids(claim(db, "s", "w1", 1)) == ["a1"]
    assert ids(claim(db, "s", "w1", 1)) == ["b1"]            # a2 set aside, not blocking
    assert ids(claim(db, "s", "w1", 10)) == ["c1", "d1"]     # in order, b2 set aside too
    assert claim(db, "s", "w1", 10) == []
    assert get(db, "a2")["state"] == "waiting"
    # it starts as soon as its group has room, ahead of anything added later
    add(db, "s", id="e1", group="e")
    assert settle(db, "a1", 1) == 1
    assert ids(claim(db, "s", "w1", 1)) == ["a2"]
    assert ids(claim(db, "s", "w1", 10)) == ["e1"]
    assert settle(db, "b1", 1, "error", "boom") == 1          # b1 retries later; b2 may go
    assert ids(claim(db, "s", "w1", 10)) == ["b2"]
    assert settle(db, "a2", 1) == 1
    assert ids(claim(db, "s", "w1", 10)) == ["a3"]


def test_LIM_02_set_aside_by_priority_and_by_group_rate(db):
    pin(db, T0)
    setq(db, "p", group_concurrency=1, group_rate="2/10s")
    add(db, "p", id="lo-b", group="b")
    add(db, "p", id="hi-a1", group="a", priority=10)
    add(db, "p", id="hi-a2", group="a", priority=10)
    add(db, "p", id="lo-c", group="c")
    # hi-a2 is first in line after hi-a1 but its group is full: lower priority goes
    assert ids(claim(db, "p", "w1", 10)) == ["hi-a1", "lo-b", "lo-c"]
    assert settle(db, "hi-a1", 1) == 1
    assert ids(claim(db, "p", "w1", 10)) == ["hi-a2"]         # room again: 2nd start of a
    assert settle(db, "hi-a2", 1) == 1
    add(db, "p", id="hi-a3", group="a", priority=10)
    add(db, "p", id="lo-d", group="d")
    # a has room by concurrency but its rate (2/10s) is spent: set aside again
    assert ids(claim(db, "p", "w1", 10)) == ["lo-d"]
    pin(db, T0 + 10_001)
    assert ids(claim(db, "p", "w1", 10)) == ["hi-a3"]


def test_LIM_02_clock_back_a_head_not_due_does_not_hold_back_its_group(db):
    """A group's head whose time is ahead of a clock stepped back holds back no due job of
    its group: the claim takes the due one, and the head goes first again once the clock is
    back past its time."""
    pin(db, T0)
    setq(db, "cb", group_concurrency=1)
    add(db, "cb", id="b", group="g")                                   # due at T0
    add(db, "cb", id="b2", group="g", delay="1s")                       # due at T0 + 1 s
    add(db, "cb", id="a", group="g", priority=10, delay="10s")          # due at T0 + 10 s
    add(db, "cb", id="x", priority=100)                                 # ungrouped, first
    pin(db, T0 + 20_000)
    assert ids(claim(db, "cb", "w1", 1)) == ["x"]      # this claim made `a` the group's head
    assert get(db, "a")["state"] == "waiting"
    pin(db, T0 + 5_000)                                 # the clock steps back: `a` not due
    assert ids(claim(db, "cb", "w1", 5)) == ["b"]
    assert claim(db, "cb", "w1", 5) == []               # the group is full
    assert settle(db, "b", 1) == 1
    assert ids(claim(db, "cb", "w1", 5)) == ["b2"]      # still back: the next due job
    assert settle(db, "b2", 1) == 1
    assert claim(db, "cb", "w1", 5) == []               # only `a` is left, not due yet
    pin(db, T0 + 20_000)                                # the clock is back past `a`'s time
    assert ids(claim(db, "cb", "w1", 5)) == ["a"]


def test_LIM_02_clock_back_and_forward_the_head_goes_first_again(db):
    """group_concurrency 2: while the clock is back the group's due job starts beside the
    head that is not due; forward again, the head starts next, ahead of the jobs behind it."""
    pin(db, T0)
    setq(db, "cf", group_concurrency=2)
    add(db, "cf", id="b", group="g")                                   # due at T0
    add(db, "cf", id="a", group="g", priority=10, delay="10s")          # due at T0 + 10 s
    add(db, "cf", id="c", group="g", delay="15s")                       # due at T0 + 15 s
    add(db, "cf", id="x", priority=100)
    pin(db, T0 + 20_000)
    assert ids(claim(db, "cf", "w1", 1)) == ["x"]      # `a` is the head
    pin(db, T0 + 5_000)
    assert ids(claim(db, "cf", "w1", 1)) == ["b"]
    assert claim(db, "cf", "w1", 5) == []               # `a` and `c` are not due
    pin(db, T0 + 20_000)
    assert ids(claim(db, "cf", "w1", 5)) == ["a"]       # the group's second place: `a`, not `c`
    assert settle(db, "b", 1) == 1
    assert ids(claim(db, "cf", "w1", 5)) == ["c"]


def test_LIM_02_clock_back_a_group_with_no_due_job_starts_when_one_comes_due(db):
    """A group whose remaining jobs are all ahead of a clock stepped back starts them once
    the clock is past their time, with no other change to the group."""
    pin(db, T0)
    setq(db, "cn", group_concurrency=1)
    add(db, "cn", id="h", group="g", priority=10)                       # due at T0
    add(db, "cn", id="p", group="g", delay="10s")                       # due at T0 + 10 s
    pin(db, T0 + 20_000)
    assert ids(claim(db, "cn", "w1", 1)) == ["h"]
    pin(db, T0 + 5_000)                                 # `p` is not due
    assert settle(db, "h", 1) == 1
    assert claim(db, "cn", "w1", 5) == []
    pin(db, T0 + 20_000)
    assert ids(claim(db, "cn", "w1", 5)) == ["p"]


def test_LIM_02_claim_time_with_10000_groups_one_full(db):
    """The work of a claim past a full group, counted in VM steps (tq_statements, the store's
    own counters), not timed: a claim(1) takes fewer steps than there are set-aside jobs (it
    does not look at each), and a claim(1000) no more than a thousand claims of one."""
    pin(db, T0)
    setq(db, "big", group_concurrency=1)
    hot, cold = 2_000, 10_000
    db.execute("BEGIN IMMEDIATE")
    for i in range(hot):                       # a full group with a long line at the front
        add(db, "big", id=f"hot:{i:05d}", group="hot")
    for i in range(cold):                      # then 10,000 other groups, one job each
        add(db, "big", id=f"g:{i:05d}", group=f"g{i:05d}")
    db.execute("COMMIT")
    assert ids(claim(db, "big", "w1", 1)) == ["hot:00000"]    # now the hot group is full

    def counted(n):
        before = one(db, "SELECT total(vm_steps) FROM tq_statements")
        rows = claim(db, "big", "w1", n)
        return one(db, "SELECT total(vm_steps) FROM tq_statements") - before, rows

    steps = []
    for i in range(30):
        took, rows = counted(1)
        steps.append(took)
        assert ids(rows) == [f"g:{i:05d}"]
    batch_steps, batch = counted(1000)
    assert ids(batch) == [f"g:{i:05d}" for i in range(30, 1030)]
    # the set-aside job starts as soon as its group has room, ahead of 8,970 others
    assert settle(db, "hot:00000", 1) == 1
    room_steps, rows = counted(1)
    assert ids(rows) == ["hot:00001"]
    print(f"\nLIM-02: claim(1) past a full group with {hot} set-aside jobs among {cold + 1} groups: "
          f"most {max(steps):.0f} VM steps; claim(1000) {batch_steps:.0f}; "
          f"claim when the group has room {room_steps:.0f}")
    assert max(steps) < hot and room_steps < hot, (steps, room_steps)
    assert batch_steps <= 1000 * max(steps), (batch_steps, steps)


# =========================================================================== busy handling

def assert_busy(excinfo_value, fn_name):
    e = excinfo_value
    assert isinstance(e, sqlite3.OperationalError), (fn_name, type(e), e)
    assert "database is locked" in str(e), (fn_name, str(e))
    code = getattr(e, "sqlite_errorcode", None)
    assert code is not None and code & 0xFF == sqlite3.SQLITE_BUSY, (fn_name, code, str(e))


def test_busy_without_timeout_every_writer_raises_database_is_locked(db, db_path):
    pin(db, T0)
    add(db, "b", id="j1")
    add(db, "b", id="j2")
    add(db, "b", id="j3", attempts=1)
    assert ids(claim(db, "b", "w1", 1)) == ["j1"]
    assert ids(claim(db, "b", "w1", 1)) == ["j2"]
    assert settle(db, "j2", 1, "fail", "bad") == 1
    assert ids(claim(db, "b", "w1", 1)) == ["j3"]
    add(db, "b", id="j4")
    # j1 running (attempt 1), j2 failed, j3 running, j4 waiting
    nb = connect(db_path, busy_ms=0)
    holder = connect(db_path)
    try:
        pin(nb, T0 + 1_000)
        before = snapshot(db)
        holder.execute("BEGIN IMMEDIATE")           # another connection holds the write lock
        calls = [
            ("tq_add", "SELECT tq_add('b', '{}')"),
            ("tq_add", "SELECT tq_add('b', '{}', '{\"id\": \"new\"}')"),
            ("tq_claim", "SELECT * FROM tq_claim('b', 'w2', 5)"),
            ("tq_renew", "SELECT tq_renew('j1', 1)"),
            ("tq_settle", "SELECT tq_settle('j1', 1, 'done')"),
            ("tq_settle", "SELECT tq_settle('j3', 1, 'error', 'x')"),
            ("tq_step_put", "SELECT tq_step_put('j1', 1, 's', 'v')"),
            ("tq_progress", "SELECT tq_progress('j1', 1, '50')"),
            ("tq_cancel", "SELECT tq_cancel('j4')"),
            ("tq_retry", "SELECT tq_retry('j2')"),
            ("tq_queue", "SELECT tq_queue('b', '{\"concurrency\": 5}')"),
        ]
        wrong = []
        for name, sql in calls:
            try:
                rows = nb.execute(sql).fetchall()
            except sqlite3.Error as e:
                try:
                    assert_busy(e, name)
                except AssertionError as a:
                    wrong.append(f"{name}: {a}")
            else:
                wrong.append(f"{name}: returned {rows} instead of SQLITE_BUSY")
        holder.execute("ROLLBACK")
        assert wrong == [], "\n".join(wrong)
        assert snapshot(db) == before, "a call that failed with SQLITE_BUSY changed the store"
        # once the lock is free, the same calls work and see the store as it was
        assert one(nb, "SELECT tq_renew('j1', 1)") is not None
        assert one(nb, "SELECT tq_step_put('j1', 1, 's', 'v')") == "v"
        assert one(nb, "SELECT tq_settle('j1', 1, 'done')") == 1
        assert one(nb, "SELECT tq_retry('j2')") == 1
        assert one(nb, "SELECT tq_cancel('j4')") == 1
    finally:
        nb.close()
        holder.close()


WAIT_CALLS = {
    "tq_add": "SELECT tq_add('bt', '{}', '{\"id\": \"k9\"}')",
    "tq_claim": "SELECT id FROM tq_claim('bt', 'w9', 5)",
    "tq_renew": "SELECT tq_renew('k1', 1)",
    "tq_settle": "SELECT tq_settle('k1', 1, 'done')",
    "tq_step_put": "SELECT tq_step_put('k1', 1, 's', 'v')",
    "tq_progress": "SELECT tq_progress('k1', 1, '7')",
    "tq_cancel": "SELECT tq_cancel('k2')",
    "tq_queue": "SELECT tq_queue('bt', '{\"concurrency\": 9}')",
}
WAIT_RESULTS = {"tq_claim": ["k2"], "tq_settle": 1, "tq_step_put": "v", "tq_progress": 1,
                "tq_cancel": 1}


@pytest.mark.parametrize("fn", sorted(WAIT_CALLS))
def test_busy_timeout_waits_out_a_short_lock(db, db_path, fn):
    """With a busy timeout, a call that meets a write lock held 0.4 s or more by another connection
    waits for it (the connection's busy handler) and then succeeds."""
    add(db, "bt", id="k1")
    add(db, "bt", id="k2")
    assert ids(claim(db, "bt", "w1", 1)) == ["k1"]
    holder = connect(db_path)
    result, calling = {}, threading.Event()

    def caller():
        c = connect(db_path, busy_ms=60_000)
        try:
            calling.set()
            try:
                rows = c.execute(WAIT_CALLS[fn]).fetchall()
                result["value"] = [r[0] for r in rows] if fn == "tq_claim" else rows[0][0]
            except Exception as e:  # reported below
                result["err"] = e
            result["returned"] = time.monotonic()
        finally:
            c.close()

    try:
        holder.execute("BEGIN IMMEDIATE")
        th = threading.Thread(target=caller)
        th.start()
        assert calling.wait(60)
        time.sleep(0.4)                          # the call meets the lock, most likely by now
        released = time.monotonic()
        holder.execute("COMMIT")
        th.join(120)
        assert not th.is_alive()
        assert "err" not in result, \
            f"{fn} with a 60 s busy timeout, lock held 0.4 s or more: {result.get('err')!r}"
        if fn in WAIT_RESULTS:
            assert result["value"] == WAIT_RESULTS[fn]
        else:
            assert result["value"] is not None
        assert result["returned"] >= released, "it cannot have written while the lock was held"
    finally:
        holder.close()


def test_busy_without_timeout_under_load_errors_are_busy_and_results_right(db, db_path, tmp_path):
    """4 processes with busy_ms=0 add, claim and settle on one file. Every error is
    SQLITE_BUSY 'database is locked'; a failed call changed nothing (a failed claim leased
    nothing, a failed add added nothing, a failed settle settled nothing): every job ends
    done on attempt 1, each added payload exists once, and retried settlements apply."""
    setq(db, "bz", lease="1h")
    njobs = 40
    db.execute("BEGIN IMMEDIATE")
    pre = [add(db, "bz", f"pre:{i}", id=f"p{i:03d}") for i in range(njobs)]
    db.execute("COMMIT")
    adds_each = 5
    stop = str(tmp_path / "stop")
    logs = [str(tmp_path / f"bz{w}.log") for w in range(4)]
    procs = [spawn("load", db_path, dict(queue="bz", stop=stop, log=logs[w], handler_ms=[0, 4],
                                         n=[1, 2], name=f"b{w}", seed=100 + w, busy_ms=0,
                                         adds=adds_each, max_s=300))
             for w in range(4)]
    started = time.monotonic()
    try:
        last_progress, last_done = time.monotonic(), -1
        while time.monotonic() - started < 240:
            recs = [r for log in logs for r in read_log(log)]
            added = [r["id"] for r in recs if r["ev"] == "add"]
            everyone = pre + added
            ndone = sum(1 for j in everyone if get(db, j)["state"] == "done")
            if len(added) == 4 * adds_each and ndone == len(everyone):
                break
            if ndone != last_done:
                last_progress, last_done = time.monotonic(), ndone
            assert time.monotonic() - last_progress < 60, f"no progress: {ndone} done"
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.1)
        elapsed = time.monotonic() - started
    finally:
        open(stop, "w").close()
        wait_all(procs)
    recs = [r for log in logs for r in read_log(log)]
    errs = [r for r in recs if r["ev"] == "err"]
    not_busy = [r for r in errs if not (r["type"] == "OperationalError"
                                        and "database is locked" in r["msg"]
                                        and r["code"] is not None and r["code"] & 0xFF == 5)]
    assert not_busy == [], f"errors other than SQLITE_BUSY: {not_busy[:5]}"
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    added = [r for r in recs if r["ev"] == "add"]
    assert len(added) == 4 * adds_each
    everyone = pre + [r["id"] for r in added]
    assert len(set(everyone)) == len(everyone)
    # nothing left: no duplicate job from an add that failed but committed
    leftover = claim(db, "bz", "final", 1000)
    assert leftover == [], f"jobs no one asked for: {leftover[:5]}"
    for j in everyone:
        job = get(db, j)
        assert (job["state"], job["attempt"]) == ("done", 1), job
    claimed = [tuple(j[:2]) for r in recs if r["ev"] == "claim" for j in r["jobs"]]
    assert sorted(c[0] for c in claimed) == sorted(everyone), "each job claimed exactly once"
    payloads = [j[3] for r in recs if r["ev"] == "claim" for j in r["jobs"]]
    assert len(payloads) == len(set(payloads))
    settles = [r for r in recs if r["ev"] == "settle"]
    assert len(settles) == len(everyone) and all(s["r"] == 1 for s in settles)
    by_op = {}
    for r in errs:
        by_op[r["op"]] = by_op.get(r["op"], 0) + 1
    print(f"\nbusy_ms=0 load: {len(everyone)} jobs, 4 processes, {elapsed:.2f} s; "
          f"SQLITE_BUSY errors by call: {by_op or 'none'}")
