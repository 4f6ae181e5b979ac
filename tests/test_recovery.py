"""Dead-process recovery (DUR-02), attempt timeouts, a crash test, and tq_wait wake-ups.

- DUR-02: when the process that held leases dies, the next process to use the store ends
  those leases at once (not when the 30 s lease runs out); a LIVE process keeps its leases.
  Processes are real (tests/support/proc_worker.py) and killed with SIGKILL, then reaped.
- Timeouts: the queue's `timeout` bounds one attempt, renewals included (clock pinned).
- Crash test: workers SIGKILLed at random moments while others keep working; every job is
  done exactly once as far as its effects table shows, none lost.
- tq_wait: wakes soon after another process commits, returns 0 after its timeout, returns
  when a scheduled job becomes due, and idles cheaply.
"""
import json
import os
import random
import signal
import statistics
import subprocess
import time

import pytest

from helpers import T0, add, claim, connect, get, ids, one, pin, renew, run_python, setq, settle, watch_all
from support.proc_worker import Holder, spawn, wait_all


CLAIM_IN_NEW_PROCESS = r"""
import json, sys, time
from support.proc_worker import connect, claim
conn = connect(sys.argv[1])
t = time.monotonic()
rows = claim(conn, sys.argv[2], "fresh", int(sys.argv[3]))
print(json.dumps({"rows": rows, "s": time.monotonic() - t}))
"""


def claim_in_new_process(db_path, queue, n):
    """Claim from a brand-new process that then exits (holding what it claimed)."""
    proc = run_python(CLAIM_IN_NEW_PROCESS, db_path, queue, str(n))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# =========================================================================== DUR-02

def test_DUR_02_killed_process_leases_end_at_once_live_process_keeps_its_own(db, db_path):
    setq(db, "d", lease="1h", concurrency=3)      # a lease that cannot run out during the test
    for i in range(1, 7):
        add(db, "d", id=f"d{i}")
    live = Holder(db_path, "d", n=1)
    doomed = Holder(db_path, "d", n=2)
    try:
        assert ids(live.rows) == ["d1"]
        assert ids(doomed.rows) == ["d2", "d3"]
        assert get(db, "d2")["state"] == "running"
        doomed.kill()                              # SIGKILL, reaped
        t = time.monotonic()
        got = claim_in_new_process(db_path, "d", 10)
        elapsed = time.monotonic() - t
        # concurrency 3: the live lease counts, the dead ones do not; the dead process's
        # jobs are waiting again at their old places in line, as attempt 2 (the lease is
        # 1 h: this is recovery, not expiry)
        assert [(r["id"], r["attempt"]) for r in got["rows"]] == [("d2", 2), ("d3", 2)], got
        print(f"\nDUR-02: claim after SIGKILL got the dead leases in {elapsed * 1000:.0f} ms "
              f"(process start included; claim itself {got['s'] * 1000:.1f} ms)")
        # the killed attempt is fenced
        assert settle(db, "d2", 1) == 0
        # the live process's lease is never ended, however many processes come and go
        for _ in range(4):
            again = claim_in_new_process(db_path, "d", 10)
            assert "d1" not in ids(again["rows"]), again
            job = get(db, "d1")
            assert (job["state"], job["attempt"]) == ("running", 1), job
        assert get(db, "d1")["worker"] == f"hold-{live.pid}"
        assert live.sql("SELECT tq_renew('d1', 1)") is not None
        assert live.sql("SELECT tq_settle('d1', 1, 'done')") == 1
        assert get(db, "d1")["state"] == "done"
    finally:
        live.close()
        doomed.close()


def test_DUR_02_long_running_worker_gets_a_dead_peers_jobs_at_its_next_claim(db, db_path):
    """The next claim from a connection that was already working (not a fresh open) ends
    the dead process's leases too: a pool of long-lived workers, one dies, the others take
    its jobs at once. The peer claims just before the kill (finding nothing), so its next
    claim is moments after its previous one."""
    setq(db, "p", lease="1h")
    for i in range(1, 4):
        add(db, "p", id=f"p{i}")
    peer = Holder(db_path, "p", n=1)            # a live worker, connected before the death
    doomed = Holder(db_path, "p", n=2)
    try:
        assert ids(doomed.rows) == ["p2", "p3"]
        res = peer.cmd(sql="SELECT id, attempt FROM tq_claim('p', 'peer', 10)")
        assert res.get("rows") == [], res      # all held: nothing for the peer yet
        doomed.kill()
        res = peer.cmd(sql="SELECT id, attempt FROM tq_claim('p', 'peer', 10)")
        assert res.get("rows") == [["p2", 2], ["p3", 2]], res
        # and this (test) process's long-open connection sees the same store
        assert get(db, "p2")["attempt"] == 2 and get(db, "p1")["attempt"] == 1
    finally:
        peer.close()
        doomed.close()


def test_DUR_02_a_process_that_exits_without_settling_is_dead_too(db, db_path):
    setq(db, "x", lease="1h")
    add(db, "x", id="x1")
    add(db, "x", id="x2")
    first = claim_in_new_process(db_path, "x", 2)           # claims, then exits normally
    assert ids(first["rows"]) == ["x1", "x2"]
    rows = claim(db, "x", "w-test", 10)                        # this process is long-lived
    assert [(r["id"], r["attempt"]) for r in rows] == [("x1", 2), ("x2", 2)]


def test_DUR_02_live_process_with_its_claiming_connection_closed_keeps_its_leases(db, db_path):
    """Leases belong to the process, not to the connection: a live worker that claimed on
    one connection, closed it, and settles later on another still holds its jobs."""
    setq(db, "k", lease="1h")
    for i in range(1, 4):
        add(db, "k", id=f"k{i}")
    live = Holder(db_path, "k", n=2, close_after_claim=True)
    try:
        assert ids(live.rows) == ["k1", "k2"]
        assert live.alive()
        got = claim_in_new_process(db_path, "k", 10)
        assert ids(got["rows"]) == ["k3"], got
        assert [get(db, j)["attempt"] for j in ("k1", "k2")] == [1, 1]
        assert get(db, "k1")["state"] == "running"
        rows = claim(db, "k", "w-test", 10)
        assert "k1" not in ids(rows) and "k2" not in ids(rows)
        # the live process opens a new connection and settles: its attempt still counts
        assert live.sql("SELECT tq_settle('k1', 1, 'done')") == 1
        assert live.sql("SELECT tq_settle('k2', 1, 'done')") == 1
    finally:
        live.close()


def test_DUR_02_other_connections_of_a_live_process_do_not_end_its_leases(db, db_path):
    setq(db, "m", lease="1h")
    for i in range(1, 4):
        add(db, "m", id=f"m{i}")
    first = connect(db_path)
    assert ids(claim(first, "m", "conn-1", 1)) == ["m1"]
    first.close()                                   # this process lives on
    second = connect(db_path)
    try:
        assert ids(claim(second, "m", "conn-2", 1)) == ["m2"]
        got = claim_in_new_process(db_path, "m", 10)  # another process: m3 only
        assert ids(got["rows"]) == ["m3"], got
        assert (get(db, "m1")["state"], get(db, "m1")["attempt"]) == ("running", 1)
        assert settle(second, "m1", 1) == 1
    finally:
        second.close()


def test_DUR_02_dead_workers_use_up_the_budget_and_the_job_fails_saying_so(db, db_path):
    """JOB-03 through DUR-02: a job whose process dies every time reaches its budget."""
    setq(db, "bud", lease="1h")
    add(db, "bud", id="b1", attempts=2)
    h1 = Holder(db_path, "bud", n=1)
    try:
        assert [(r["id"], r["attempt"]) for r in h1.rows] == [("b1", 1)]
        h1.kill()
    finally:
        h1.close()
    h2 = Holder(db_path, "bud", n=1)
    try:
        assert [(r["id"], r["attempt"]) for r in h2.rows] == [("b1", 2)]
        h2.kill()
    finally:
        h2.close()
    assert claim(db, "bud", "w-test", 10) == []
    job = get(db, "b1")
    assert job["state"] == "failed", job
    assert job["attempt"] == 2
    assert "ran out" in (job["error"] or ""), job["error"]


# =========================================================================== timeouts

def test_timeout_bounds_an_attempt_renewals_included_then_retries_as_error(db):
    pin(db, T0)
    setq(db, "t", timeout="10s", lease="4s")
    add(db, "t", id="t1")
    rows = claim(db, "t", "w1", 1)
    assert rows[0]["deadline"] == T0 + 10_000
    assert rows[0]["lease_until"] == T0 + 4_000
    pin(db, T0 + 3_000)
    assert renew(db, "t1", 1) == T0 + 7_000
    pin(db, T0 + 6_000)
    assert renew(db, "t1", 1) == T0 + 10_000               # never past the deadline
    pin(db, T0 + 9_000)
    assert renew(db, "t1", 1) == T0 + 10_000
    assert renew(db, "t1", 1, "1h") == T0 + 10_000
    assert get(db, "t1")["lease_until"] == T0 + 10_000
    pin(db, T0 + 10_001)
    assert renew(db, "t1", 1) is None                       # past the timeout: stop working
    assert renew(db, "t1", 1, "1h") is None
    assert claim(db, "t", "w2", 1) == []                    # ended as an error, backing off
    job = get(db, "t1")
    assert job["state"] in ("scheduled", "waiting") and job["attempt"] == 1, job
    assert "timeout" in (job["error"] or ""), job
    assert settle(db, "t1", 1) == 0                         # the attempt is over
    assert renew(db, "t1", 1) is None
    # backoff after the 1st charged attempt: 1 s +-10%
    pin(db, T0 + 10_001 + 850)
    assert claim(db, "t", "w2", 1) == []
    pin(db, T0 + 10_001 + 1_150)
    rows = claim(db, "t", "w2", 1)
    assert [(r["id"], r["attempt"]) for r in rows] == [("t1", 2)]
    assert rows[0]["deadline"] == T0 + 11_151 + 10_000
    assert settle(db, "t1", 2) == 1


def test_timeout_caps_a_lease_longer_than_itself(db):
    pin(db, T0)
    setq(db, "tl", timeout="5s", lease="1h")
    add(db, "tl", id="l1")
    rows = claim(db, "tl", "w1", 1)
    assert (rows[0]["lease_until"], rows[0]["deadline"]) == (T0 + 5_000, T0 + 5_000)
    pin(db, T0 + 4_000)
    assert renew(db, "l1", 1) == T0 + 5_000
    pin(db, T0 + 5_001)
    assert renew(db, "l1", 1) is None


def test_timeout_with_no_attempts_left_fails_for_good(db):
    pin(db, T0)
    setq(db, "tf", timeout="2s")
    add(db, "tf", id="f1", attempts=1)
    add(db, "tf", id="f2", attempts=2)
    assert ids(claim(db, "tf", "w1", 2)) == ["f1", "f2"]
    pin(db, T0 + 2_001)
    assert claim(db, "tf", "w1", 2) == []
    f1 = get(db, "f1")
    assert f1["state"] == "failed" and "timeout" in (f1["error"] or ""), f1
    f2 = get(db, "f2")
    assert f2["state"] in ("scheduled", "waiting") and "timeout" in (f2["error"] or ""), f2
    pin(db, T0 + 2_001 + 1_200)
    rows = claim(db, "tf", "w1", 2)
    assert [(r["id"], r["attempt"]) for r in rows] == [("f2", 2)]
    pin(db, T0 + 2_001 + 1_200 + 2_001)
    assert renew(db, "f2", 2) is None
    assert claim(db, "tf", "w1", 2) == []
    f2 = get(db, "f2")
    assert f2["state"] == "failed" and "timeout" in (f2["error"] or ""), f2


def test_timeout_is_noticed_by_a_claim_from_another_connection(db, db_path):
    pin(db, T0)
    setq(db, "to", timeout="3s")
    add(db, "to", id="o1")
    assert ids(claim(db, "to", "w1", 1)) == ["o1"]
    other = connect(db_path)
    try:
        pin(other, T0 + 3_001)
        assert claim(other, "to", "w2", 1) == []
        assert "timeout" in (get(other, "o1")["error"] or "")
        pin(other, T0 + 3_001 + 1_200)
        assert [(r["id"], r["attempt"]) for r in claim(other, "to", "w2", 1)] == [("o1", 2)]
        pin(db, T0 + 3_002)
        assert settle(db, "o1", 1) == 0
    finally:
        other.close()


# =========================================================================== crash test

def result_pid(job):
    res = job["result"]
    if isinstance(res, str):
        res = json.loads(res)
    return res["pid"]


def test_crash_random_sigkills_every_job_done_exactly_once(db, db_path, tmp_path):
    """Workers SIGKILL themselves at random points (before a step, inside a step's
    transaction, after a step, after the handler before settling, after settling) and the
    test SIGKILLs random workers from outside, while the others keep working. Each step's
    effect is written in the same transaction as tq_step_put, so a later attempt that gets
    the step back does not do it again."""
    rnd = random.Random(7)
    queue, njobs = "crash", 80
    db.execute("CREATE TABLE effects(key TEXT, job TEXT, step TEXT, attempt INT, pid INT, "
               "value TEXT)")
    db.execute("BEGIN IMMEDIATE")
    jobs = [add(db, queue, json.dumps({"i": i}), id=f"job:{i:03d}") for i in range(njobs)]
    db.execute("COMMIT")
    stop, nokill = str(tmp_path / "stop"), str(tmp_path / "nokill")
    procs = {}                  # pid -> (Popen, log path, stderr path)
    killed_self, killed_ext = set(), set()
    bad_exit = []
    spawned = 0

    def start():
        nonlocal spawned
        spawned += 1
        log = str(tmp_path / f"crash{spawned:03d}.log")
        err = open(str(tmp_path / f"crash{spawned:03d}.err"), "w")
        p = spawn("crash", db_path, dict(queue=queue, stop=stop, nokill=nokill, log=log,
                                         p_kill=0.04, n=2, step_ms=[10, 40],
                                         seed=rnd.randrange(1 << 30), max_s=300),
                  stderr=err)
        err.close()
        procs[p.pid] = (p, log, err.name)

    def reap():
        for pid, (p, log, err) in list(procs.items()):
            rc = None if p is None else p.poll()
            if rc is None:
                continue
            if rc == -signal.SIGKILL:
                if pid not in killed_ext:
                    killed_self.add(pid)
            elif rc != 0:
                bad_exit.append((pid, rc, open(err).read()[-2000:]))
            procs[pid] = (None, log, err)

    def alive():
        return [p for p, _, _ in procs.values() if p is not None and p.poll() is None]

    for _ in range(4):
        start()
    started = time.monotonic()
    next_kill = started + rnd.uniform(0.15, 0.4)
    kill_phase = True
    last_check = 0
    all_done = False
    try:
        while time.monotonic() - started < 300:
            reap()
            assert bad_exit == [], f"a worker failed: {bad_exit}"
            now = time.monotonic()
            if kill_phase and (len(killed_self) + len(killed_ext) >= 30 or now - started > 10):
                open(nokill, "w").close()
                kill_phase = False
            if kill_phase and now >= next_kill and alive():
                victim = rnd.choice(alive())
                killed_ext.add(victim.pid)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                next_kill = now + rnd.uniform(0.15, 0.4)
                reap()
            while len(alive()) < 4:
                start()
            if now - last_check > 0.2:
                last_check = now
                if all(get(db, j)["state"] == "done" for j in jobs):
                    all_done = True
                    break
            time.sleep(0.02)
        elapsed = time.monotonic() - started
    finally:
        open(stop, "w").close()
        open(nokill, "w").close()
        wait_all(alive())
        reap()
    killed = killed_self | killed_ext
    assert bad_exit == [], f"a worker failed: {bad_exit}"
    states = {j: get(db, j) for j in jobs}
    assert all_done, f"not all done in time: " \
        f"{[(j, s['state'], s['attempt']) for j, s in states.items() if s['state'] != 'done'][:10]}"

    recs = []
    for _, log, _ in procs.values():
        if os.path.exists(log):
            with open(log) as f:
                for line in f:
                    if line.endswith("\n"):         # a SIGKILL cannot tear a write, but be safe
                        recs.append(json.loads(line))
    suicides = [r for r in recs if r["ev"] == "suicide"]
    assert killed_self <= {r["pid"] for r in suicides} <= killed
    points = {}
    for r in suicides:
        points[r["point"]] = points.get(r["point"], 0) + 1

    # ---- effects: each step of each job done exactly once, and its answer kept
    eff = {}
    for key, job, step, attempt, pid, value in db.execute(
            "SELECT key, job, step, attempt, pid, value FROM effects"):
        eff.setdefault(key, []).append((job, step, attempt, pid, value))
    dup = {k: v for k, v in eff.items() if len(v) != 1}
    assert dup == {}, f"effects done more than once: {list(dup.items())[:5]}"
    for j in jobs:
        for step in ("a", "b"):
            rows = eff.get(f"{j}/{step}")
            assert rows, f"{j}: step {step} never done"
            assert one(db, "SELECT tq_step_get(?, ?)", j, step) == rows[0][4]
            assert rows[0][2] <= states[j]["attempt"]

    # ---- attempts consistent with the kills
    events = watch_all(db, queue)
    running = {}
    for e in events:
        assert e["state"] not in ("failed", "cancelled"), e
        if e["state"] == "running":
            running.setdefault(e["id"], []).append(e["attempt"])
    claims = {}
    for r in recs:
        if r["ev"] == "claim":
            for jid, att in r["jobs"]:
                assert (jid, att) not in claims, f"attempt {att} of {jid} claimed twice"
                claims[(jid, att)] = r["pid"]
    settled = {(r["id"], r["attempt"]): r for r in recs if r["ev"] == "settle"}
    assert all(s["r"] == 1 for s in settled.values()), \
        [s for s in settled.values() if s["r"] != 1][:5]
    unlogged, extra = 0, 0
    for j in jobs:
        final = states[j]["attempt"]
        assert running.get(j) == list(range(1, final + 1)), (j, running.get(j), final)
        extra += final - 1
        for k in range(1, final):
            pid = claims.get((j, k))
            if pid is None:
                unlogged += 1             # claimed by a process killed before it could log
                continue
            assert pid in killed, f"{j} attempt {k} ended, yet its process {pid} lived"
            assert (j, k) not in settled, f"{j} attempt {k} settled, yet ran again"
        pid = claims.get((j, final))
        if pid is not None:
            assert (j, final) in settled or pid in killed, (j, final, pid)
            assert result_pid(states[j]) == pid, (j, states[j], pid)
        else:
            unlogged += 1
    assert unlogged <= 2 * len(killed), (unlogged, len(killed))
    assert extra <= 2 * len(killed), (extra, len(killed))   # a worker holds at most 2 jobs
    # every attempt a killed process held and did not settle was followed by another one
    # (or it did settle, and was killed before it could log that)
    for (j, k), pid in claims.items():
        if pid in killed and (j, k) not in settled:
            assert states[j]["attempt"] > k or result_pid(states[j]) == pid, (j, k, pid)
    busy = [r for r in recs if r["ev"] == "busy"]
    print(f"\ncrash test: {njobs} jobs done in {elapsed:.2f} s by {spawned} processes; "
          f"{len(killed_self)} self-kills {points}, {len(killed_ext)} external kills; "
          f"{extra} extra attempts ({unlogged} claimed but not logged), most attempts on one job "
          f"{max(s['attempt'] for s in states.values())}; SQLITE_BUSY met (busy timeout "
          f"10 s, retried): {len(busy)}")
    assert len(killed) >= 3, "too few kills to prove anything"


# =========================================================================== tq_wait
# The waits below are given a minute; one that returns in less than half of it woke for what
# it waits for, not for its timeout (however slow a loaded machine is, it is not that slow).
LONG_WAIT, WELL_BEFORE = "60s", 30

def test_wait_wakes_soon_after_another_process_commits_an_add(db, db_path):
    rounds = 50
    add(db, "other", id="o0")                     # the store exists before the waiter starts
    waiter = spawn("waiter", db_path, dict(queue="wq", rounds=rounds, timeout=LONG_WAIT, max_s=600),
                   stdout=subprocess.PIPE)
    adder = connect(db_path, busy_ms=0)           # the waiter holds no lock while it waits
    rnd = random.Random(3)
    delays, waited, busy = [], [], []
    try:
        for i in range(rounds):
            line = json.loads(waiter.stdout.readline() or '{"eof": true}')
            assert line.get("ready") == i, line
            time.sleep(rnd.uniform(0.02, 0.06))   # let it block in tq_wait
            jid = add(adder, "wq", "{}", id=f"w{i:03d}")
            tc = time.monotonic()
            res = json.loads(waiter.stdout.readline() or '{"eof": true}')
            assert res.get("round") == i, res
            assert res["r"] == 1 and res["claimed"] == [jid], res
            assert res["waited"] < WELL_BEFORE, res
            delays.append(max(0.0, res["t"] - tc))
            waited.append(res["waited"])
            busy.extend(res["busy"])
    finally:
        adder.close()
        waiter.wait(timeout=120)
    med = statistics.median(delays)
    p99 = statistics.quantiles(delays, n=100, method="inclusive")[98]
    print(f"\ntq_wait wake-up after another process's commit, {rounds} rounds: "
          f"median {med * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {max(delays) * 1000:.1f} ms; claims right after waking that met SQLITE_BUSY "
          f"(retried, busy timeout 5 s): {len(busy)}")


def test_wait_returns_0_after_its_timeout_when_nothing_happens(db):
    add(db, "other", id="o0")
    for timeout, secs in (("300ms", 0.3), (250, 0.25)):
        t = time.monotonic()
        r = one(db, "SELECT tq_wait('quiet', ?)", timeout)
        elapsed = time.monotonic() - t
        assert r == 0
        assert secs - 0.01 <= elapsed < secs + WELL_BEFORE, elapsed


def test_wait_returns_at_once_when_a_job_is_already_due(db):
    add(db, "due-now", id="n1")
    t = time.monotonic()
    assert one(db, "SELECT tq_wait('due-now', ?)", LONG_WAIT) == 1
    assert time.monotonic() - t < WELL_BEFORE
    assert ids(claim(db, "due-now", "w1", 1)) == ["n1"]


@pytest.mark.parametrize("limit", [{"rate": "2/10s"}, {"group_rate": "2/10s"}])
def test_wait_returns_at_once_when_a_start_has_left_the_rate_window(db, limit):
    """The counters are brought to the clock by claims; tq_wait must see a start that left
    the window since the last claim, not wait for the next start to leave it too."""
    setq(db, "rated", **limit)
    for i in range(3):
        add(db, "rated", id=f"r{i}", group="g")
    pin(db, T0)
    assert len(claim(db, "rated", "w", 1)) == 1
    pin(db, T0 + 9_000)
    assert len(claim(db, "rated", "w", 1)) == 1
    pin(db, T0 + 9_999)
    assert claim(db, "rated", "w", 1) == []      # two starts in the last 10 s
    pin(db, T0 + 10_001)                         # the first has left the window (the second
                                                 # leaves in 9 s of a pinned clock: never)
    t = time.monotonic()
    assert one(db, "SELECT tq_wait('rated', ?)", LONG_WAIT) == 1
    assert time.monotonic() - t < WELL_BEFORE
    assert len(claim(db, "rated", "w", 1)) == 1


def test_wait_returns_when_a_scheduled_job_becomes_due(db, db_path):
    jid = add(db, "later", id="s1", delay="800ms")
    run_at = get(db, jid)["run_at"]
    w = spawn("due", db_path, dict(queue="later", timeout=LONG_WAIT, single=True),
              stdout=subprocess.PIPE)
    try:
        assert json.loads(w.stdout.readline()) == {"ready": True}
        res = json.loads(w.stdout.readline())
    finally:
        w.wait(timeout=60)
    (first,) = res["results"]
    assert first["r"] == 1, res
    assert first["now"] >= run_at, ("returned before the job was due", first, run_at)
    assert first["claimed"] == [jid], res
    assert first["waited"] < WELL_BEFORE, res       # far from its timeout


def test_wait_worker_loop_gets_a_job_scheduled_while_it_waits(db, db_path):
    """A worker waiting in tq_wait when another process adds a job due in 0.7 s: however
    often it wakes, it gets the job once due, not at its timeout."""
    add(db, "other", id="o0")
    w = spawn("due", db_path, dict(queue="soon", timeout=LONG_WAIT, max_s=120),
              stdout=subprocess.PIPE)
    try:
        assert json.loads(w.stdout.readline()) == {"ready": True}
        time.sleep(0.2)
        t_add = time.monotonic()
        add(db, "soon", id="s1", delay="700ms")
        res = json.loads(w.stdout.readline())
    finally:
        w.wait(timeout=60)
    got_at = res["end"] - t_add
    assert res["results"][-1]["claimed"] == ["s1"], res
    assert got_at >= 0.69, ("claimed before it was due", got_at)
    assert got_at < WELL_BEFORE, (f"got it {got_at:.2f} s after the add", res)
    assert len(res["results"]) <= 10, res          # woke a few times at most, no spinning


def test_wait_idle_waiter_burns_little_cpu(db, db_path):
    add(db, "other", id="o0")
    proc = spawn("idle", db_path, dict(queue="idle", timeout="2s"), stdout=subprocess.PIPE)
    try:
        out = proc.stdout.readline()
    finally:
        proc.wait(timeout=60)
    res = json.loads(out)
    print(f"\ntq_wait idle for {res['wall']:.2f} s: {res['cpu'] * 1000:.1f} ms CPU "
          f"({100 * res['cpu'] / res['wall']:.1f}% of one core)")
    assert res["r"] == 0
    assert res["wall"] >= 1.95
    assert res["cpu"] < 0.25 * res["wall"]
