"""COST-01: the work of a claim, a settle, tq_get, tq_stats and tq_signal does not grow with the store.

Work is what SQLite counts for tinyq's own statements (sqlite3_stmt_status: virtual
machine steps, full-scan steps, sorts), summed over every statement tinyq ran, as the
`tq_statements` table reports it. It does not depend on the machine or its load, so
these tests cannot flake. Each case is built at 1,000 and at 100,000 jobs and the same
calls are measured on both; the bigger store may cost a few more steps (a deeper b-tree:
the logarithmic factor the rule allows), never more than SMALL_FACTOR times.
"""
import json

import pytest

import helpers
import stores
from helpers import FULL, MILLION, check_buckets, connect, get, one, plain_ahead

NOW = 1_900_000_000_000
# 100,000 in make test-all (TINYQ_FULL=1); 20,000 in make test: growth with the store shows either way
SMALL, BIG = 1_000, (100_000 if FULL else 20_000)
SMALL_FACTOR = 1.5
ROUNDS = 8  # two full turns of the claim's sweep (it looks at one kind of row per claim)


def work(db):
    """(VM steps, full-scan steps, sorts) done so far by tinyq's statements on db."""
    return db.execute("SELECT total(vm_steps), total(fullscan_steps), total(sorts) FROM tq_statements").fetchone()


def measured(db, calls):
    before = work(db)
    for sql, args in calls():
        db.execute(sql, args).fetchall()
    after = work(db)
    return tuple(int(a - b) for a, b in zip(after, before))


def fill(db, n, queue, options_sql="'{}'"):
    """n jobs added in one transaction, by one statement over a counter."""
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
        f"SELECT count(tq_add(?, json_object('n', i), {options_sql})) FROM c", (n, queue))
    db.execute("COMMIT")


def store(tmp_path, name):
    db = connect(str(tmp_path / f"{name}.db"))
    one(db, "SELECT tq_clock(?)", NOW)
    return db


def built(tmp_path, build, *args, clock=NOW):
    """A connection to this test's own copy of the store `build(db, *args)` makes from a new
    store with the clock at NOW (built once, then copied: tests/stores.py), the clock pinned
    at `clock` (the clock is the connection's: build's pin is not in the file)."""
    def make(path):
        db = connect(path)
        one(db, "SELECT tq_clock(?)", NOW)
        build(db, *args)
        db.close()
    key = " ".join(["cost", build.__qualname__.replace("<locals>.", "")] + [str(a) for a in args])
    name = stores.slug(key)
    path = stores.store(str(tmp_path / f"{name}.db"), key, make, [__file__, helpers.__file__])
    db = connect(path)
    one(db, "SELECT tq_clock(?)", clock)
    return db


def claim_settle(queue, add_options=None):
    """Calls: (an add of a free tenant's job, untimed in spirit but counted alike), a claim of 1, its settle."""
    def calls():
        for _ in range(ROUNDS):
            if add_options is not None:
                yield "SELECT tq_add(?, '{}', ?)", (queue, add_options)
            yield ("SELECT tq_settle(id, attempt, 'done') FROM (SELECT id, attempt FROM tq_claim(?, 'w', 1))",
                   (queue,))
    return calls


def build_full_group(db, n):
    one(db, "SELECT tq_queue('q', '{\"group_concurrency\": 1}')")
    fill(db, n, "q", "'{\"group\": \"big\"}'")
    one(db, "SELECT count(*) FROM tq_claim('q', 'w', 1)")  # the big tenant's one lease: its group is full


def full_group(tmp_path, n):
    """One tenant with n jobs in a full group (group_concurrency 1); a free tenant claims."""
    db = built(tmp_path, build_full_group, n)
    return db, claim_settle("q", '{"group": "free"}')


def full_group_drains(tmp_path, n):
    """The big tenant's own turn: each claim takes a head of its group and, while the group
    has room (group_concurrency 2), finds the next of its n set-aside jobs to follow. They
    were all added at one time, so that next one is found by seq among equal times."""
    def build(db, n):
        one(db, "SELECT tq_queue('q', '{\"group_concurrency\": 2}')")
        fill(db, n, "q", "'{\"group\": \"big\"}'")
    return built(tmp_path, build, n), claim_settle("q")


def same_limits_again(tmp_path, n):
    """A worker that sets its queue's limits at every start, unchanged, beside a full group."""
    db, _ = full_group(tmp_path, n)
    return db, lambda: [("SELECT tq_queue('q', '{\"group_concurrency\": 1}')", ())] * ROUNDS


def many_full_groups(tmp_path, n):
    """n/100 full groups of 100 jobs each."""
    def build(db, n):
        one(db, "SELECT tq_queue('q', '{\"group_concurrency\": 1}')")
        fill(db, n, "q", "json_object('group', 'g' || (i % ?3))".replace("?3", str(n // 100)))
        assert one(db, "SELECT count(*) FROM tq_claim('q', 'w', 1000, '{\"lease\": \"1d\"}')") == n // 100
    db = built(tmp_path, build, n)
    assert one(db, "SELECT running FROM tq_stats('q')") == n // 100
    return db, claim_settle("q", '{"group": "free"}')


def rate_window(tmp_path, n):
    """A queue whose rate window ('N00/1d') holds n starts."""
    def build(db, n):
        one(db, "SELECT tq_queue('r', json_object('rate', ? || '/1d'))", n * 100)
        fill(db, n, "r")
        while one(db, "SELECT count(*) FROM tq_claim('r', 'w', 1000, '{\"lease\": \"1d\"}')"):
            pass
    db = built(tmp_path, build, n)
    assert one(db, "SELECT started_in_window FROM tq_stats('r')") == n
    return db, claim_settle("r", "{}")


def plain(tmp_path, n):
    return built(tmp_path, fill, n, "p"), claim_settle("p", "{}")


def bounded(tmp_path, n):
    """n waiting jobs, each with an `expires` a day ahead, none past it (EXP-01): the claim's
    probe seeks the index of bounded jobs and finds nothing to end."""
    return built(tmp_path, fill, n, "b", "'{\"expires\": \"1d\"}'"), claim_settle("b", '{"expires": "1d"}')


def expiring_each_claim(tmp_path, n):
    """n waiting jobs bounded a day ahead; before each claim one more job reaches its bound
    (added with a bound 1 s ahead, then the clock moved 1 s): the claim ends that one, and
    does not look at the n others."""
    db = built(tmp_path, fill, n, "x", "'{\"expires\": \"1d\"}'")
    clock = [NOW]

    def calls():
        for _ in range(ROUNDS):
            yield "SELECT tq_add('x', '{}', '{\"expires\": \"1s\", \"priority\": 1}')", ()
            clock[0] += 1000
            yield "SELECT tq_clock(?)", (clock[0],)
            yield ("SELECT tq_settle(id, attempt, 'done') FROM (SELECT id, attempt FROM tq_claim('x', 'w', 1))", ())
        assert one(db, "SELECT failed FROM tq_stats('x')") >= ROUNDS  # (a read of the counters: flat too)
    return db, calls


def blocked_expiring_each_claim(tmp_path, n):
    """n jobs blocked on one that never finishes, bounded a day ahead (EXP-01); before each
    claim one more blocked job reaches its bound: the claim ends that one, its dependent
    follows, and the n others are not looked at."""
    def build(db, n):
        one(db, "SELECT tq_add('roots', '{}', '{\"id\": \"root\"}')")
        fill(db, n, "x", "'{\"after\": [\"root\"], \"expires\": \"1d\"}'")
    db = built(tmp_path, build, n)
    clock, k = [NOW], [0]

    def calls():
        for _ in range(ROUNDS):
            k[0] += 1
            yield ("SELECT tq_add('x', '{}', json_object('id', 'b-' || ?, 'after', json_array('root'), "
                   "'expires', '1s'))", (k[0],))
            yield "SELECT tq_add('y', '{}', json_object('after', json_array('b-' || ?)))", (k[0],)
            clock[0] += 1000
            yield "SELECT tq_clock(?)", (clock[0],)
            yield "SELECT count(*) FROM tq_claim('x', 'w', 1)", ()
        assert one(db, "SELECT failed FROM tq_stats('x')") == k[0]
        assert one(db, "SELECT failed FROM tq_stats('y')") == k[0]
    return db, calls


def replace_in_line(tmp_path, n):
    """tq_add with on_conflict 'replace' (KEY-01) of the job in the middle of n + 2,000 waiting
    jobs, moving it back and forth along the line (its priority): its bucket and span counts
    follow. (The 2,000 more cut both lines into buckets: a line of at most 1,024 has none.)"""
    def build(db, n):
        fill(db, n // 2 + 1000, "r")
        one(db, "SELECT tq_add('r', '{}', '{\"id\": \"me\"}')")
        fill(db, n // 2 + 1000, "r")
    db = built(tmp_path, build, n)

    def calls():
        for k in range(ROUNDS):
            yield "SELECT tq_add('r', ?, ?)", (json.dumps({"k": k}), json.dumps(
                {"id": "me", "on_conflict": "replace", "priority": k % 2}))
        check_buckets(db)
    return db, calls


def last_waiting(tmp_path, n):
    """tq_get (its ahead) of the last of n waiting jobs."""
    def build(db, n):
        fill(db, n, "g")
        one(db, "SELECT tq_add('g', '{}', '{\"id\": \"last\"}')")
    db = built(tmp_path, build, n)
    assert one(db, "SELECT tq_get('last') ->> 'ahead'") == n
    return db, lambda: [("SELECT tq_get('last')", ())] * ROUNDS


def waiting_at(before, after, shape="plain"):
    """tq_get of a job with `before(n)` jobs added before it and `after(n)` after it. Shapes:
    plain; mixed priorities (the job's own priority in the middle); parked groups (a queue
    with group_concurrency 1: most jobs set aside); due (ten jobs on each side scheduled 1 s
    ahead, then the clock moved past them: they wait, but no claim has put them in line yet,
    and they are counted one by one until one does)."""
    options = {"plain": "'{}'",
               "priorities": "json_object('priority', i % 5 - 2)",
               "parked": "json_object('group', 'g' || (i % 7), 'priority', i % 3)",
               "due": "CASE WHEN i % 10 = 0 AND i <= 100 THEN '{\"delay\": \"1s\"}' ELSE json_object('priority', i % 2) END"}[shape]

    def build_at(db, shape, before, after):
        if shape == "parked":
            one(db, "SELECT tq_queue('g', '{\"group_concurrency\": 1}')")
        fill(db, before, "g", options)
        one(db, "SELECT tq_add('g', '{}', '{\"id\": \"me\", \"group\": \"g3\"}')")
        fill(db, after, "g", options)
        if shape == "parked":
            one(db, "SELECT count(*) FROM tq_claim('g', 'w', 1000, '{\"lease\": \"1d\"}')")

    def case(tmp_path, n):
        db = built(tmp_path, build_at, shape, before(n), after(n), clock=NOW + 2000 if shape == "due" else NOW)
        assert get(db, "me")["ahead"] == plain_ahead(db, "me")
        check_buckets(db)
        return db, lambda: [("SELECT tq_get('me')", ())] * ROUNDS
    return case


def stats(tmp_path, n):
    """tq_stats('q') over n waiting jobs (some of them parked in full groups, some scheduled)."""
    def build(db, n):
        one(db, "SELECT tq_queue('s', '{\"group_concurrency\": 1, \"rate\": \"1000000/1d\"}')")
        fill(db, n, "s", "json_object('group', 'g' || (i % 10), 'priority', i % 3)")
        one(db, "SELECT count(*) FROM tq_claim('s', 'w', 100, '{\"lease\": \"1d\"}')")
    db = built(tmp_path, build, n)
    row = db.execute("SELECT waiting, running FROM tq_stats('s')").fetchone()
    assert row == (n - 10, 10)
    return db, lambda: [("SELECT * FROM tq_stats('s')", ())] * ROUNDS


def blocked_after(tmp_path, n):
    """n jobs blocked on one job that never finishes (DEP-01), beside the line claimed."""
    def build_blocked_after(db, n):
        one(db, "SELECT tq_add('roots', '{}', '{\"id\": \"root\"}')")
        fill(db, n, "p", "'{\"after\": [\"root\"]}'")
        fill(db, 100, "p")
    db = built(tmp_path, build_blocked_after, n)
    assert one(db, "SELECT blocked FROM tq_stats('p')") == n
    return db


def blocked_on_signals(tmp_path, n):
    """n jobs blocked each on a signal of its own with a timeout a day ahead (SIG-01): the
    claim's probe for timeouts seeks past them."""
    def build_blocked_on_signals(db, n):
        fill(db, n, "p")
        while True:
            got = db.execute("SELECT id, attempt FROM tq_claim('p', 'w', 1000)").fetchall()
            if not got:
                break
            db.execute("BEGIN IMMEDIATE")
            for jid, attempt in got:
                db.execute("SELECT tq_settle(?, ?, 'wait', json_object('signal', 'sig-' || ?, 'timeout', '1d'))",
                           (jid, attempt, jid))
            db.execute("COMMIT")
        fill(db, 100, "p")
    db = built(tmp_path, build_blocked_on_signals, n)
    assert one(db, "SELECT blocked FROM tq_stats('p')") == n
    return db


def claim_beside_blocked(tmp_path, n):
    return blocked_after(tmp_path, n), claim_settle("p", "{}")


def claim_beside_signal_waits(tmp_path, n):
    return blocked_on_signals(tmp_path, n), claim_settle("p", "{}")


def settle_unblocking_ten(tmp_path, n):
    """A settle whose job has 10 dependents (DEP-01) pays for those 10, beside n blocked jobs."""
    db = blocked_after(tmp_path, n)
    k = [0]

    def calls():
        for _ in range(ROUNDS):
            k[0] += 1
            yield "SELECT tq_add('fan', '{}', json_object('id', 'fan-' || ?))", (k[0],)
            yield ("SELECT count(tq_add('fan-in', '{}', json_object('after', json_array('fan-' || ?)))) "
                   "FROM (SELECT 1 FROM tinyq_meta LIMIT 1) CROSS JOIN (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 "
                   "UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 "
                   "UNION ALL SELECT 9 UNION ALL SELECT 10)", (k[0],))
            yield ("SELECT tq_settle(id, attempt, 'done') FROM (SELECT id, attempt FROM tq_claim('fan', 'w', 1))", ())
        assert one(db, "SELECT waiting FROM tq_stats('fan-in')") == 10 * k[0]
    return db, calls


def signal_beside_waiters(tmp_path, n):
    """tq_signal waking one job, beside n jobs waiting for other signals."""
    db = blocked_on_signals(tmp_path, n)
    names = [r[0] for r in db.execute("SELECT 'sig-' || id FROM tq_jobs WHERE state = 'blocked' LIMIT ?", (2 * ROUNDS,))]

    def calls():
        for _ in range(ROUNDS):
            yield "SELECT tq_signal(?)", (names.pop(),)
        assert one(db, "SELECT waiting FROM tq_stats('p')") >= ROUNDS
    return db, calls


def get_blocked(tmp_path, n):
    db = blocked_after(tmp_path, n)
    one(db, "SELECT tq_add('p', '{}', '{\"id\": \"me\", \"after\": [\"root\"]}')")
    assert one(db, "SELECT tq_get('me') ->> 'state'") == "blocked"
    return db, lambda: [("SELECT tq_get('me')", ())] * ROUNDS


def stats_blocked(tmp_path, n):
    return blocked_after(tmp_path, n), lambda: [("SELECT * FROM tq_stats('p')", ())] * ROUNDS


CASES = {
    "full_group": full_group,
    "full_group_drains": full_group_drains,
    "same_limits_again": same_limits_again,
    "many_full_groups": many_full_groups,
    "rate_window": rate_window,
    "get_last_waiting": last_waiting,
    "get_middle": waiting_at(lambda n: n // 2, lambda n: n // 2),
    "get_near_front": waiting_at(lambda n: 10, lambda n: n),
    "get_near_back": waiting_at(lambda n: n, lambda n: 10),
    "get_middle_priorities": waiting_at(lambda n: n // 3, lambda n: n - n // 3, "priorities"),
    "get_middle_parked_groups": waiting_at(lambda n: n // 2, lambda n: n // 2, "parked"),
    "get_middle_due_scheduled": waiting_at(lambda n: n // 2, lambda n: n // 2, "due"),
    "stats": stats,
    "plain_claim": plain,
    "claim_beside_bounded_jobs": bounded,
    "claim_ending_an_expired_job": expiring_each_claim,
    "claim_ending_an_expired_blocked_job": blocked_expiring_each_claim,
    "replace_in_a_long_line": replace_in_line,
    "claim_beside_blocked_jobs": claim_beside_blocked,
    "claim_beside_signal_waits": claim_beside_signal_waits,
    "settle_unblocking_ten_dependents": settle_unblocking_ten,
    "signal_beside_waiters": signal_beside_waiters,
    "get_blocked": get_blocked,
    "stats_beside_blocked_jobs": stats_blocked,
}


@pytest.mark.parametrize("case", list(CASES))
def test_COST_01_work_does_not_grow_from_1k_to_100k(tmp_path, case):
    costs = {}
    for n in (SMALL, BIG):
        db, calls = CASES[case](tmp_path, n)
        measured(db, calls)  # a first round warms the statement cache and settles counters
        costs[n] = measured(db, calls)
        db.close()
    (vm_small, scan_small, sort_small), (vm_big, scan_big, sort_big) = costs[SMALL], costs[BIG]
    assert vm_small > 0
    assert vm_big <= vm_small * SMALL_FACTOR, (case, costs)
    # No full scan and no sort appears at scale that was not there at 1,000 already.
    assert scan_big <= scan_small * SMALL_FACTOR + 10, (case, costs)
    assert sort_big <= sort_small, (case, costs)


@pytest.mark.parametrize("seed", range(20))
def test_COST_01_set_aside_groups_still_claim_in_order_within_every_limit(tmp_path, seed):
    """The claim walks only the heads of groups with room; what it takes must be exactly
    what a walk over every waiting job would take (JOB-01 order, LIM-01, LIM-02), through
    adds, claims, every outcome, cancels, the clock moving and limits changing."""
    import random
    rnd = random.Random(seed)
    db = store(tmp_path, f"model{seed}")
    now = NOW
    settings = {}
    starts = []  # (group, at) of every claim, for the model's rate windows
    # One group rate per run: without a rate, tinyq may trim its log of starts at any claim.
    group_rate = rnd.choice(["2/5s", "3/2s", None])

    def set_limits():
        nonlocal settings
        settings = {"group_concurrency": rnd.choice([1, 2, 3, None]), "group_rate": group_rate,
                    "concurrency": rnd.choice([4, 6, None]), "lease": "1h", "backoff": "1s"}
        one(db, "SELECT tq_queue('m', ?)", json.dumps(settings))

    def window(rate):
        n, ms = rate.split("/")
        return int(n), {"5s": 5000, "2s": 2000}[ms]

    def expected(n):
        waiting = db.execute(
            "SELECT j.id, j.grp FROM tq_jobs t JOIN tinyq_jobs j ON j.id = t.id"
            " WHERE t.queue = 'm' AND t.state = 'waiting' ORDER BY j.priority DESC, j.run_at, j.seq").fetchall()
        running = db.execute("SELECT group_key FROM tq_jobs WHERE queue = 'm' AND state = 'running'").fetchall()
        per_group = {}
        for (g,) in running:
            per_group[g] = per_group.get(g, 0) + 1
        room = n if settings["concurrency"] is None else min(n, settings["concurrency"] - len(running))
        recent = {}
        if settings["group_rate"]:
            limit, ms = window(settings["group_rate"])
            for g, at in starts:
                if at > now - ms and g is not None:
                    recent[g] = recent.get(g, 0) + 1
        out = []
        for jid, g in waiting:
            if len(out) >= room:
                break
            if g is not None:
                if settings["group_concurrency"] is not None and per_group.get(g, 0) >= settings["group_concurrency"]:
                    continue
                if settings["group_rate"] and recent.get(g, 0) >= window(settings["group_rate"])[0]:
                    continue
                per_group[g] = per_group.get(g, 0) + 1
                recent[g] = recent.get(g, 0) + 1
            out.append(jid)
        return out

    set_limits()
    for step in range(400):
        op = rnd.random()
        if op < 0.4:
            opts = {"priority": rnd.choice([-1, 0, 0, 1])}
            group = rnd.choice(["a", "b", "c", "d", None])
            if group:
                opts["group"] = group
            if rnd.random() < 0.2:
                opts["delay"] = rnd.choice([500, 3000])
            one(db, "SELECT tq_add('m', '{}', ?)", json.dumps(opts))
        elif op < 0.7:
            n = rnd.randint(1, 4)
            want = expected(n)
            got = [r[0] for r in db.execute("SELECT id, group_key FROM tq_claim('m', 'w', ?)", (n,)).fetchall()]
            assert got == want, (seed, step, settings)
            for jid in got:  # tinyq logs starts only while a rate is set
                if settings["group_rate"]:
                    starts.append((one(db, "SELECT tq_get(?) ->> 'group'", jid), now))
        elif op < 0.85:
            row = db.execute("SELECT id, attempt FROM tq_jobs WHERE queue = 'm' AND state = 'running'"
                             " ORDER BY random() LIMIT 1").fetchone()
            if row:
                outcome, value = rnd.choice([("done", None), ("error", "boom"), ("retry", "0ms"),
                                             ("snooze", "1s"), ("fail", "no")])
                assert one(db, "SELECT tq_settle(?, ?, ?, ?)", row[0], row[1], outcome, value) == 1
        elif op < 0.92:
            row = db.execute("SELECT id FROM tq_jobs WHERE queue = 'm' AND (state = 'waiting' OR state = 'running')"
                             " ORDER BY random() LIMIT 1").fetchone()
            if row:
                assert one(db, "SELECT tq_cancel(?)", row[0]) == 1
        elif op < 0.98:
            now += rnd.choice([300, 1000, 2500])
            one(db, "SELECT tq_clock(?)", now)
        else:
            set_limits()
        stats = db.execute("SELECT waiting, running FROM tq_stats('m')").fetchone()
        assert stats == (one(db, "SELECT count(*) FROM tq_jobs WHERE queue = 'm' AND state = 'waiting'"),
                         one(db, "SELECT count(*) FROM tq_jobs WHERE queue = 'm' AND state = 'running'"))
    db.close()


@pytest.mark.parametrize("seed", range(3))
def test_COST_01_ahead_stays_exact_as_long_lines_are_cut_and_drained(tmp_path, seed):
    """Lines grow past 1024 jobs (cut into buckets) and drain back (one bucket again) through
    adds of every priority, grouped jobs set aside, scheduled jobs coming due, claims, every
    outcome, cancels and retries: the buckets match the rows and `ahead` the plain count."""
    import random
    rnd = random.Random(seed)
    db = store(tmp_path, f"long{seed}")
    one(db, "SELECT tq_queue('q', '{\"group_concurrency\": 1, \"backoff\": \"1s\"}')")
    now = NOW
    cut = drained = False
    for step in range(60):
        grow = step < 20
        fill(db, rnd.randint(100, 300) if grow else rnd.randint(0, 20), "q",
             "json_object('priority', abs(random()) % 4 - 2, 'group', CASE WHEN random() % 3 = 0 THEN 'g' || (i % 4) END,"
             " 'delay', CASE WHEN random() % 5 = 0 THEN (abs(random()) % 3) * 1000 ELSE 0 END)")
        n = rnd.randint(1, 40) if grow else rnd.randint(100, 300)
        taken = db.execute("SELECT id, attempt FROM tq_claim('q', 'w', ?, '{\"lease\": \"1h\"}')", (n,)).fetchall()
        for jid, attempt in taken[: len(taken) // 2]:
            outcome = rnd.choice(["done", "retry", "snooze", "fail", "error"])
            value = {"retry": "0ms", "snooze": "1s", "fail": "no", "error": "boom"}.get(outcome)
            one(db, "SELECT tq_settle(?, ?, ?, ?)", jid, attempt, outcome, value)
        for (jid,) in db.execute("SELECT id FROM tq_jobs WHERE queue = 'q' AND state = 'waiting' ORDER BY random()"
                                 " LIMIT ?", (10 if grow else 200,)).fetchall():
            one(db, "SELECT tq_cancel(?)", jid)
        for (jid,) in db.execute("SELECT id FROM tq_jobs WHERE queue = 'q' AND state = 'failed' LIMIT 5").fetchall():
            one(db, "SELECT tq_retry(?)", jid)
        now += rnd.choice([0, 500, 1500])
        one(db, "SELECT tq_clock(?)", now)
        check_buckets(db)
        rows = one(db, "SELECT count(*) FROM tinyq_buckets")
        cut, drained = cut or rows > 2, drained or (cut and rows == 0)
        waiting = [r[0] for r in db.execute("SELECT id FROM tq_jobs WHERE queue = 'q' AND state = 'waiting'")]
        for jid in rnd.sample(waiting, min(5, len(waiting))):
            assert get(db, jid)["ahead"] == plain_ahead(db, jid), (seed, step, jid)
    assert cut and drained
    db.close()


def test_COST_01_spans_of_buckets_are_kept_as_a_long_line_fills_and_drains(tmp_path):
    """Over 64 buckets (32k jobs or so) the buckets are counted in spans too: spans are cut
    as the line fills, at every priority, and go as claims and cancels drain it."""
    db = store(tmp_path, "spans")
    fill(db, 40_000, "s", "json_object('priority', i % 5 - 2)")
    assert one(db, "SELECT count(*) FROM tinyq_spans") > 1
    while one(db, "SELECT queued FROM tinyq_counts WHERE queue = 's'"):
        check_buckets(db)
        for (jid,) in db.execute("SELECT id FROM tinyq_jobs WHERE queue = 's' AND status = 'queued'"
                                 " ORDER BY seq % 7, seq LIMIT 3").fetchall():
            assert get(db, jid)["ahead"] == plain_ahead(db, jid), jid
        db.execute("BEGIN IMMEDIATE")
        one(db, "SELECT count(tq_cancel(id)) FROM (SELECT id FROM tinyq_jobs WHERE queue = 's' AND status = 'queued'"
                " AND seq % 3 = 0 LIMIT 2000)")
        one(db, "SELECT count(*) FROM tq_claim('s', 'w', 1000)")
        db.execute("COMMIT")
    check_buckets(db)
    assert one(db, "SELECT count(*) FROM tinyq_spans") == 0
    db.close()


def timeline_store(tmp_path, events):
    """A job added first and finished last, with `events` other events logged in between (plain
    inserts into the log, as a busy store's other jobs would leave them): its timeline is
    three events spread over the whole log."""
    def build_timeline(db, events):
        one(db, "SELECT tq_add('t', '{}', '{\"id\": \"me\"}')")
        db.execute("BEGIN IMMEDIATE")
        db.execute("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?) "
                   "INSERT INTO tinyq_events (id, queue, state, attempt, at) "
                   "SELECT 'other-' || (i % 1000), 't', 'waiting', 0, ? FROM c", (events, NOW))
        db.execute("COMMIT")
        [(jid, attempt)] = db.execute("SELECT id, attempt FROM tq_claim('t', 'w', 1)").fetchall()
        one(db, "SELECT tq_progress(?, ?, '50%')", jid, attempt)
        one(db, "SELECT tq_settle(?, ?, 'done')", jid, attempt)
    return built(tmp_path, build_timeline, events)


@pytest.mark.parametrize("since", ["first look", "after its first event"])
def test_COST_01_a_jobs_timeline_reads_its_own_events_at_10k_and_1m_events(tmp_path, since):
    """`tq_watch WHERE job = ?` (the job page, `tinyq get`) reads the job's own events, not the
    log: the same work with 10,000 or 1,000,000 other events kept (schema 7's chain; 100,000
    in make test's quick form, helpers.MILLION)."""
    costs = {}
    for events in (10_000, MILLION):
        db = timeline_store(tmp_path, events)
        after = 0 if since == "first look" else one(db, "SELECT min(seq) FROM tq_watch WHERE job = 'me'")
        sql = "SELECT seq, state FROM tq_watch WHERE job = 'me' AND since = ?"
        want = db.execute("SELECT seq, state FROM tinyq_events WHERE id = 'me' AND seq > ? ORDER BY seq", (after,)).fetchall()
        assert [s for _, s in want] == (["waiting"] if after == 0 else []) + ["running", "progress", "done"]
        assert db.execute(sql, (after,)).fetchall() == want
        costs[events] = measured(db, lambda: [(sql, (after,))] * ROUNDS)
        db.close()
    (vm_small, scan_small, _), (vm_big, scan_big, _) = costs[10_000], costs[MILLION]
    assert 0 < vm_big <= vm_small * SMALL_FACTOR, costs
    assert scan_big <= scan_small + 10, costs


LINE_SIZES = (1_000, 100_000, 1_000_000) if FULL else (1_000, 10_000, 100_000)
LINE_CALLS = 600  # past the first bucket's end (512 jobs): one merge of the next bucket into it, amortized


def long_line(tmp_path, n):
    """n waiting jobs in one line, then the job 'last' behind them: built in one transaction,
    with the page cache large enough to hold the store (1,000,000 jobs take about 40 s of CPU)."""
    def build_line(db, n):
        db.execute("PRAGMA synchronous=OFF")
        db.execute("PRAGMA cache_size=-131072")
        fill(db, n, "p")
        one(db, "SELECT tq_add('p', '{}', '{\"id\": \"last\"}')")
    db = built(tmp_path, build_line, n)
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-131072")
    return db


def statements_run(db, sql, args, times):
    """(VM steps, full-scan steps, sorts) of tinyq's statements, and the statements SQLite ran
    (its trace: every statement, and every trigger program it started), per call."""
    traced = []
    before = work(db)
    db.set_trace_callback(traced.append)
    for _ in range(times):
        db.execute(sql, args).fetchall()
    db.set_trace_callback(None)
    after = work(db)
    ours = [t for t in traced if t.strip() != sql.strip()]
    return tuple((a - b) / times for a, b in zip(after, before)) + (len(ours) / times,)


@pytest.fixture(scope="module")
def lines_of(tmp_path_factory):
    """The work of claim(1)+settle and of tq_get('last') over lines of LINE_SIZES waiting jobs."""
    costs = {}
    claim_settle_sql = "SELECT tq_settle(id, attempt, 'done') FROM (SELECT id, attempt FROM tq_claim('p', 'w', 1))"
    for n in LINE_SIZES:
        db = long_line(tmp_path_factory.mktemp(f"line{n}"), n)
        assert json.loads(one(db, "SELECT tq_get('last')"))["ahead"] == n
        statements_run(db, claim_settle_sql, (), 20)  # warms the statement cache
        costs[("claim", n)] = statements_run(db, claim_settle_sql, (), LINE_CALLS)
        assert json.loads(one(db, "SELECT tq_get('last')"))["ahead"] == n - 20 - LINE_CALLS
        assert json.loads(one(db, "SELECT tq_get('last')"))["ahead"] == plain_ahead(db, "last")
        check_buckets(db)
        costs[("ahead", n)] = statements_run(db, "SELECT tq_get('last')", (), 50)
        db.close()
    return costs


@pytest.mark.parametrize("n", LINE_SIZES[1:])
def test_COST_01_claim_and_settle_in_a_long_line_cost_what_they_cost_in_a_short_one(lines_of, n):
    """A claim of 1 and its settle with 100,000 or 1,000,000 waiting jobs: within 1.25x the VM
    steps of the same at 1,000, no full scan or sort more, and no more statements or trigger
    programs started (a long line's first bucket is counted in tinyq_counts: the claim takes
    its job from there)."""
    (vm_small, scan_small, sort_small, run_small), (vm_big, scan_big, sort_big, run_big) = (
        lines_of[("claim", SMALL)], lines_of[("claim", n)])
    assert vm_big <= vm_small * 1.25, lines_of
    assert scan_big <= scan_small + 1 and sort_big <= sort_small, lines_of
    assert run_big <= run_small + 0.1, lines_of  # (one merge of a bucket in 600 claims)


@pytest.mark.parametrize("n", LINE_SIZES[1:])
def test_COST_01_ahead_of_the_last_of_a_long_line_is_exact_and_near_its_cost_at_1k(lines_of, n):
    """tq_get's `ahead` of the job behind n waiting ones is n exactly (the fixture checks it
    against a count of the rows), within 1.5x the VM steps and the statements at 1,000."""
    (vm_small, scan_small, sort_small, run_small), (vm_big, scan_big, sort_big, run_big) = (
        lines_of[("ahead", SMALL)], lines_of[("ahead", n)])
    assert vm_big <= vm_small * 1.5, lines_of
    assert scan_big <= scan_small + 10 and sort_big <= sort_small, lines_of
    assert run_big <= run_small * 1.5, lines_of
