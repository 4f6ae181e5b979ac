"""ERR-01 / ERR-02 fuzzing: every tq_* function, random arguments, random interleavings.

A hypothesis RuleBasedStateMachine drives one connection to a fresh store: valid-looking
work (add, claim, settle, renew, steps, progress, cancel, retry, queue settings, the clock,
transactions, a user trigger calling tq_add) mixed with calls of every function with random
argument lists (NULLs, huge and negative numbers, reals, NaN and infinities, malformed JSON
and durations, long text, non-UTF-8 text made with CAST(blob AS TEXT), blobs).

After every call:
- an error is a sqlite3.Error whose message starts with the function's name (or is one of
  SQLite's own argument-count messages), is never a caught panic ("internal error"), and
  changed nothing in the store (every tinyq_* row compared) nor ended the caller's
  transaction;
- a call with a clearly bad id/queue/name argument is an error, not a silent result;
and after every step the store's invariants hold (see `check_store`).

The machine runs IN A SUBPROCESS (`/usr/bin/python3 tests/test_fuzz.py`), so a crash or an
abort of the host shows up as a signal exit instead of killing pytest, and a hang as a
timeout. Budget: about 10 s of fuzzing in make test, 25 s in make test-all (TINYQ_FULL=1); TINYQ_FUZZ_LONG=1 (`make fuzz`) runs
10 minutes and shrinks a failure (TINYQ_FUZZ_SECONDS overrides both; TINYQ_FUZZ_EXAMPLES sets
hypothesis's max_examples per run). A failure prints hypothesis's steps and seed.
"""
import faulthandler
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXT = os.environ.get("TINYQ_EXT") or os.path.join(ROOT, "dist", "tinyq")

LONG = os.environ.get("TINYQ_FUZZ_LONG") == "1"
FULL = os.environ.get("TINYQ_FULL") == "1"  # make test-all (tests/helpers.py says the same)
BUDGET_S = float(os.environ.get("TINYQ_FUZZ_SECONDS") or (600 if LONG else 25 if FULL else 10))

from helpers import DAY, T0, check_buckets  # noqa: E402  (tests/ is the script's own folder: on sys.path)

# tq_get splices a stored payload in as stored (issue 28), so BIG_TEXT's 5000-deep brackets
# come back 5000 deep: past the default recursion limit of Python's json.loads.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
# Hypothesis runs of EXAMPLES programs of up to STEPS steps each, repeated until the budget is
# spent (a run's first programs are short: hypothesis starts from simple data).
EXAMPLES, STEPS = int(os.environ.get("TINYQ_FUZZ_EXAMPLES") or 25), 50
# tq_wait timeouts the fuzzer may use: invalid ones, and valid ones of a few ms at most.
WAIT_TIMEOUTS = [0, 1, 2, "0ms", "2ms", "0.5ms", -1, "-1s", None, "2h", 3_600_001, "x", 1.5, b"1", "1e3s"]

# SQLite's own messages for calls it rejects before tinyq runs.
SQLITE_OWN = ("too many arguments on ", "wrong number of arguments to function ")

STATUSES = {"scheduled", "queued", "running", "done", "failed", "blocked"}
EVENT_OF_STATUS = {"scheduled": "scheduled", "queued": "waiting", "running": "running",
                   "done": "done", "failed": "failed", "blocked": "blocked"}

# Functions and the argument positions that must be a name (non-empty UTF-8 text <= 1000
# bytes, no NUL): a call whose argument there is clearly not one must be an error (ERR-01).
SCALARS = {
    "tq_add": (0,), "tq_get": (0,), "tq_cancel": (0,), "tq_retry": (0,), "tq_renew": (0,),
    "tq_settle": (0,), "tq_step_get": (0, 1), "tq_step_put": (0, 2), "tq_progress": (0,),
    "tq_queue": (0,), "tq_sweep": (), "tq_clock": (), "tq_now": (), "tq_version": (),
    "tq_debug": (), "tq_wait": (0,), "tq_schedule": (0, 1), "tq_unschedule": (0,),
    "tq_signal": (0,),
}
TABLES = {"tq_claim": (0, 1), "tq_watch": (1,), "tq_stats": (0,), "tq_jobs": (), "tq_schedules": (),
          "tq_deps": (0,)}
# Usual arity, so that random calls often get past the argument count.
ARITY = {"tq_add": (2, 3), "tq_get": (1,), "tq_cancel": (1,), "tq_retry": (1,),
         "tq_renew": (2, 3), "tq_settle": (3, 4), "tq_step_get": (2,), "tq_step_put": (4,),
         "tq_progress": (3,), "tq_queue": (1, 2), "tq_sweep": (0, 1), "tq_clock": (0, 1),
         "tq_now": (0,), "tq_version": (0,), "tq_debug": (0,), "tq_wait": (2,),
         "tq_claim": (3, 4), "tq_watch": (0, 1, 2), "tq_stats": (0, 1), "tq_jobs": (0, 2),
         "tq_schedule": (4, 5), "tq_unschedule": (1,), "tq_schedules": (0,),
         "tq_signal": (1, 2, 3), "tq_deps": (1,)}


# Per function: [calls that returned, calls that raised] (printed at the end of a run).
TALLY = {}

# --------------------------------------------------------------------------- arguments
class Arg:
    """One SQL argument: a placeholder expression and the value bound to it."""

    __slots__ = ("expr", "value")

    def __init__(self, value, expr="?"):
        self.expr, self.value = expr, value

    def __repr__(self):
        v = self.value
        if isinstance(v, (str, bytes)) and len(v) > 40:
            v = v[:40]
            return f"{self.expr}<{type(self.value).__name__}:{len(self.value)}:{v!r}...>"
        return f"{self.expr}<{v!r}>" if self.expr != "?" else repr(v)

    def as_name(self):
        """The text SQLite will see, or None when it is not valid text at all."""
        v = self.value
        if self.expr == "CAST(? AS TEXT)":
            try:
                return v.decode("utf-8")
            except UnicodeDecodeError:
                return None
        return v if isinstance(v, str) else None

    def is_good_name(self):
        s = self.as_name()
        return s is not None and 0 < len(s.encode("utf-8", "surrogatepass")) <= 1000 and "\0" not in s


def pick(items):
    """sampled_from, with a short repr (hypothesis reprs strategies often: no big literals)."""
    from hypothesis import strategies as st
    items = list(items)
    return st.integers(0, len(items) - 1).map(items.__getitem__)


def named(strategy, name):
    """`strategy` behind a composite whose repr is just `name()`: hypothesis reprs rules and
    their strategies on every step, and the repr of a big strategy costs milliseconds."""
    from hypothesis import strategies as st

    def draw_it(draw):
        return draw(strategy)
    draw_it.__name__ = draw_it.__qualname__ = name
    return st.composite(draw_it)()


BIG_TEXT = {"1m": "y" * 1_000_000, "brackets": "[" * 5000 + "]" * 5000,
            "objects": '{"a":' * 3000 + "1" + "}" * 3000}


def _strategies():
    from hypothesis import strategies as st

    edge_ints = pick([0, 1, -1, 2, 3, 999, 1000, 1001, 2**31 - 1, 2**31, -2**31 - 1,
                                 2**53 + 1, 2**62, 2**63 - 1, -2**63, 3_600_000, 3_600_001,
                                 T0, 253_402_300_799_999, 253_402_300_800_000])
    ints = st.one_of(edge_ints, st.integers(-2**63, 2**63 - 1), st.integers(-5, 50))
    floats = st.one_of(pick([0.0, -0.0, 0.5, 1.0, 1.5, -1.5, 1e300, -1e300, 1e-300,
                                        float("inf"), float("-inf"), float("nan"), 2.0**63]),
                       st.floats())
    durations = pick([
        "", " ", "0", "0ms", "1ms", "500ms", "30s", "1.5h", "7d", " 7d ", "10m", "5 minutes",
        "10x", "-5s", "-0s", "1e3s", "1.2.3s", "s", "ms", ".s", "5.s", "5S", "NaNs", "infs",
        "99999999999999999999d", "36500d", "36501d", "١٢s", "５s", "1_000ms", "+5s", "0x10s",
        "10/s", "0/s", "1/0s", "-1/s", "600/1m", "1/parsec", "9223372036854775807/s", "1/",
        "2026-11-29T12:00:00Z", "2026-13-45T99:00:00Z", "1969-12-31T23:59:59Z", "9999-12-31",
        "10000-01-01T00:00:00Z", "2026-11-29 12:00", "tomorrow",
    ])
    option_keys = pick([
        "id", "at", "delay", "priority", "group", "attempts", "lease", "timeout", "backoff",
        "backoff_max", "concurrency", "rate", "group_concurrency", "group_rate", "dedupe",
        "keep", "paused", "bogus", "", "ID", "delay ", "tz", "missed", "meta", "expires", "on_conflict",
        "max_wait", "after", "after_failed", "signal",
    ])
    json_scalars = st.one_of(st.none(), st.booleans(), ints, st.floats(allow_nan=False),
                             durations, st.text(max_size=8))
    json_values = st.recursive(json_scalars, lambda c: st.one_of(
        st.lists(c, max_size=3), st.dictionaries(st.text(max_size=3), c, max_size=3)), max_leaves=6)
    objects = st.dictionaries(option_keys, json_values, max_size=4).map(json.dumps)
    raw_json = pick([
        "", "{", "}", "[]", "{}", "null", "true", "1", '"x"', '{"id": ', '{"id": 1}',
        '{"delay": "5 minutes"}', '{"priority": 1e400}', '{"priority": 99999999999999999999}',
        '{"attempts": 0}', '{"a": 1, "a": 2}', '{"id": "x", "id": "y"}', '{"delay": -1}',
        '{"at": "2026-13-45T99:00:00Z"}', '{"at": -1}', '{"lease": "0ms"}', "\ufeff{}",
        '{"id": "\\u0000"}', '{"id": "\\ud800"}', "{'id': 'x'}", '{"id": "x"} trailing',
        '{"paused": "yes"}',
        '{"rate": 10}', '{"rate": "10/s", "group_rate": "0/s"}', '{"concurrency": 0}',
        '{"priority": 2147483648}', '{"priority": -2147483649}', '{"attempts": 1000001}',
        '{"delay": 1.5}', '{"delay": "1.5"}', '{"at": 1e20}', '{"lease": 3.7}',
        '{"expires": "1s", "delay": "2s"}', '{"expires": "2026-13-45"}', '{"on_conflict": "replace"}',
        '{"id": "a", "on_conflict": "debounce"}', '{"id": "a", "on_conflict": "debounce", "delay": "1s", "max_wait": "1ms"}',
        '{"id": "a", "max_wait": "1s"}', '{"id": "a", "on_conflict": null, "expires": null}',
        '{"after": []}', '{"after": ["a", "a"]}', '{"after": [null]}', '{"after": "a"}', '{"after_failed": "run"}',
        '{"signal": "s1"}', '{"signal": "s1", "timeout": "1s"}', '{"after": ["a"], "signal": "s"}', '{"keep": "0ms"}',
    ])
    texts = st.one_of(
        st.text(max_size=12),
        pick(["q", "a", "b", "tq_x", "tq_01M8KN0G74Y1DZHXZR82PG596K", "done", "error",
                         "retry", "snooze", "fail", "DONE", "w1", "'; DROP TABLE tinyq_jobs; --",
                         "\0", "a\0b", " ", "\n", "waiting", "running", "scheduled", "cancelled"]),
        st.tuples(pick(["x", "é", "𝕏"]), pick([1, 250, 251, 333, 334, 500, 501, 1000, 1001])).map(
            lambda t: t[0] * t[1]),
        # long text from a short seed (drawing 1000 characters would use up hypothesis's buffer)
        st.tuples(st.text(min_size=1, max_size=3), st.integers(300, 1100)).map(
            lambda t: (t[0] * t[1])[:t[1]]),
        pick(sorted(BIG_TEXT)).map(BIG_TEXT.__getitem__),
        durations, raw_json, objects,
    )
    blobs = st.binary(max_size=24)
    args = st.one_of(
        st.none().map(Arg), ints.map(Arg), floats.map(Arg), texts.map(Arg),
        blobs.map(Arg),                                              # a blob
        blobs.map(lambda b: Arg(b, "CAST(? AS TEXT)")),              # text, often not UTF-8
        pick([b"\xff\xfe", b"q\xff", b"\xed\xa0\x80", b"\xc0\x80", b"a\x00b"])
          .map(lambda b: Arg(b, "CAST(? AS TEXT)")),
    )
    args = named(args, "fuzz_arg")
    return dict(st=st, ints=ints, floats=floats, durations=durations, objects=objects,
                raw_json=raw_json, texts=texts, args=args)


# --------------------------------------------------------------------------- invariants
def min_keep_of(c, min_keep):
    """Events are trimmed store-wide once older than the longest keep of any queue: the
    smallest such keep seen so far bounds how old a job's latest event may be."""
    k = c.execute("SELECT max(coalesce(keep, ?)) FROM tinyq_queues", (7 * DAY,)).fetchone()[0]
    return min_keep if k is None else min(min_keep, k)


def check_counters(c):
    """The counters claims and tq_stats read (tinyq_counts, tinyq_groups) and the buckets
    tq_get's `ahead` reads (tinyq_buckets) match the rows."""
    check_buckets(c)
    # Each job's timeline starts at its newest event (schema 7: tq_watch's `job` reads its chain).
    heads = c.execute("SELECT id, last_event, (SELECT max(seq) FROM tinyq_events e WHERE e.id = j.id) FROM tinyq_jobs j"
                      " WHERE last_event IS NOT (SELECT max(seq) FROM tinyq_events e WHERE e.id = j.id)"
                      " AND last_event >= (SELECT min(seq) FROM tinyq_events)").fetchall()
    assert not heads, f"jobs whose last_event is not their newest event: {heads[:5]}"
    counted = {r[0]: r[1:] for r in c.execute(
        "SELECT queue, scheduled, queued, running, done, failed FROM tinyq_counts")}
    for queue, *row in c.execute(
            "SELECT queue, sum(status = 'scheduled'), sum(status = 'queued'), sum(status = 'running'),"
            " sum(status = 'done'), sum(status = 'failed') FROM tinyq_jobs GROUP BY queue"):
        assert counted.get(queue) == tuple(row), f"queue {queue!r}: counters {counted.get(queue)} vs {row}"
    limited = {r[0] for r in c.execute(
        "SELECT name FROM tinyq_queues WHERE group_concurrency IS NOT NULL OR group_rate_n IS NOT NULL")}
    # A parked job only in a queue with group limits, and only grouped.
    bad = c.execute("SELECT id, queue, grp FROM tinyq_jobs WHERE status = 'queued' AND parked = 1").fetchall()
    for jid, queue, grp in bad:
        assert queue in limited and grp is not None, f"job {jid!r} parked in {queue!r} (group {grp!r})"
    for queue, grp, running in c.execute("SELECT queue, grp, running FROM tinyq_groups"):
        real = c.execute("SELECT count(*) FROM tinyq_jobs WHERE status = 'running' AND queue = ? AND grp = ?",
                         (queue, grp)).fetchone()[0]
        assert running == real, f"group {queue!r}/{grp!r}: counter {running}, running {real}"
    # A group of a limited queue never has two jobs a claim may take (its head), and
    # the head is the group's first due job in claim order, unless the group is dirty.
    for queue in limited:
        for grp, heads in c.execute(
                "SELECT grp, count(*) FROM tinyq_jobs WHERE status = 'queued' AND parked = 0 AND queue = ?"
                " AND grp IS NOT NULL GROUP BY grp", (queue,)):
            dirty = c.execute("SELECT dirty FROM tinyq_groups WHERE queue = ? AND grp = ?",
                              (queue, grp)).fetchone()
            if dirty is None or dirty[0] == 0:
                assert heads <= 1, f"group {queue!r}/{grp!r} has {heads} heads"


def check_invariants(c, ever_added, attempts, now, min_keep=7 * DAY):
    """The store's invariants, on connection `c` whose clock reads `now` (tq_clock):
    every job's status, lease and attempt are coherent, agree with its latest tq_watch
    event and with tq_get; no job or event for an id that was never added (`ever_added`);
    no attempt lower than the one seen before (`attempts`, id -> attempt, updated here).
    Also used on stores recovered after a simulated power cut (tests/test_powercut.py)."""
    if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'tinyq_jobs'").fetchone() is None:
        return
    jobs = c.execute("SELECT seq, id, status, attempt, tries, lease_until, run_at, queue, changed_at, "
                     "started_at FROM tinyq_jobs").fetchall()
    latest = {r[0]: r[1:] for r in c.execute(
        "SELECT e.id, e.state, e.attempt FROM tinyq_events e "
        "WHERE e.seq = (SELECT max(seq) FROM tinyq_events WHERE id = e.id)")}
    latest_state = {r[0]: r[1:] for r in c.execute(
        "SELECT e.id, e.state, e.attempt FROM tinyq_events e WHERE e.seq = "
        "(SELECT max(seq) FROM tinyq_events WHERE id = e.id AND state <> 'progress')")}
    for seq, jid, status, attempt, tries, lease_until, run_at, queue, changed_at, started_at in jobs:
        assert status in STATUSES, f"job {jid!r}: status {status!r} is not allowed"
        assert status != "running" or lease_until is not None, f"job {jid!r}: running without lease_until"
        assert 0 <= tries <= attempt, f"job {jid!r}: tries {tries} vs attempt {attempt}"
        prev = attempts.get(jid, 0)
        assert attempt >= prev, f"job {jid!r}: attempt went from {prev} down to {attempt}"
        attempts[jid] = attempt
        assert jid in ever_added, f"job {jid!r} exists but was never added"
        ev = latest_state.get(jid)
        if ev is None:
            # Only possible once its latest event (dated changed_at, started_at for a
            # claim, or run_at when it fell due) is older than the longest keep.
            event_at = min(x for x in (changed_at, started_at, run_at) if x is not None)
            assert event_at < now - min_keep, f"job {jid!r} ({status}) has no event"
            continue
        assert ev[0] == EVENT_OF_STATUS[status], \
            f"job {jid!r}: stored {status!r} but its latest event says {ev[0]!r}"
        assert ev[1] == attempt, f"job {jid!r}: attempt {attempt} but its latest event says {ev[1]}"
        last = latest[jid]
        assert last[0] == ev[0] or (last[0] == "progress" and status == "running"), \
            f"job {jid!r}: latest event {last[0]!r} while {status!r}"
        derived = "waiting" if status == "queued" or (status == "scheduled" and run_at <= now) else status
        got = json.loads(c.execute("SELECT tq_get(?)", (jid,)).fetchone()[0])
        assert got["state"] == derived, f"job {jid!r}: tq_get says {got['state']!r}, stored {status!r}"
        assert got["attempt"] == attempt
    present = {r[1] for r in jobs}
    for jid, (state, _) in latest.items():
        assert jid in ever_added, f"events for id {jid!r}, which was never added"
        if jid not in present:
            assert state in ("cancelled", "done", "failed"), \
                f"job {jid!r} is gone but its latest event is {state!r}"
    # EXP-01: no attempt started at or after its job's `expires` (claims end such jobs first).
    late = c.execute("SELECT id FROM tinyq_jobs WHERE status = 'running' AND started_at >= start_by").fetchall()
    assert not late, f"jobs {late} were claimed past their expires"
    counts = dict(c.execute("SELECT state, count(*) FROM tq_jobs GROUP BY state").fetchall())
    assert set(counts) <= {"scheduled", "waiting", "running", "done", "failed", "blocked"}, counts
    check_counters(c)
    check_group_heads(c, now)
    check_workflows(c)


def check_group_heads(c, now):
    """LIM-02: a clean group (not dirty) of a limited queue with room and a due job has a
    head, an unparked job, which the claim's walk meets (it may be not due itself after a
    claim by a clock stepped back: the walk then takes the group's first due job)."""
    if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'tinyq_groups'").fetchone() is None:
        return
    for queue, grp, cap, rate_n, running, started in c.execute(
            "SELECT q.name, g.grp, q.group_concurrency, q.group_rate_n, g.running, g.started"
            " FROM tinyq_queues q JOIN tinyq_groups g ON g.queue = q.name"
            " WHERE g.dirty = 0 AND q.paused = 0"
            " AND (q.group_concurrency IS NOT NULL OR q.group_rate_n IS NOT NULL)").fetchall():
        if (cap is not None and running >= cap) or (rate_n is not None and started >= rate_n):
            continue
        due, heads = c.execute(
            "SELECT sum(run_at <= ?), sum(parked = 0) FROM tinyq_jobs"
            " WHERE status = 'queued' AND queue = ? AND grp = ?", (now, queue, grp)).fetchone()
        assert not due or heads, f"group {queue!r}/{grp!r} has room and {due} due jobs, all set aside"


def check_workflows(c):
    """DEP-01 / SIG-01: a job blocked on jobs counts exactly its unfinished edges, each to a
    job that exists and has not finished; one blocked on a signal has a name and no count;
    no other job has either; `held` counts the edges not yet released, and a finished job
    that is held has no expiry (it is kept for its dependents)."""
    if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'tinyq_deps'").fetchone() is None:
        return
    for jid, status, waits, signal, counted in c.execute(
            "SELECT id, status, waits, signal, (SELECT count(*) FROM tinyq_deps d WHERE d.job = j.seq AND d.resolved IS NULL)"
            " FROM tinyq_jobs j WHERE waits IS NOT NULL OR signal IS NOT NULL OR status = 'blocked'"):
        assert status == "blocked", f"job {jid!r} ({status}) keeps waits {waits} / signal {signal!r}"
        assert (waits is None) != (signal is None), f"blocked job {jid!r}: waits {waits}, signal {signal!r}"
        if waits is not None:
            assert waits == counted and waits > 0, f"blocked job {jid!r}: waits {waits}, unfinished edges {counted}"
    bad = c.execute("SELECT d.dep, d.job FROM tinyq_deps d JOIN tinyq_jobs j ON j.seq = d.dep"
                    " WHERE d.resolved IS NULL AND j.status IN ('done', 'failed')"
                    " AND EXISTS (SELECT 1 FROM tinyq_jobs b WHERE b.seq = d.job AND b.status = 'blocked')").fetchall()
    assert not bad, f"edges to finished jobs still counted by blocked jobs: {bad}"
    for jid, held, counted, status, expires in c.execute(
            "SELECT id, coalesce(held, 0), (SELECT count(*) FROM tinyq_deps d WHERE d.dep = j.seq AND d.resolved IS NOT 2),"
            " status, expires_at FROM tinyq_jobs j WHERE held IS NOT NULL OR linked IS NOT NULL"):
        assert held == counted, f"job {jid!r}: held {held}, edges not released {counted}"
        if held and status in ("done", "failed"):
            assert expires is None, f"job {jid!r} ({status}) is held by its dependents but expires"
    # No cycle among the edges still waited for: no job waits, through any chain, for itself.
    cycle = c.execute(
        "WITH RECURSIVE r(start, node) AS (SELECT job, dep FROM tinyq_deps WHERE resolved IS NULL"
        " UNION SELECT r.start, d.dep FROM r JOIN tinyq_deps d ON d.job = r.node AND d.resolved IS NULL)"
        " SELECT start FROM r WHERE start = node LIMIT 1").fetchall()
    assert not cycle, f"job seq {cycle} waits for itself through a chain"
    # JOB-05: an ended job keeps no lease, so no late call of its attempt can act on it.
    leased = c.execute("SELECT id FROM tinyq_jobs WHERE status IN ('done', 'failed') AND lease_until IS NOT NULL").fetchall()
    assert not leased, f"ended jobs {leased} keep a lease"
    blocked = dict(c.execute("SELECT queue, blocked FROM tinyq_counts"))
    for queue, n in c.execute("SELECT queue, count(*) FROM tinyq_jobs WHERE status = 'blocked' GROUP BY queue"):
        assert blocked.get(queue) == n, f"queue {queue!r}: {n} blocked jobs, counter {blocked.get(queue)}"


# --------------------------------------------------------------------------- the machine
def build_machine():
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

    S = _strategies()
    args_st = S["args"]
    fn_names = sorted(ARITY)

    @st.composite
    def fuzz_calls(draw):
        f = draw(pick(fn_names))
        n = draw(st.one_of(pick(ARITY[f]), st.integers(0, 5)))
        args = draw(st.lists(args_st, min_size=n, max_size=n))
        if f == "tq_wait" and n >= 2:
            # Never a timeout that could block for long (a valid duration waits that long).
            args[1] = Arg(draw(pick(WAIT_TIMEOUTS)))
        return f, args

    queues = pick(["q", "q", "q", "other", "limited"])
    chosen_ids = pick(["a", "b", "c", "d", "reply:41", "é", "x" * 1000])
    good_delays = st.one_of(st.integers(0, 5_000), pick(["0ms", "10ms", "1s", "2s", "1m"]))
    add_opts = st.fixed_dictionaries({}, optional={
        "id": chosen_ids, "delay": good_delays, "priority": st.integers(-3, 3),
        "group": pick(["g1", "g2"]), "attempts": st.integers(1, 4),
        "expires": st.one_of(pick(["50ms", "1s", "3s", "1m", "1d", "0s", "x", -1]), st.integers(T0, T0 + 10_000)),
        "on_conflict": pick(["keep", "replace", "replace", "debounce", "debounce", "nope"]),
        "max_wait": pick(["0ms", "1s", "5s", "1m"]),
        "after": st.lists(chosen_ids, min_size=0, max_size=3),
        "after_failed": pick(["fail", "run", "cancel", "never"])})
    queue_opts = st.fixed_dictionaries({}, optional={
        "lease": pick(["100ms", "1s", "30s", None]),
        "timeout": pick(["500ms", "5s", "1h", None]),
        "attempts": st.one_of(st.integers(1, 4), st.none()),
        "backoff": pick(["0ms", "10ms", "1s", None]),
        "backoff_max": pick(["1s", "1m", None]),
        "concurrency": st.one_of(st.integers(1, 3), st.none()),
        "rate": pick(["2/s", "5/1m", None]),
        "group_concurrency": st.one_of(st.integers(1, 2), st.none()),
        "group_rate": pick(["1/s", None]),
        "dedupe": pick(["0ms", "1s", "1d", None]),
        "keep": pick(["0ms", "1s", "7d", None]),
        "paused": pick([True, False, None])})
    add_opts = named(add_opts, "add_options")
    queue_opts = named(queue_opts, "queue_options")
    outcomes = pick([
        ("done", None), ("done", '{"ok": true}'), ("done", 5), ("error", "boom"), ("error", None),
        ("retry", None), ("retry", "10ms"), ("retry", "2s"), ("snooze", "10ms"), ("snooze", 0),
        ("snooze", None), ("fail", "bad"), ("fail", ""), ("nope", None), ("DONE", None),
        ("wait", '{"signal": "s1", "timeout": "1s"}'), ("wait", '{"signal": "s2"}'),
        ("wait", '{"after": ["a", "b"]}'), ("wait", '{"after": ["c"]}'), ("wait", '{"after": ["zzz"]}'),
        ("wait", '{"after": ["a"], "timeout": "1s"}'), ("wait", None),
        # waits that may close a cycle through the jobs added with `after` (DEP-01)
        ("wait", '{"after": ["a"]}'), ("wait", '{"after": ["b"]}'), ("wait", '{"after": ["d", "c"]}'),
        ("wait", '{"after": ["reply:41"]}')])

    class TinyqMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            TALLY.setdefault("(programs)", [0, 0])[0] += 1
            self.dir = tempfile.mkdtemp(prefix="tinyq-fuzz-")
            self.path = os.path.join(self.dir, "store.db")
            self.conn = self._open()
            self.now = T0
            self.conn.execute("SELECT tq_clock(?)", (self.now,)).fetchall()
            self.ever_added = set()        # every id tq_add ever returned (or a trigger added)
            self.attempts = {}             # id -> highest attempt seen, until the row is deleted
            self.hooked = False            # temp trigger logging deleted job rows installed?
            self.saved_attempts = None     # copy taken at BEGIN, restored by ROLLBACK
            self.held = []                 # (id, attempt) from claims
            self.scheduled = set()         # names tq_schedule ever accepted: their jobs are '<name>@...'
            # A user table whose trigger calls tq_add (JOB-02), used by trigger_add.
            self.conn.execute("CREATE TABLE user_rows (jid, payload)")
            self.conn.execute("""CREATE TRIGGER user_rows_job AFTER INSERT ON user_rows BEGIN
                                   SELECT tq_add('trig', NEW.payload, json_object('id', NEW.jid));
                                 END""")
            self.min_keep = 7 * DAY

        def _open(self):
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=2)
            conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
            conn.enable_load_extension(True)
            conn.load_extension(EXT)
            conn.enable_load_extension(False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")   # speed: durability is not what this tests
            return conn

        def teardown(self):
            try:
                self.conn.close()
            finally:
                shutil.rmtree(self.dir, ignore_errors=True)

        # ---------------------------------------------------------------- calling
        def job_row(self, sql, *params):
            """A row of tinyq_jobs, or None: also when no store is there (a rolled-back
            transaction took the store it created with it; `held` still names its jobs)."""
            if not self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'tinyq_jobs'").fetchone():
                return None
            return self.conn.execute(sql, params).fetchone()

        def snapshot(self):
            c = self.conn
            tables = [r[0] for r in c.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'tinyq%' ORDER BY name")]
            # (WITHOUT ROWID tables read in primary-key order)
            return {t: c.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}

        def call(self, fn, sql, params, bad_names=()):
            """Runs one statement calling `fn`; checks the error contract. Returns rows or None.
            `bad_names`: positions of arguments that are clearly not names (the call must fail)."""
            before = self.snapshot()
            in_tx = self.conn.in_transaction
            faulthandler.dump_traceback_later(60, exit=True)
            tally = TALLY.setdefault(fn, [0, 0])
            try:
                rows = self.conn.execute(sql, params).fetchall()
                tally[0] += 1
            except sqlite3.Error as e:
                tally[1] += 1
                msg = str(e)
                assert msg.startswith(fn + ":") or msg.startswith(SQLITE_OWN), \
                    f"{fn}: error message does not start with the function's name: {msg!r} ({sql} {params!r:.300})"
                assert "internal error" not in msg, f"{fn}: a caught panic: {msg!r} ({sql} {params!r:.300})"
                assert self.conn.in_transaction == in_tx, f"{fn}: the error ended the caller's transaction: {msg!r}"
                after = self.snapshot()
                assert after == before, f"{fn}: a failed call changed the store: {msg!r} ({sql} {params!r:.300})"
                return None
            finally:
                faulthandler.cancel_dump_traceback_later()
            assert not bad_names, \
                f"{fn}: a bad argument at position {bad_names} was accepted: {sql} {params!r:.300} -> {rows!r:.200}"
            return rows

        def call_args(self, fn, args):
            exprs = ", ".join(a.expr for a in args)
            params = tuple(a.value for a in args)
            if fn in TABLES:
                if fn == "tq_jobs" and len(args) == 2:
                    sql = f"SELECT * FROM tq_jobs WHERE queue = {args[0].expr} AND state = {args[1].expr}"
                else:
                    sql = f"SELECT * FROM {fn}({exprs})" if args else f"SELECT * FROM {fn}"
                checked = TABLES[fn]
            else:
                sql = f"SELECT {fn}({exprs})"
                checked = SCALARS[fn]
            bad = [i for i in checked if i < len(args) and not args[i].is_good_name()]
            rows = self.call(fn, sql, params, bad)
            if rows is not None and fn == "tq_add" and rows and isinstance(rows[0][0], str):
                self.ever_added.add(rows[0][0])
            if rows is not None and fn == "tq_claim":
                self.held.extend((r[0], r[1]) for r in rows)
            if rows is not None and fn == "tq_schedule":
                self.scheduled.add(json.loads(rows[0][0])["name"])
            return rows

        def v(self, fn, *values):
            return self.call_args(fn, [x if isinstance(x, Arg) else Arg(x) for x in values])

        # ---------------------------------------------------------------- rules: valid-ish work
        @rule(queue=queues, payload=named(st.one_of(st.just("{}"), st.text(max_size=20),
                                                    st.integers(-2**63, 2**63 - 1)), "payloads"),
              opts=st.one_of(st.none(), add_opts))
        def add(self, queue, payload, opts):
            if opts is None:
                self.v("tq_add", queue, payload)
            else:
                self.v("tq_add", queue, payload, json.dumps(opts))

        @rule(queue=queues, n=st.integers(1, 5), lease=pick([None, "50ms", "1s", "1m"]))
        def claim(self, queue, n, lease):
            if lease is None:
                self.v("tq_claim", queue, "w1", n)
            else:
                self.v("tq_claim", queue, "w2", n, json.dumps({"lease": lease}))

        @rule(queue=queues, n=st.integers(1, 5), back=pick([1, 1_000, 3_600_000]))
        def claim_clock_back(self, queue, n, back):
            """A claim by a clock stepped back, then forward to the model's time again: the
            jobs due only at the model's time wait, the others start (LIM-02 with groups)."""
            self.conn.execute("SELECT tq_clock(?)", (self.now - back,)).fetchall()
            try:
                self.v("tq_claim", queue, "w1", n)
            finally:
                self.conn.execute("SELECT tq_clock(?)", (self.now,)).fetchall()

        @precondition(lambda self: self.held)
        @rule(data=st.data(), outcome=outcomes)
        def settle(self, data, outcome):
            job_id, attempt = data.draw(pick(self.held))
            name, value = outcome
            # JOB-05: a job that ended (or was claimed again) is final for this attempt,
            # late or not: the settle is stale (0) or an error, and changes nothing.
            row = self.job_row("SELECT status, attempt FROM tinyq_jobs WHERE id = ?", job_id)
            final = row is None or row[0] in ("done", "failed", "blocked") or row[1] != attempt
            before = self.snapshot() if final else None
            if value is None:
                rows = self.v("tq_settle", job_id, attempt, name)
            else:
                rows = self.v("tq_settle", job_id, attempt, name, value)
            if final:
                assert rows is None or rows[0][0] == 0, f"a settle of ended job {job_id!r} ({row}) counted"
                assert self.snapshot() == before, f"a stale settle of {job_id!r} changed the store"

        @precondition(lambda self: self.held)
        @rule(data=st.data(), outcome=outcomes, budget=pick([None, 1]))
        def late_settle(self, data, outcome, budget):
            """A worker whose lease ran out settles late (JOB-05): the clock moves past the
            lease, a claim of its queue finds it (back in line, or ended for good: its last
            attempt, or past its `expires`; `budget` 1 makes that its last), then the
            worker settles. `settle` checks that an ended job stays as it ended."""
            job_id, attempt = data.draw(pick(self.held))
            row = self.job_row("SELECT queue, lease_until FROM tinyq_jobs WHERE id = ? AND attempt = ?"
                               " AND status = 'running'", job_id, attempt)
            if row is not None and not self.conn.in_transaction:
                if budget is not None:
                    self.v("tq_queue", row[0], json.dumps({"attempts": budget}))
                self.advance_clock(max(row[1] - self.now + 1, 0))
                self.v("tq_claim", row[0], "w3", 1)
            self.settle(data, outcome)

        @precondition(lambda self: self.held)
        @rule(data=st.data(), lease=pick([None, "10ms", "1s", 0, -1]))
        def renew(self, data, lease):
            job_id, attempt = data.draw(pick(self.held))
            if lease is None:
                self.v("tq_renew", job_id, attempt)
            else:
                self.v("tq_renew", job_id, attempt, lease)

        @precondition(lambda self: self.held)
        @rule(data=st.data(), name=pick(["s1", "s2"]), value=st.one_of(st.none(), st.text(max_size=5)))
        def step(self, data, name, value):
            job_id, attempt = data.draw(pick(self.held))
            self.v("tq_step_get", job_id, name)
            self.v("tq_step_put", job_id, attempt, name, value)
            self.v("tq_progress", job_id, attempt, json.dumps({"pct": 50}))

        @rule(data=st.data())
        def cancel_or_retry(self, data):
            pool = sorted(self.ever_added) or ["a"]
            job_id = data.draw(pick(pool))
            fn = data.draw(pick(["tq_cancel", "tq_retry", "tq_get"]))
            self.v(fn, job_id)

        @rule(name=pick(["s1", "s2", "", "x" * 1001]), payload=st.one_of(st.none(), st.text(max_size=5)),
              keep=pick([None, "1s", "1d", "0ms", "x"]))
        def signal(self, name, payload, keep):
            if keep is None:
                self.v("tq_signal", name, payload)
            else:
                self.v("tq_signal", name, payload, json.dumps({"keep": keep}))
            self.v("tq_deps", name or "a")

        @rule(queue=queues, opts=queue_opts)
        def set_queue(self, queue, opts):
            self.v("tq_queue", queue, json.dumps(opts))

        @rule(ms=st.one_of(st.integers(0, 3_000), pick([30_000, 3_600_000, DAY, 8 * DAY])))
        def advance_clock(self, ms):
            self.now += ms
            self.v("tq_clock", self.now)

        @rule(since=st.one_of(st.integers(-1, 50), st.just(-2**63)), queue=st.one_of(st.none(), queues),
              limit=st.one_of(st.none(), st.integers(1, 3)))
        def observe(self, since, queue, limit):
            if queue is None:
                self.v("tq_watch", since)
                self.v("tq_stats")
            else:
                self.v("tq_watch", since, queue)
                self.v("tq_stats", queue)
                self.v("tq_jobs", queue, "waiting")
            self.v("tq_jobs")
            self.v("tq_now")
            if limit is None:
                self.v("tq_sweep")
            else:
                self.v("tq_sweep", limit)

        @rule(name=pick(["s1", "s2", "tq_s", ""]), queue=queues,
              when=pick(["* * * * *", "*/2 * * * * *", "@every 1s", "@every 150ms", "@hourly", "0 9 * * mon",
                         "30 2 * * *", "61 * * * *", "* * *", "@every 0s", "@every x", "@reboot", "0 0 30 2 *", ""]),
              opts=st.one_of(st.none(), st.fixed_dictionaries({}, optional={
                  "tz": pick(["UTC", "Europe/Paris", "America/New_York", "Mars/Base", ""]),
                  "missed": pick(["latest", "skip", "all", "some"]),
                  "paused": pick([True, False, "yes"]),
                  "meta": pick([{"t": 1}, [1], "x"]),
                  "priority": st.integers(-3, 3), "group": pick(["g1", "g2"])})))
        def schedule(self, name, queue, when, opts):
            if opts is None:
                self.v("tq_schedule", name, queue, when, "{}")
            else:
                self.v("tq_schedule", name, queue, when, "{}", json.dumps(opts))

        @rule(name=pick(["s1", "s2", "none"]))
        def unschedule(self, name):
            self.v("tq_unschedule", name)

        @rule(queue=queues, timeout=pick(WAIT_TIMEOUTS))
        def wait(self, queue, timeout):
            self.v("tq_wait", queue, timeout)

        # ---------------------------------------------------------------- rules: garbage
        @rule(call=fuzz_calls())
        def fuzz_call(self, call):
            fn, args = call
            self.call_args(fn, list(args))
            if fn == "tq_clock":   # keep the machine's clock where the model has it
                self.conn.execute("SELECT tq_clock(?)", (self.now,)).fetchall()

        @rule(fn=pick(["tq_settle", "tq_renew", "tq_step_put", "tq_progress"]),
              job=st.one_of(pick(["a", "b", "zzz"]), args_st), attempt=args_st,
              rest=st.lists(args_st, min_size=1, max_size=2))
        def fuzz_fenced(self, fn, job, attempt, rest):
            job = job if isinstance(job, Arg) else Arg(job)
            self.call_args(fn, [job, attempt] + rest)

        @rule(kind=pick(["BEGIN", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"]))
        def transaction(self, kind):
            c = self.conn
            if kind.startswith("BEGIN") and not c.in_transaction:
                c.execute(kind)
                self.saved_attempts = dict(self.attempts)
            elif kind == "COMMIT" and c.in_transaction:
                c.execute("COMMIT")
                self.saved_attempts = None
            elif kind == "ROLLBACK" and c.in_transaction:
                c.execute("ROLLBACK")
                self.attempts = self.saved_attempts
                self.saved_attempts = None

        @rule(jid=st.one_of(chosen_ids, args_st), payload=st.one_of(st.just("{}"), args_st))
        def trigger_add(self, jid, payload):
            """A user table whose trigger calls tq_add (JOB-02); an error rolls the insert back."""
            c = self.conn
            jid = jid if isinstance(jid, Arg) else Arg(jid)
            payload = payload if isinstance(payload, Arg) else Arg(payload)
            before_rows = c.execute("SELECT count(*) FROM user_rows").fetchone()[0]
            before = self.snapshot()
            in_tx = c.in_transaction
            try:
                c.execute(f"INSERT INTO user_rows VALUES ({jid.expr}, {payload.expr})", (jid.value, payload.value))
            except sqlite3.Error as e:
                msg = str(e)
                # json_object() itself rejects blobs: SQLite's own message ("JSON cannot hold
                # BLOB values" before 3.45; since, a blob is read as JSONB: "malformed JSON").
                assert msg.startswith("tq_add:") or msg in ("JSON cannot hold BLOB values", "malformed JSON"), \
                    f"trigger: {msg!r}"
                assert "internal error" not in msg, msg
                assert c.in_transaction == in_tx
                assert self.snapshot() == before, f"a failed trigger add changed the store: {msg!r}"
                assert c.execute("SELECT count(*) FROM user_rows").fetchone()[0] == before_rows
                return
            got = jid.as_name()
            if got is not None:
                self.ever_added.add(got)
            else:   # a non-text id went through json_object(): find what it became
                self.ever_added.update(r[0] for r in c.execute("SELECT id FROM tinyq_jobs WHERE queue = 'trig'"))

        # ---------------------------------------------------------------- invariants
        @invariant()
        def check_store(self):
            TALLY.setdefault("(steps)", [0, 0])[0] += 1
            c = self.conn
            if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'tinyq_jobs'").fetchone() is None:
                return
            # Events are trimmed store-wide once older than the longest keep of any queue.
            self.min_keep = min_keep_of(c, self.min_keep)
            # A job row deleted (cancel, sweep, an id re-used after its window) starts over at
            # attempt 0 when its id is added again: a temp trigger tells the model.
            if not self.hooked and not c.in_transaction:
                c.execute("CREATE TEMP TABLE deleted_jobs (id)")
                c.execute("CREATE TEMP TRIGGER log_deleted AFTER DELETE ON main.tinyq_jobs "
                          "BEGIN INSERT INTO deleted_jobs VALUES (OLD.id); END")
                self.hooked = True
            if self.hooked:
                for (jid,) in c.execute("SELECT id FROM temp.deleted_jobs").fetchall():
                    self.attempts.pop(jid, None)
                c.execute("DELETE FROM temp.deleted_jobs")
            # A schedule's jobs are added by claims, with the id '<name>@<due time>'.
            self.ever_added.update(r[0] for r in c.execute("SELECT id FROM tinyq_jobs")
                                   if r[0].split("@", 1)[0] in self.scheduled)
            check_invariants(c, self.ever_added, self.attempts, self.now, self.min_keep)

    return TinyqMachine


def main():
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    machine = build_machine()
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if LONG else [])
    cfg = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
                   phases=phases, print_blob=True, suppress_health_check=list(HealthCheck))
    start = time.monotonic()
    while time.monotonic() - start < BUDGET_S:
        run_state_machine_as_test(machine, settings=cfg)
    programs, steps = TALLY.get("(programs)", [0])[0], TALLY.get("(steps)", [0])[0]
    print(f"fuzz: {programs} programs, {steps} steps in {time.monotonic() - start:.1f}s, no failure")
    print("calls (ok/error): " + ", ".join(f"{f} {a}/{b}" for f, (a, b) in sorted(TALLY.items())))


if __name__ == "__main__":
    main()
    sys.exit(0)


# --------------------------------------------------------------------------- pytest side
import pytest  # noqa: E402


def test_fuzz_every_function_in_a_subprocess():
    """ERR-01/ERR-02: the fuzzing machine runs in its own process; it must exit 0."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        pytest.skip("python3-hypothesis is not installed (apt-get install -y python3-hypothesis)")
    env = dict(os.environ, TINYQ_EXT=EXT)
    proc = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__)], capture_output=True,
                          text=True, timeout=BUDGET_S + 240, env=env, cwd=tempfile.gettempdir())
    # The exception line first: the steps hypothesis prints can run to many kilobytes.
    errors = [line for line in proc.stderr.splitlines() if re.match(r"\w*(Error|Exception)\b", line)]
    tail = "\n".join(errors[-5:]) + "\n" + proc.stdout[-4000:] + "\n" + proc.stderr[-8000:]
    assert proc.returncode >= 0, f"the fuzzer's process was killed by signal {-proc.returncode} " \
                                 f"(the extension crashed or aborted the host):\n{tail}"
    assert proc.returncode == 0, f"fuzzing found a failure:\n{tail}"
    assert "no failure" in proc.stdout
    print(proc.stdout)  # what was run, shown by `make fuzz` (pytest -s)
