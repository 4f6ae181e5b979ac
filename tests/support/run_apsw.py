#!/usr/bin/env python3
"""Key tinyq scenarios through apsw, i.e. through a second, current SQLite (3.5x, the one apsw
carries) instead of Debian's 3.40: add/claim/settle, order, steps, watch, limits, leases,
errors, busy, transactions, triggers, DIRECTONLY, and a clean close.

Runs without pytest or tests/helpers.py (apsw lives in its own venv):

    /usr/bin/python3 -m venv /tmp/tinyq-apsw-venv
    /tmp/tinyq-apsw-venv/bin/pip install apsw
    /tmp/tinyq-apsw-venv/bin/python tests/support/run_apsw.py [path/to/tinyq.so]

Prints the SQLite version, one line per scenario, and a summary; exits 1 if any failed.
tests/test_faults.py::test_scenarios_on_a_second_sqlite_through_apsw runs it.
"""
import json
import os
import shutil
import sys
import tempfile
import traceback

import apsw

HERE = os.path.dirname(os.path.abspath(__file__))
SO = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.dirname(HERE)), "dist", "tinyq.so")
T0 = 1_800_000_000_000

SCENARIOS = []


def scenario(fn):
    SCENARIOS.append(fn)
    return fn


class Store:
    def __init__(self, path, busy_ms=5000):
        self.conn = apsw.Connection(path)
        self.conn.enable_load_extension(True)
        self.conn.load_extension(SO)
        self.conn.enable_load_extension(False)
        self.conn.set_busy_timeout(busy_ms)
        self.rows("PRAGMA journal_mode=WAL")

    def rows(self, sql, *args):
        return self.conn.execute(sql, args).fetchall()

    def one(self, sql, *args):
        r = self.rows(sql, *args)
        return r[0][0] if r else None

    def claim(self, queue, worker="w1", n=1, **opts):
        if opts:
            cur = self.conn.execute("SELECT * FROM tq_claim(?, ?, ?, ?)", (queue, worker, n, json.dumps(opts)))
        else:
            cur = self.conn.execute("SELECT * FROM tq_claim(?, ?, ?)", (queue, worker, n))
        rows = cur.fetchall()
        cols = ["id", "attempt", "payload", "group_key", "lease_until", "deadline"]
        return [dict(zip(cols, r)) for r in rows]

    def get(self, job_id):
        text = self.one("SELECT tq_get(?)", job_id)
        return None if text is None else json.loads(text)

    def snapshot(self):
        tables = [r[0] for r in self.rows(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'tinyq%' ORDER BY name")]
        return {t: self.rows(f'SELECT * FROM "{t}"') for t in tables}

    def fails(self, sql, *args, starts=None, contains=None, kind=apsw.Error):
        try:
            self.rows(sql, *args)
        except kind as e:
            msg = str(e)
            if starts is not None:
                assert msg.startswith(starts), f"{sql}: {msg!r} does not start with {starts!r}"
            if contains is not None:
                assert contains in msg, f"{sql}: {msg!r} lacks {contains!r}"
            return e
        raise AssertionError(f"no error from {sql} {args}")

    def close(self):
        self.conn.close()    # raises if tinyq left a statement unfinalized


@scenario
def version_and_debug(d):
    s = Store(os.path.join(d, "v.db"))
    version = s.one("SELECT sqlite_version()")
    debug = s.one("SELECT tq_debug()")
    assert f"sqlite {version}" in debug, debug
    assert s.one("SELECT tq_version()")
    s.close()
    return f"SQLite {version}"


@scenario
def add_claim_settle_in_order(d):
    s = Store(os.path.join(d, "a.db"))
    s.one("SELECT tq_clock(?)", T0)
    s.one("SELECT tq_add('q', '{\"n\": 1}', '{\"id\": \"low\"}')")
    s.one("SELECT tq_add('q', '{\"n\": 2}', '{\"id\": \"high\", \"priority\": 5}')")
    s.one("SELECT tq_add('q', '{\"n\": 3}', '{\"id\": \"later\", \"delay\": \"1m\"}')")
    assert s.one("SELECT tq_add('q', '{}', '{\"id\": \"low\"}')") == "low"       # dedupe
    assert s.get("later")["state"] == "scheduled"
    assert s.get("low")["ahead"] == 1
    rows = s.claim("q", "w1", 10)
    assert [r["id"] for r in rows] == ["high", "low"], rows
    assert rows[0]["payload"] == '{"n": 2}' and rows[0]["attempt"] == 1
    assert s.one("SELECT tq_settle('high', 1, 'done', '{\"sent\": true}')") == 1
    assert s.one("SELECT tq_settle('high', 1, 'done')") == 0
    job = s.get("high")
    assert job["state"] == "done" and job["result"] == {"sent": True}
    assert s.one("SELECT tq_settle('low', 1, 'error', 'boom')") == 1
    assert s.get("low")["state"] == "scheduled" and s.get("low")["error"] == "boom"
    s.one("SELECT tq_clock(?)", T0 + 60_000)
    assert [r["id"] for r in s.claim("q", "w1", 10)] == ["low", "later"]
    assert s.one("SELECT tq_settle('later', 1, 'fail', 'no')") == 1
    assert s.one("SELECT tq_retry('later')") == 1
    assert s.one("SELECT tq_cancel('later')") == 1 and s.get("later") is None
    s.close()


@scenario
def generated_ids_and_replay(d):
    ids = []
    for name in ("r1.db", "r2.db"):
        s = Store(os.path.join(d, name))
        s.one("SELECT tq_clock(?)", T0)
        ids.append([s.one("SELECT tq_add('q', '{}')") for _ in range(5)])
        s.close()
    assert ids[0] == ids[1], ids                     # REP-01
    assert all(i.startswith("tq_") and len(i) == 29 for i in ids[0])
    assert len(set(ids[0])) == 5


@scenario
def steps_survive_attempts(d):
    s = Store(os.path.join(d, "s.db"))
    s.one("SELECT tq_clock(?)", T0)
    s.one("SELECT tq_queue('q', '{\"lease\": \"10s\"}')")
    s.one("SELECT tq_add('q', '{}', '{\"id\": \"j\"}')")
    (r,) = s.claim("q")
    assert s.one("SELECT tq_step_get('j', 'answer')") is None
    assert s.one("SELECT tq_step_put('j', 1, 'answer', 'Hello!')") == "Hello!"
    assert s.one("SELECT tq_step_put('j', 1, 'answer', 'other')") == "Hello!"
    s.one("SELECT tq_clock(?)", T0 + 11_000)         # the lease runs out
    (r2,) = s.claim("q", "w2")
    assert r2["attempt"] == 2
    assert s.one("SELECT tq_step_get('j', 'answer')") == "Hello!"
    assert s.one("SELECT tq_step_put('j', 1, 'x', 'stale')") is None       # fenced
    assert s.one("SELECT tq_settle('j', 1, 'done')") == 0
    assert s.one("SELECT tq_renew('j', 1)") is None
    assert s.one("SELECT tq_progress('j', 2, '50')") == 1
    assert s.one("SELECT tq_settle('j', 2, 'done')") == 1
    s.close()


@scenario
def watch_sees_every_change_in_order(d):
    s = Store(os.path.join(d, "w.db"))
    s.one("SELECT tq_clock(?)", T0)
    s.one("SELECT tq_add('q', '{}', '{\"id\": \"a\"}')")
    s.one("SELECT tq_add('other', '{}', '{\"id\": \"b\"}')")
    (r,) = s.claim("q")
    s.one("SELECT tq_progress('a', 1, '{\"pct\": 10}')")
    s.one("SELECT tq_settle('a', 1, 'done')")
    s.one("SELECT tq_cancel('b')")
    events = s.rows("SELECT seq, id, state, attempt FROM tq_watch(0)")
    assert [(e[1], e[2]) for e in events] == [("a", "waiting"), ("b", "waiting"), ("a", "running"),
                                              ("a", "progress"), ("a", "done"), ("b", "cancelled")], events
    assert [e[0] for e in events] == sorted(e[0] for e in events)
    since = events[2][0]
    assert [e[2] for e in s.rows("SELECT seq, id, state FROM tq_watch(?, 'q')", since)] == ["progress", "done"]
    assert s.rows("SELECT state, count(*) FROM tq_jobs GROUP BY state") == [("done", 1)]
    stats = s.rows("SELECT queue, done FROM tq_stats('q')")
    assert stats == [("q", 1)], stats
    s.close()


@scenario
def limits_hold(d):
    s = Store(os.path.join(d, "l.db"))
    s.one("SELECT tq_clock(?)", T0)
    s.one("SELECT tq_queue('c', '{\"concurrency\": 2}')")
    s.one("SELECT tq_queue('r', '{\"rate\": \"3/1m\"}')")
    s.one("SELECT tq_queue('g', '{\"group_concurrency\": 1}')")
    for q in ("c", "r"):
        for i in range(5):
            s.one("SELECT tq_add(?, '{}')", q)
    for i, grp in enumerate(["x", "x", "y", "x", "z"]):
        s.one("SELECT tq_add('g', '{}', ?)", json.dumps({"id": f"g{i}", "group": grp}))
    assert len(s.claim("c", "w", 5)) == 2
    assert len(s.claim("c", "w", 5)) == 0
    first = s.claim("r", "w", 5)
    assert len(first) == 3
    assert len(s.claim("r", "w", 5)) == 0
    for r in first:
        assert s.one("SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"]) == 1
    s.one("SELECT tq_clock(?)", T0 + 60_001)
    assert len(s.claim("r", "w", 5)) == 2
    got = s.claim("g", "w", 5)
    assert [r["id"] for r in got] == ["g0", "g2", "g4"], got       # LIM-02: g1, g3 set aside
    assert s.one("SELECT tq_settle('g0', 1, 'done')") == 1
    assert [r["id"] for r in s.claim("g", "w", 5)] == ["g1"]
    s.close()


@scenario
def bad_input_is_a_named_error_that_changes_nothing(d):
    s = Store(os.path.join(d, "e.db"))
    s.one("SELECT tq_add('q', '{}', '{\"id\": \"a\"}')")
    before = s.snapshot()
    cases = [
        ("tq_add", "SELECT tq_add(NULL, '{}')"), ("tq_add", "SELECT tq_add('q', NULL)"),
        ("tq_add", "SELECT tq_add('q', '{}', '{\"delay\": \"5 minutes\"}')"),
        ("tq_add", "SELECT tq_add('q', '{}', '{\"bogus\": 1}')"), ("tq_add", "SELECT tq_add('q', '{}', 'nope')"),
        ("tq_claim", "SELECT * FROM tq_claim('q', 'w', 0)"), ("tq_claim", "SELECT * FROM tq_claim('q', 'w', 1001)"),
        ("tq_claim", "SELECT * FROM tq_claim('q', NULL, 1)"), ("tq_claim", "SELECT * FROM tq_claim('q', 'w', 1, '{\"lease\": -1}')"),
        ("tq_settle", "SELECT tq_settle('a', 1, 'nope')"), ("tq_settle", "SELECT tq_settle('a', 'x', 'done')"),
        ("tq_renew", "SELECT tq_renew('a', 1, 'forever')"), ("tq_queue", "SELECT tq_queue('q', '{\"lease\": \"1y\"}')"),
        ("tq_queue", "SELECT tq_queue('q', '{\"rate\": \"10\"}')"), ("tq_watch", "SELECT * FROM tq_watch('x')"),
        ("tq_get", "SELECT tq_get(x'ff')"), ("tq_step_put", "SELECT tq_step_put('a', 1, NULL, 'v')"),
        ("tq_clock", "SELECT tq_clock('tomorrow')"), ("tq_sweep", "SELECT tq_sweep(-1)"),
        ("tq_wait", "SELECT tq_wait('q', '2h')"), ("tq_now", "SELECT tq_now(1)"),
    ]
    for fn, sql in cases:
        s.fails(sql, starts=fn + ":")
    assert s.snapshot() == before
    s.close()


@scenario
def busy_past_timeout(d):
    path = os.path.join(d, "b.db")
    a, b = Store(path, busy_ms=200), Store(path)
    a.one("SELECT tq_add('q', '{}')")
    b.rows("BEGIN IMMEDIATE")
    e = a.fails("SELECT tq_add('q', '{}')", starts="tq_add:", contains="locked", kind=apsw.BusyError)
    a.fails("SELECT * FROM tq_claim('q', 'w', 1)", starts="tq_claim:", contains="locked", kind=apsw.BusyError)
    assert a.get(a.one("SELECT id FROM tq_jobs"))["state"] == "waiting"
    b.rows("ROLLBACK")
    assert len(a.claim("q")) == 1
    a.close()
    b.close()
    return type(e).__name__


@scenario
def transactions_and_triggers(d):
    s = Store(os.path.join(d, "t.db"))
    s.rows("BEGIN IMMEDIATE")
    s.one("SELECT tq_add('q', '{}', '{\"id\": \"rolled\"}')")
    s.rows("ROLLBACK")
    assert s.get("rolled") is None
    s.rows("CREATE TABLE orders (id TEXT)")
    s.rows("CREATE TRIGGER orders_job AFTER INSERT ON orders BEGIN "
           "SELECT tq_add('mail', json_object('order', NEW.id), json_object('id', 'mail:' || NEW.id)); END")
    s.rows("BEGIN")
    s.rows("INSERT INTO orders VALUES ('1')")
    s.rows("COMMIT")
    assert s.get("mail:1")["payload"] == {"order": "1"}
    s.rows("BEGIN")
    s.rows("INSERT INTO orders VALUES ('2')")
    s.rows("ROLLBACK")
    assert s.get("mail:2") is None
    s.rows("BEGIN IMMEDIATE")
    rows = s.claim("mail")
    s.one("SELECT tq_settle(?, ?, 'done')", rows[0]["id"], rows[0]["attempt"])
    s.rows("COMMIT")
    assert s.get("mail:1")["state"] == "done"
    s.rows("PRAGMA trusted_schema = OFF")
    s.fails("INSERT INTO orders VALUES ('3')", contains="unsafe use of tq_add")
    s.close()


@scenario
def directonly_stays_out_of_views(d):
    s = Store(os.path.join(d, "x.db"))
    s.one("SELECT tq_add('q', '{}', '{\"id\": \"a\"}')")
    s.rows("CREATE VIEW evil AS SELECT tq_sweep(), tq_queue('q', '{\"paused\": true}')")
    s.rows("CREATE VIEW claims AS SELECT * FROM tq_claim('q', 'evil', 1)")
    s.rows("CREATE VIEW fine AS SELECT tq_get('a') AS j, (SELECT count(*) FROM tq_watch(0)) AS n")
    s.fails("SELECT * FROM evil", starts="unsafe use of")
    s.fails("SELECT * FROM claims", starts="unsafe use of")
    s.rows("PRAGMA trusted_schema = OFF")
    (j, n), = s.rows("SELECT * FROM fine")
    assert json.loads(j)["state"] == "waiting" and n == 1
    s.close()


@scenario
def schedules_and_meta(d):
    s = Store(os.path.join(d, "s.db"))
    s.one("SELECT tq_clock(?)", T0)       # 2027-01-15T08:00:00Z, a Friday
    s.one("SELECT tq_schedule('digest', 'mail', '0 9 * * mon', '{\"kind\": 1}', "
          "'{\"tz\": \"Europe/Paris\", \"meta\": {\"team\": \"growth\"}, \"missed\": \"all\"}')")
    assert s.rows('SELECT name, "when", tz, next_at FROM tq_schedules') == [
        ("digest", "0 9 * * mon", "Europe/Paris", T0 + 3 * 86_400_000)]
    s.one("SELECT tq_clock(?)", T0 + 10 * 86_400_000)
    # meta is kept as given, as the options wrote it
    rows = s.rows("SELECT id, meta FROM tq_claim('mail', 'w1', 10)")
    assert rows == [("digest@2027-01-18T08:00:00Z", '{"team": "growth"}'),
                    ("digest@2027-01-25T08:00:00Z", '{"team": "growth"}')], rows
    before = s.snapshot()
    s.fails("SELECT tq_schedule('x', 'q', '61 * * * *', '{}')", starts="tq_schedule: when: bad cron expression '61")
    s.fails("SELECT tq_add('q', '{}', '{\"meta\": 5}')", starts='tq_add: option "meta" must be a JSON object')
    assert s.snapshot() == before
    assert s.one("SELECT tq_unschedule('digest')") == 1
    s.close()


@scenario
def many_connections_close_cleanly(d):
    path = os.path.join(d, "m.db")
    for i in range(50):
        s = Store(path)
        s.one("SELECT tq_add('q', '{}')")
        for r in s.claim("q", "w", 2):
            s.one("SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"])
        s.rows("SELECT count(*) FROM tq_watch(0)")
        s.close()
    s = Store(path)
    assert s.one("SELECT count(*) FROM tq_jobs WHERE state = 'done'") == 50
    s.close()


def main():
    d = tempfile.mkdtemp(prefix="tinyq-apsw-")
    passed = failed = 0
    print(f"apsw {apsw.apsw_version()}, SQLite {apsw.sqlite_lib_version()}, extension {SO}")
    try:
        for fn in SCENARIOS:
            try:
                note = fn(d)
                passed += 1
                print(f"PASS {fn.__name__}" + (f" ({note})" if note else ""))
            except Exception:
                failed += 1
                print(f"FAIL {fn.__name__}\n" + "".join("    " + l for l in traceback.format_exc().splitlines(True)))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"apsw scenarios: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
