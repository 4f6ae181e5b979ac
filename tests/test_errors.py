"""ERR-01 (bad input is a named SQL error and changes nothing) and ERR-02 (never abort the host).

Every case runs against a store that holds a running job ('a', attempt 1), a waiting
job ('b') and a done job ('c'), so that a bad call that did anything would show up in
`snapshot(db)`.
"""
import json
import sqlite3

import pytest

from helpers import T0, claim, connect, get, one, run_python, snapshot

BIG = 2**63 - 1
SMALL = -2**63


@pytest.fixture
def store(db):
    db.execute("SELECT tq_clock(?)", (T0,)).fetchall()
    one(db, "SELECT tq_queue('q', '{\"lease\": \"1m\"}')")
    one(db, "SELECT tq_add('q', '{\"n\": 1}', '{\"id\": \"a\"}')")
    one(db, "SELECT tq_add('q', '{\"n\": 2}', '{\"id\": \"b\"}')")
    one(db, "SELECT tq_add('q', '{\"n\": 3}', '{\"id\": \"c\", \"priority\": 9}')")
    rows = claim(db, "q", "w1", 2)
    assert [r["id"] for r in rows] == ["c", "a"]
    assert one(db, "SELECT tq_settle('c', 1, 'done', 'ok')") == 1
    return db


def _opt(**kw):
    return json.dumps(kw)


# (case id, sql, args, function name, words the message must contain;
#  a tuple of words means "one of these")
CASES = [
    # ---- tq_add: queue
    ("add-queue-null", "SELECT tq_add(?, '{}')", (None,), "tq_add", ["queue"]),
    ("add-queue-empty", "SELECT tq_add(?, '{}')", ("",), "tq_add", ["queue"]),
    ("add-queue-int", "SELECT tq_add(?, '{}')", (5,), "tq_add", ["queue"]),
    ("add-queue-blob", "SELECT tq_add(?, '{}')", (b"q",), "tq_add", ["queue"]),
    ("add-queue-too-long", "SELECT tq_add(?, '{}')", ("q" * 1001,), "tq_add", ["queue"]),
    # ---- tq_add: payload
    ("add-payload-null", "SELECT tq_add('q', ?)", (None,), "tq_add", ["payload"]),
    ("add-payload-blob", "SELECT tq_add('q', ?)", (b"\x00\x01",), "tq_add", ["payload"]),
    # ---- tq_add: options
    ("add-options-not-json", "SELECT tq_add('q', '{}', ?)", ("nope",), "tq_add", ["options"]),
    ("add-options-array", "SELECT tq_add('q', '{}', ?)", ("[1, 2]",), "tq_add", ["options"]),
    ("add-options-string", "SELECT tq_add('q', '{}', ?)", ('"id"',), "tq_add", ["options"]),
    ("add-options-truncated", "SELECT tq_add('q', '{}', ?)", ('{"id": "x"',), "tq_add", ["options"]),
    ("add-options-int", "SELECT tq_add('q', '{}', ?)", (7,), "tq_add", ["options"]),
    ("add-options-blob", "SELECT tq_add('q', '{}', ?)", (b"{}",), "tq_add", ["options"]),
    ("add-unknown-key", "SELECT tq_add('q', '{}', ?)", (_opt(bogus=1),), "tq_add", ["bogus"]),
    ("add-unknown-key-typo", "SELECT tq_add('q', '{}', ?)", (_opt(priorty=1),), "tq_add", ["priorty"]),
    ("add-id-empty", "SELECT tq_add('q', '{}', ?)", (_opt(id=""),), "tq_add", ["id"]),
    ("add-id-int", "SELECT tq_add('q', '{}', ?)", (_opt(id=5),), "tq_add", ["id"]),
    ("add-id-reserved", "SELECT tq_add('q', '{}', ?)", (_opt(id="tq_mine"),), "tq_add", ["id", "tq_"]),
    ("add-id-too-long", "SELECT tq_add('q', '{}', ?)", (_opt(id="x" * 1001),), "tq_add", ["id"]),
    ("add-delay-words", "SELECT tq_add('q', '{}', ?)", (_opt(delay="5 minutes"),), "tq_add",
     ["delay", "5 minutes"]),
    ("add-delay-unit", "SELECT tq_add('q', '{}', ?)", (_opt(delay="10x"),), "tq_add", ["delay", "10x"]),
    ("add-delay-no-number", "SELECT tq_add('q', '{}', ?)", (_opt(delay="s"),), "tq_add", ["delay"]),
    ("add-delay-empty", "SELECT tq_add('q', '{}', ?)", (_opt(delay=""),), "tq_add", ["delay"]),
    ("add-delay-two-dots", "SELECT tq_add('q', '{}', ?)", (_opt(delay="1.5.5s"),), "tq_add", ["delay"]),
    ("add-delay-negative-text", "SELECT tq_add('q', '{}', ?)", (_opt(delay="-5s"),), "tq_add", ["delay"]),
    ("add-delay-negative-int", "SELECT tq_add('q', '{}', ?)", (_opt(delay=-5),), "tq_add", ["delay"]),
    ("add-delay-bool", "SELECT tq_add('q', '{}', ?)", (_opt(delay=True),), "tq_add", ["delay"]),
    ("add-delay-float-ms", "SELECT tq_add('q', '{}', ?)", (_opt(delay=1.5),), "tq_add", ["delay"]),
    ("add-delay-nan-text", "SELECT tq_add('q', '{}', ?)", (_opt(delay="NaNs"),), "tq_add", ["delay"]),
    ("add-delay-inf-text", "SELECT tq_add('q', '{}', ?)", (_opt(delay="infs"),), "tq_add", ["delay"]),
    ("add-delay-object", "SELECT tq_add('q', '{}', ?)", ('{"delay": {"s": 1}}',), "tq_add", ["delay"]),
    ("add-at-words", "SELECT tq_add('q', '{}', ?)", (_opt(at="tomorrow"),), "tq_add", ["at", "tomorrow"]),
    ("add-at-bad-date", "SELECT tq_add('q', '{}', ?)", (_opt(at="2026-13-45T00:00:00Z"),), "tq_add",
     ["at"]),
    ("add-at-feb-30", "SELECT tq_add('q', '{}', ?)", (_opt(at="2026-02-30T12:00:00Z"),), "tq_add", ["at"]),
    ("add-at-bool", "SELECT tq_add('q', '{}', ?)", (_opt(at=True),), "tq_add", ["at"]),
    ("add-at-and-delay", "SELECT tq_add('q', '{}', ?)", (_opt(at=T0, delay="1s"),), "tq_add",
     ["at", "delay"]),
    ("add-priority-text", "SELECT tq_add('q', '{}', ?)", (_opt(priority="high"),), "tq_add", ["priority"]),
    ("add-priority-float", "SELECT tq_add('q', '{}', ?)", (_opt(priority=1.5),), "tq_add", ["priority"]),
    ("add-priority-too-big", "SELECT tq_add('q', '{}', ?)", (_opt(priority=2**31),), "tq_add", ["priority"]),
    ("add-priority-too-small", "SELECT tq_add('q', '{}', ?)", (_opt(priority=-2**31 - 1),), "tq_add",
     ["priority"]),
    ("add-group-empty", "SELECT tq_add('q', '{}', ?)", (_opt(group=""),), "tq_add", ["group"]),
    ("add-group-int", "SELECT tq_add('q', '{}', ?)", (_opt(group=5),), "tq_add", ["group"]),
    ("add-group-too-long", "SELECT tq_add('q', '{}', ?)", (_opt(group="g" * 1001),), "tq_add", ["group"]),
    ("add-attempts-zero", "SELECT tq_add('q', '{}', ?)", (_opt(attempts=0),), "tq_add", ["attempts"]),
    ("add-attempts-negative", "SELECT tq_add('q', '{}', ?)", (_opt(attempts=-1),), "tq_add", ["attempts"]),
    ("add-attempts-huge", "SELECT tq_add('q', '{}', ?)", (_opt(attempts=1_000_001),), "tq_add",
     ["attempts"]),
    ("add-attempts-text", "SELECT tq_add('q', '{}', ?)", (_opt(attempts="3"),), "tq_add", ["attempts"]),
    ("add-attempts-float", "SELECT tq_add('q', '{}', ?)", (_opt(attempts=1.5),), "tq_add", ["attempts"]),
    # ---- tq_get
    ("get-null", "SELECT tq_get(?)", (None,), "tq_get", ["id"]),
    ("get-empty", "SELECT tq_get(?)", ("",), "tq_get", ["id"]),
    ("get-blob", "SELECT tq_get(?)", (b"a",), "tq_get", ["id"]),
    # ---- tq_claim
    ("claim-queue-null", "SELECT * FROM tq_claim(?, 'w', 1)", (None,), "tq_claim", ["queue"]),
    ("claim-queue-empty", "SELECT * FROM tq_claim(?, 'w', 1)", ("",), "tq_claim", ["queue"]),
    ("claim-queue-int", "SELECT * FROM tq_claim(?, 'w', 1)", (3,), "tq_claim", ["queue"]),
    ("claim-worker-null", "SELECT * FROM tq_claim('q', ?, 1)", (None,), "tq_claim", ["worker"]),
    ("claim-worker-empty", "SELECT * FROM tq_claim('q', ?, 1)", ("",), "tq_claim", ["worker"]),
    ("claim-worker-blob", "SELECT * FROM tq_claim('q', ?, 1)", (b"w",), "tq_claim", ["worker"]),
    ("claim-n-null", "SELECT * FROM tq_claim('q', 'w', ?)", (None,), "tq_claim", ["n"]),
    ("claim-n-zero", "SELECT * FROM tq_claim('q', 'w', ?)", (0,), "tq_claim", ["n"]),
    ("claim-n-negative", "SELECT * FROM tq_claim('q', 'w', ?)", (-1,), "tq_claim", ["n"]),
    ("claim-n-too-big", "SELECT * FROM tq_claim('q', 'w', ?)", (1001,), "tq_claim", ["n"]),
    ("claim-n-huge", "SELECT * FROM tq_claim('q', 'w', ?)", (BIG,), "tq_claim", ["n"]),
    ("claim-n-most-negative", "SELECT * FROM tq_claim('q', 'w', ?)", (SMALL,), "tq_claim", ["n"]),
    ("claim-n-text", "SELECT * FROM tq_claim('q', 'w', ?)", ("ten",), "tq_claim", ["n"]),
    ("claim-n-float", "SELECT * FROM tq_claim('q', 'w', ?)", (1.5,), "tq_claim", ["n"]),
    ("claim-options-not-json", "SELECT * FROM tq_claim('q', 'w', 1, ?)", ("lease=5s",), "tq_claim",
     ["options"]),
    ("claim-unknown-key", "SELECT * FROM tq_claim('q', 'w', 1, ?)", (_opt(leese="5s"),), "tq_claim",
     ["leese"]),
    ("claim-lease-bad", "SELECT * FROM tq_claim('q', 'w', 1, ?)", (_opt(lease="forever"),), "tq_claim",
     ["lease", "forever"]),
    ("claim-lease-negative", "SELECT * FROM tq_claim('q', 'w', 1, ?)", (_opt(lease=-1000),), "tq_claim",
     ["lease"]),
    ("claim-lease-bool", "SELECT * FROM tq_claim('q', 'w', 1, ?)", (_opt(lease=True),), "tq_claim",
     ["lease"]),
    # ---- tq_renew
    ("renew-id-null", "SELECT tq_renew(?, 1)", (None,), "tq_renew", ["id"]),
    ("renew-id-empty", "SELECT tq_renew(?, 1)", ("",), "tq_renew", ["id"]),
    ("renew-attempt-null", "SELECT tq_renew('a', ?)", (None,), "tq_renew", ["attempt"]),
    ("renew-attempt-text", "SELECT tq_renew('a', ?)", ("one",), "tq_renew", ["attempt"]),
    ("renew-attempt-float", "SELECT tq_renew('a', ?)", (1.5,), "tq_renew", ["attempt"]),
    ("renew-attempt-negative", "SELECT tq_renew('a', ?)", (-1,), "tq_renew", ["attempt"]),
    ("renew-lease-bad", "SELECT tq_renew('a', 1, ?)", ("a while",), "tq_renew", ["lease", "a while"]),
    ("renew-lease-negative", "SELECT tq_renew('a', 1, ?)", ("-5s",), "tq_renew", ["lease"]),
    ("renew-lease-blob", "SELECT tq_renew('a', 1, ?)", (b"5s",), "tq_renew", ["lease"]),
    # ---- tq_settle
    ("settle-id-null", "SELECT tq_settle(?, 1, 'done')", (None,), "tq_settle", ["id"]),
    ("settle-attempt-null", "SELECT tq_settle('a', ?, 'done')", (None,), "tq_settle", ["attempt"]),
    ("settle-attempt-text", "SELECT tq_settle('a', ?, 'done')", ("first",), "tq_settle", ["attempt"]),
    ("settle-attempt-negative", "SELECT tq_settle('a', ?, 'done')", (-1,), "tq_settle", ["attempt"]),
    ("settle-outcome-unknown", "SELECT tq_settle('a', 1, ?)", ("finished",), "tq_settle",
     ["outcome", "finished"]),
    ("settle-outcome-null", "SELECT tq_settle('a', 1, ?)", (None,), "tq_settle", ["outcome"]),
    ("settle-outcome-empty", "SELECT tq_settle('a', 1, ?)", ("",), "tq_settle", ["outcome"]),
    ("settle-outcome-int", "SELECT tq_settle('a', 1, ?)", (1,), "tq_settle", ["outcome"]),
    ("settle-done-blob", "SELECT tq_settle('a', 1, 'done', ?)", (b"\x00",), "tq_settle",
     [("value", "result")]),
    ("settle-error-no-text", "SELECT tq_settle('a', 1, 'error')", (), "tq_settle", [("error", "value")]),
    ("settle-error-null", "SELECT tq_settle('a', 1, 'error', ?)", (None,), "tq_settle",
     [("error", "value")]),
    ("settle-error-empty", "SELECT tq_settle('a', 1, 'error', ?)", ("",), "tq_settle",
     [("error", "value")]),
    ("settle-snooze-no-delay", "SELECT tq_settle('a', 1, 'snooze')", (), "tq_settle",
     [("delay", "value")]),
    ("settle-snooze-bad-delay", "SELECT tq_settle('a', 1, 'snooze', ?)", ("soon",), "tq_settle",
     ["soon"]),
    ("settle-snooze-negative", "SELECT tq_settle('a', 1, 'snooze', ?)", (-5,), "tq_settle",
     [("delay", "value", "negative", "duration")]),
    ("settle-retry-bad-delay", "SELECT tq_settle('a', 1, 'retry', ?)", ("later",), "tq_settle",
     ["later"]),
    ("settle-retry-negative", "SELECT tq_settle('a', 1, 'retry', ?)", ("-1s",), "tq_settle",
     [("delay", "value", "negative", "duration")]),
    ("settle-fail-no-reason", "SELECT tq_settle('a', 1, 'fail')", (), "tq_settle",
     [("reason", "value")]),
    ("settle-fail-empty", "SELECT tq_settle('a', 1, 'fail', ?)", ("",), "tq_settle",
     [("reason", "value")]),
    # ---- tq_queue
    ("queue-name-null", "SELECT tq_queue(?)", (None,), "tq_queue", [("name", "queue")]),
    ("queue-name-empty", "SELECT tq_queue(?)", ("",), "tq_queue", [("name", "queue")]),
    ("queue-set-name-null", "SELECT tq_queue(?, '{}')", (None,), "tq_queue", [("name", "queue")]),
    ("queue-name-too-long", "SELECT tq_queue(?, '{}')", ("q" * 1001,), "tq_queue", [("name", "queue")]),
    ("queue-options-not-json", "SELECT tq_queue('q', ?)", ("lease: 5s",), "tq_queue", ["options"]),
    ("queue-options-array", "SELECT tq_queue('q', ?)", ('["lease"]',), "tq_queue", ["options"]),
    ("queue-unknown-setting", "SELECT tq_queue('q', ?)", (_opt(retries=3),), "tq_queue", ["retries"]),
    ("queue-unknown-setting-case", "SELECT tq_queue('q', ?)", (_opt(Lease="5s"),), "tq_queue", ["Lease"]),
    ("queue-lease-bad", "SELECT tq_queue('q', ?)", (_opt(lease="forever"),), "tq_queue",
     ["lease", "forever"]),
    ("queue-lease-negative", "SELECT tq_queue('q', ?)", (_opt(lease=-1),), "tq_queue", ["lease"]),
    ("queue-timeout-bad", "SELECT tq_queue('q', ?)", (_opt(timeout="1 hour"),), "tq_queue",
     ["timeout", "1 hour"]),
    ("queue-timeout-array", "SELECT tq_queue('q', ?)", (_opt(timeout=[1]),), "tq_queue", ["timeout"]),
    ("queue-attempts-zero", "SELECT tq_queue('q', ?)", (_opt(attempts=0),), "tq_queue", ["attempts"]),
    ("queue-attempts-huge", "SELECT tq_queue('q', ?)", (_opt(attempts=1_000_001),), "tq_queue",
     ["attempts"]),
    ("queue-attempts-text", "SELECT tq_queue('q', ?)", (_opt(attempts="5"),), "tq_queue", ["attempts"]),
    ("queue-backoff-bad", "SELECT tq_queue('q', ?)", (_opt(backoff="fast"),), "tq_queue",
     ["backoff", "fast"]),
    ("queue-backoff-negative", "SELECT tq_queue('q', ?)", (_opt(backoff="-1s"),), "tq_queue", ["backoff"]),
    ("queue-backoff-max-bad", "SELECT tq_queue('q', ?)", (_opt(backoff_max="1 hr"),), "tq_queue",
     ["backoff_max"]),
    ("queue-paused-text", "SELECT tq_queue('q', ?)", (_opt(paused="yes"),), "tq_queue", ["paused"]),
    ("queue-paused-object", "SELECT tq_queue('q', ?)", ('{"paused": {}}',), "tq_queue", ["paused"]),
    # ---- tq_clock
    ("clock-words", "SELECT tq_clock(?)", ("yesterday",), "tq_clock", ["yesterday"]),
    ("clock-bad-date", "SELECT tq_clock(?)", ("2026-02-30T00:00:00Z",), "tq_clock", ["2026-02-30"]),
    ("clock-blob", "SELECT tq_clock(?)", (b"\x01",), "tq_clock", [("time", "clock", "ms")]),
]


@pytest.mark.parametrize("sql,args,fname,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ERR_01_bad_input_is_named_error_and_changes_nothing(store, sql, args, fname, needles):
    before = snapshot(store)
    with pytest.raises(sqlite3.Error) as info:
        store.execute(sql, args).fetchall()
    message = str(info.value)
    assert message.startswith(fname + ":"), f"message does not start with {fname}: {message!r}"
    for needle in needles:
        options = needle if isinstance(needle, tuple) else (needle,)
        assert any(o.lower() in message.lower() for o in options), \
            f"message does not name {needle!r}: {message!r}"
    assert snapshot(store) == before, "a failed call changed the store"
    assert one(store, "SELECT tq_now()") == T0, "a failed call moved the pinned clock"
    # the store is still usable and in the state the fixture left it in
    assert get(store, "a")["state"] == "running"
    assert get(store, "b")["state"] == "waiting"


def test_ERR_01_example_message_from_the_design(store):
    with pytest.raises(sqlite3.Error) as info:
        one(store, "SELECT tq_add('q', '{}', '{\"delay\": \"5 minutes\"}')")
    message = str(info.value)
    assert message.startswith('tq_add: option "delay": bad duration '), message
    assert "'5 minutes'" in message, "design.md: keys in double quotes, values in single quotes"


WRONG_ARITY = [
    ("tq_add", "SELECT tq_add('q')"),
    ("tq_add", "SELECT tq_add('q', '{}', '{}', '{}')"),
    ("tq_get", "SELECT tq_get()"),
    ("tq_get", "SELECT tq_get('a', 'b')"),
    ("tq_renew", "SELECT tq_renew('a')"),
    ("tq_renew", "SELECT tq_renew('a', 1, '5s', 'x')"),
    ("tq_settle", "SELECT tq_settle('a', 1)"),
    ("tq_settle", "SELECT tq_settle('a', 1, 'done', 'v', 'extra')"),
    ("tq_queue", "SELECT tq_queue()"),
    ("tq_queue", "SELECT tq_queue('q', '{}', '{}')"),
    ("tq_clock", "SELECT tq_clock(1, 2)"),
    ("tq_now", "SELECT tq_now(1)"),
    ("tq_version", "SELECT tq_version(1)"),
    ("tq_debug", "SELECT tq_debug(1)"),
    ("tq_claim", "SELECT * FROM tq_claim('q', 'w')"),
    ("tq_claim", "SELECT * FROM tq_claim('q')"),
]


@pytest.mark.parametrize("fname,sql", WRONG_ARITY, ids=[s for _, s in WRONG_ARITY])
def test_ERR_01_wrong_number_of_arguments_is_an_error_naming_the_function(store, fname, sql):
    before = snapshot(store)
    with pytest.raises(sqlite3.Error) as info:
        store.execute(sql).fetchall()
    assert fname in str(info.value), str(info.value)
    assert snapshot(store) == before


def test_ERR_01_settle_with_bad_value_on_live_attempt_leaves_it_running(store):
    with pytest.raises(sqlite3.Error):
        one(store, "SELECT tq_settle('a', 1, 'snooze', 'soon')")
    assert get(store, "a")["state"] == "running"
    assert one(store, "SELECT tq_settle('a', 1, 'done')") == 1, "the attempt still holds the job"


def test_ERR_01_error_inside_a_transaction_keeps_the_transaction_usable(store):
    store.execute("CREATE TABLE notes(x)")
    store.execute("BEGIN IMMEDIATE")
    store.execute("INSERT INTO notes VALUES ('before')")
    one(store, "SELECT tq_add('q', '{}', '{\"id\": \"good-1\"}')")
    with pytest.raises(sqlite3.Error) as info:
        one(store, "SELECT tq_add('q', '{}', '{\"id\": \"bad\", \"delay\": \"soonish\"}')")
    assert str(info.value).startswith("tq_add:")
    assert store.in_transaction, "an argument error does not end the caller's transaction"
    one(store, "SELECT tq_add('q', '{}', '{\"id\": \"good-2\"}')")
    store.execute("INSERT INTO notes VALUES ('after')")
    store.execute("COMMIT")
    assert [r[0] for r in store.execute("SELECT x FROM notes")] == ["before", "after"]
    assert get(store, "good-1") and get(store, "good-2")
    assert get(store, "bad") is None


def test_ERR_01_bad_add_in_a_trigger_fails_the_statement_and_changes_nothing(store):
    store.executescript("""
        PRAGMA trusted_schema = ON;
        CREATE TABLE orders(id INTEGER PRIMARY KEY, delay TEXT);
        CREATE TRIGGER orders_job AFTER INSERT ON orders BEGIN
            SELECT tq_add('ship', '{}', json_object('id', 'ship:' || NEW.id, 'delay', NEW.delay));
        END;
    """)
    store.execute("INSERT INTO orders VALUES (1, '1s')")
    before = snapshot(store)
    with pytest.raises(sqlite3.Error) as info:
        store.execute("INSERT INTO orders VALUES (2, 'whenever')")
    assert "tq_add:" in str(info.value) and "whenever" in str(info.value)
    assert one(store, "SELECT count(*) FROM orders") == 1
    assert snapshot(store) == before


def test_ERR_01_failed_clock_keeps_previous_pin(db):
    db.execute("SELECT tq_clock(?)", (T0,)).fetchall()
    with pytest.raises(sqlite3.Error):
        db.execute("SELECT tq_clock('next tuesday')").fetchall()
    assert one(db, "SELECT tq_now()") == T0


def test_ERR_01_bad_input_on_a_database_without_store_creates_nothing(db):
    for sql in ("SELECT tq_add(NULL, '{}')",
                "SELECT tq_add('q', '{}', '{\"bogus\": 1}')",
                "SELECT tq_queue('q', '{\"lease\": \"never\"}')",
                "SELECT * FROM tq_claim('q', 'w', 0)",
                "SELECT tq_settle('a', 1, 'finished')"):
        with pytest.raises(sqlite3.Error):
            db.execute(sql).fetchall()
    assert db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'tinyq%'").fetchall() == []


# ---------------------------------------------------------------- ERR-02

HOSTILE_INPUTS = r'''
import json, sqlite3, sys
from helpers import connect
db = connect(sys.argv[1])
BIG, SMALL = 2**63 - 1, -2**63
errors = ok = 0

def attempt(sql, *args):
    global errors, ok
    try:
        db.execute(sql, args).fetchall()
        ok += 1
    except sqlite3.Error:
        errors += 1

db.execute("SELECT tq_clock(1800000000000)").fetchall()
attempt("SELECT tq_add('h', '{}', '{\"id\": \"seed\"}')")

# huge and strange text
attempt("SELECT tq_add(?, '{}')", "q" * 5_000_000)
attempt("SELECT tq_add('h', ?)", "p" * 20_000_000)
attempt("SELECT tq_add('h', '{}', ?)", json.dumps({"id": "i" * 2_000_000}))
attempt("SELECT tq_add(CAST(x'fffe' AS TEXT), '{}')")
attempt("SELECT tq_add('h', CAST(x'c328' AS TEXT))")
attempt("SELECT tq_add('h', '{}', CAST(x'7b226964223a22ff227d' AS TEXT))")   # {"id":"\xff"}
attempt("SELECT tq_add('h', '{}', CAST(x'7b226964223a22610062227d' AS TEXT))") # NUL inside
attempt("SELECT tq_add(CAST(x'610062' AS TEXT), '{}')")
attempt("SELECT tq_get(CAST(x'ff' AS TEXT))")
attempt("SELECT tq_add('h', '{}', ?)", "[" * 200_000 + "]" * 200_000)
attempt("SELECT tq_add('h', '{}', ?)", '{"id":' * 100_000)
attempt("SELECT tq_add('h', '{}', ?)", '{"group": ' + "[" * 100_000 + "]" * 100_000 + "}")
attempt("SELECT tq_add('h', '{}', ?)", '{"id": "\\ud800"}')
attempt("SELECT tq_add('h', '{}', ?)", '{"id": "d1", "id": "d2"}')
attempt("SELECT tq_add('h', '{}', ?)", '{"priority": 1e999}')
attempt("SELECT tq_add('h', '{}', ?)", '{"priority": 99999999999999999999999}')
attempt("SELECT tq_add('h', '{}', ?)", '{"attempts": 18446744073709551616}')

# extreme numbers and durations
for d in ["99999999999999999999d", "1e308d", "1e400ms", "inf s", "infs", "NaNs", "-0s", "0.0000001ms",
          "9223372036854775807ms", "9223372036854775807d", "1.7976931348623157e308h", "1e-400s"]:
    attempt("SELECT tq_add('h', '{}', ?)", json.dumps({"delay": d}))
    attempt("SELECT tq_queue('hq', ?)", json.dumps({"lease": d}))
    attempt("SELECT tq_queue('hq', ?)", json.dumps({"backoff": d, "backoff_max": d}))
    attempt("SELECT * FROM tq_claim('h', 'w', 1, ?)", json.dumps({"lease": d}))
for v in [BIG, SMALL, BIG // 2, -1, 0]:
    attempt("SELECT tq_add('h', '{}', ?)", json.dumps({"delay": v}))
    attempt("SELECT tq_add('h', '{}', ?)", json.dumps({"at": v}))
    attempt("SELECT tq_add('h', '{}', ?)", json.dumps({"priority": v}))
    attempt("SELECT tq_add('h', '{}', ?)", json.dumps({"attempts": v}))
    attempt("SELECT * FROM tq_claim('h', 'w', ?)", v)
    attempt("SELECT tq_renew('seed', ?)", v)
    attempt("SELECT tq_renew('seed', 1, ?)", v)
    attempt("SELECT tq_settle('seed', ?, 'done')", v)
    attempt("SELECT tq_settle('seed', 1, 'snooze', ?)", v)
    attempt("SELECT tq_settle('seed', 1, 'retry', ?)", v)
    attempt("SELECT tq_queue('hq', ?)", json.dumps({"lease": v, "timeout": v}))
    attempt("SELECT tq_queue('hq', ?)", json.dumps({"attempts": v}))
for f in [float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 5e-324]:
    attempt("SELECT * FROM tq_claim('h', 'w', ?)", f)
    attempt("SELECT tq_renew('seed', ?)", f)
    attempt("SELECT tq_settle('seed', ?, 'done')", f)
    attempt("SELECT tq_clock(?)", f)
    attempt("SELECT tq_add('h', ?)", f)
for at in ["+275760-09-13T00:00:00Z", "9999-12-31T23:59:59.999Z", "0000-01-01T00:00:00Z",
           "-0001-01-01T00:00:00Z", "2026-01-01T00:00:00+99:99", "2026-01-01T24:00:00Z",
           "1970-01-01T00:00:00.9999999999999999999Z", "T", "", "Z"]:
    attempt("SELECT tq_add('h', '{}', ?)", json.dumps({"at": at}))
    attempt("SELECT tq_clock(?)", at)
db.execute("SELECT tq_clock(1800000000000)").fetchall()

# a pinned clock at the edges of time, then everything
for edge in [BIG, SMALL, BIG - 1000, SMALL + 1000, 253402300799999, -62135596800000]:
    attempt("SELECT tq_clock(?)", edge)
    attempt("SELECT tq_now()")
    attempt("SELECT tq_add('edge', '{}')")
    attempt("SELECT tq_add('edge', '{}', '{\"delay\": \"7d\"}')")
    attempt("SELECT tq_add('edge', '{}', '{\"at\": \"2026-01-01T00:00:00Z\"}')")
    attempt("SELECT * FROM tq_claim('edge', 'w', 1000, '{\"lease\": \"1000000d\"}')")
    try:
        job_ids = [r[0] for r in db.execute("SELECT id FROM tinyq_jobs LIMIT 50")]
    except sqlite3.Error:
        job_ids = []
    for jid in job_ids:
        row = (jid,)
        attempt("SELECT tq_get(?)", row[0])
        for k in range(1, 4):
            attempt("SELECT tq_renew(?, ?, '1000000d')", row[0], k)
            attempt("SELECT tq_settle(?, ?, 'error', 'x')", row[0], k)
            attempt("SELECT tq_settle(?, ?, 'snooze', '1000000d')", row[0], k)
    attempt("SELECT tq_queue('edge')")
db.execute("SELECT tq_clock(1800000000000)").fetchall()

# a job that errors many times with enormous backoff: 2^k must not overflow into a crash
attempt("SELECT tq_queue('boom', ?)", json.dumps({"backoff": "100000d", "backoff_max": "1000000000d",
                                                    "attempts": 1000000, "lease": "1000000d"}))
attempt("SELECT tq_add('boom', '{}', '{\"id\": \"boom\"}')")
for k in range(1, 90):
    rows = []
    try:
        rows = db.execute("SELECT * FROM tq_claim('boom', 'w', 1)").fetchall()
    except sqlite3.Error:
        errors += 1
    for r in rows:
        attempt("SELECT tq_settle(?, ?, 'error', 'again')", r[0], r[1])
    try:
        run_at = json.loads(db.execute("SELECT tq_get('boom')").fetchone()[0] or "{}").get("run_at")
        if isinstance(run_at, int):
            db.execute("SELECT tq_clock(?)", (run_at,)).fetchall()
    except (sqlite3.Error, TypeError, ValueError):
        errors += 1
db.execute("SELECT tq_clock(1800000000000)").fetchall()

# table-valued function used in odd ways
attempt("SELECT * FROM tq_claim('h', 'w', 1), tq_claim('h', 'w', 1)")
attempt("SELECT c.* FROM (SELECT 'h' AS qn UNION ALL SELECT NULL) t, tq_claim(t.qn, 'w', 2) c")
attempt("SELECT * FROM tq_claim('h', 'w', 5) WHERE attempt > 0 ORDER BY id DESC LIMIT 1")
attempt("SELECT tq_settle(id, attempt, 'done') FROM tq_claim('h', 'w', 3)")
attempt("SELECT * FROM tq_claim")
attempt("SELECT * FROM tq_claim(NULL, NULL, NULL, NULL)")
attempt("SELECT * FROM tq_claim('h', 'w', 1, NULL)")
attempt("SELECT * FROM tq_claim('h', 'w', 1) WHERE 0")
attempt("SELECT * FROM tq_claim('h', 'w', (SELECT 2))")
attempt("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) "
        "SELECT tq_add('h', i) FROM n")
attempt("SELECT * FROM tq_claim('h', 'w', 1000)")

# giant values into every settle outcome
attempt("SELECT tq_add('big', '{}', '{\"id\": \"big\"}')")
for outcome in ["done", "error", "fail", "snooze", "retry"]:
    try:
        rows = db.execute("SELECT * FROM tq_claim('big', 'w', 1)").fetchall()
    except sqlite3.Error:
        rows, errors = [], errors + 1
    for r in rows:
        attempt("SELECT tq_settle(?, ?, ?, ?)", r[0], r[1], outcome, "v" * 10_000_000)
        attempt("SELECT tq_settle(?, ?, 'snooze', '1ms')", r[0], r[1])
    attempt("SELECT tq_clock(tq_now() + 60000)")

# loading the extension a second time into the same connection
try:
    db.enable_load_extension(True)
    db.load_extension(__import__("os").environ["TINYQ_EXT"])
except sqlite3.Error:
    errors += 1
attempt("SELECT tq_add('h', '{}')")

# the store still works normally afterwards
db.execute("SELECT tq_clock(NULL)").fetchall()
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
jid = db.execute("SELECT tq_add('after', '{\"fine\": true}')").fetchone()[0]
rows = db.execute("SELECT id, attempt FROM tq_claim('after', 'w', 1)").fetchall()
assert rows == [(jid, 1)], rows
assert db.execute("SELECT tq_settle(?, 1, 'done')", (jid,)).fetchone()[0] == 1
print("survived", ok, errors)
'''


def test_ERR_02_hostile_inputs_never_crash_the_process(db_path):
    proc = run_python(HOSTILE_INPUTS, db_path, timeout=240)
    assert proc.returncode == 0, \
        f"process ended with {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-4000:]}"
    assert proc.stdout.startswith("survived"), proc.stdout


TAMPERED_STORE = r'''
import json, sqlite3, sys
from helpers import connect
path, mode = sys.argv[1], sys.argv[2]
db = connect(path)
errors = 0

def attempt(sql, *args):
    global errors
    try:
        return db.execute(sql, args).fetchall()
    except sqlite3.Error:
        errors += 1
        return []

def workload():
    attempt("SELECT tq_add('t', '{}')")
    attempt("SELECT tq_add('t', '{}', '{\"id\": \"fresh\"}')")
    for r in attempt("SELECT * FROM tq_claim('t', 'w', 10)"):
        attempt("SELECT tq_renew(?, ?)", r[0], r[1])
        attempt("SELECT tq_settle(?, ?, 'error', 'x')", r[0], r[1])
    for jid in ("j0", "j1", "j2", "j3", "fresh"):
        attempt("SELECT tq_get(?)", jid)
        attempt("SELECT tq_settle(?, 1, 'done')", jid)
        attempt("SELECT tq_renew(?, 1)", jid)
    attempt("SELECT tq_queue('t')")
    attempt("SELECT tq_queue('t', '{\"lease\": \"5s\"}')")
    attempt("SELECT tq_debug()")

if mode == "squatter":
    # a user table that happens to use tinyq's name, before tinyq ever ran
    db.execute("CREATE TABLE tinyq_jobs(x)")
    db.execute("CREATE TABLE tinyq_meta(a, b, c)")
    db.execute("INSERT INTO tinyq_meta VALUES ('schema_version', 'banana', x'00')")
    workload()
else:
    db.execute("SELECT tq_clock(1800000000000)").fetchall()
    for k in range(4):
        db.execute("SELECT tq_add('t', ?, ?)", (json.dumps({"k": k}), json.dumps({"id": f"j{k}"}))).fetchall()
    db.execute("SELECT * FROM tq_claim('t', 'w', 2)").fetchall()
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'tinyq%'")]
    if mode == "garbage":
        for t in tables:
            cols = [r[1] for r in db.execute(f'PRAGMA table_info("{t}")')]
            for c in cols:
                for bad in ("garbage", -1, 2**63 - 1, 1.5, b"\xff\x00", None):
                    attempt(f'UPDATE "{t}" SET "{c}" = ?', bad)
                    workload()
    elif mode == "dropped":
        for t in tables:
            attempt(f'DROP TABLE "{t}"')
            workload()
print("survived", errors)
'''


@pytest.mark.parametrize("mode", ["squatter", "garbage", "dropped"])
def test_ERR_02_tampered_store_never_crashes_the_process(db_path, mode):
    proc = run_python(TAMPERED_STORE, db_path, mode, timeout=240)
    assert proc.returncode == 0, \
        f"process ended with {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-4000:]}"
    assert proc.stdout.startswith("survived"), proc.stdout


READ_ONLY = r'''
import sqlite3, sys, os
from helpers import connect
path = sys.argv[1]
rw = connect(path)
rw.execute("SELECT tq_add('ro', '{}', '{\"id\": \"x\"}')").fetchall()
rw.execute("SELECT * FROM tq_claim('ro', 'w', 1)").fetchall()          # x: running, attempt 1
rw.execute("SELECT tq_add('ro', '{}', '{\"id\": \"y\"}')").fetchall()  # y: waiting
rw.close()
ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
ro.enable_load_extension(True)
ro.load_extension(os.environ["TINYQ_EXT"])
assert ro.execute("SELECT json_extract(tq_get('y'), '$.state')").fetchone()[0] == "waiting"
for sql in ["SELECT tq_add('ro', '{}')", "SELECT * FROM tq_claim('ro', 'w', 1)",
            "SELECT tq_settle('x', 1, 'done')", "SELECT tq_renew('x', 1)",
            "SELECT tq_queue('ro', '{\"lease\": \"5s\"}')"]:
    try:
        ro.execute(sql).fetchall()
        print("no error for", sql)
    except sqlite3.Error as e:
        msg = str(e)
        assert msg.startswith("tq_"), msg
print("survived")
'''


def test_ERR_02_read_only_database_gives_errors_not_crashes(db_path):
    proc = run_python(READ_ONLY, db_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "survived" in proc.stdout
    assert "no error for" not in proc.stdout, proc.stdout


RECURSIVE_TRIGGER = r'''
import sqlite3, sys
from helpers import connect
db = connect(sys.argv[1])
db.execute("PRAGMA trusted_schema = ON")
db.execute("SELECT tq_add('loop', '{}')").fetchall()
db.execute("CREATE TRIGGER again AFTER INSERT ON tinyq_jobs BEGIN SELECT tq_add('loop', '{}'); END")
try:
    db.execute("SELECT tq_add('loop', '{}')").fetchall()
    print("no error")
except sqlite3.Error as e:
    print("error:", e)
print("survived")
'''


def test_ERR_02_trigger_recursing_through_tq_add_does_not_crash(db_path):
    proc = run_python(RECURSIVE_TRIGGER, db_path, timeout=120)
    assert proc.returncode == 0, \
        f"process ended with {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
    assert "survived" in proc.stdout
    assert "error: tq_add:" in proc.stdout, "the runaway recursion ends as a tq_add error"
    assert "tq_add: tq_add:" not in proc.stdout, f"prefix repeated per nesting level: {proc.stdout[:200]}"
