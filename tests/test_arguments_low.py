"""ERR-01, second pass (issue 28, Low): durations, options JSON, times, outcome values,
long values in messages, misleading messages and NULL step answers.

Each refusal starts with the function's name, names the value, and changes nothing.
"""
import sqlite3

import pytest

from helpers import T0, add, claim, get, one, pin, snapshot


def refused(db, sql, args, function, *words):
    """The call fails with a message that starts with `function` and holds `words`;
    the store is as it was. Returns the message."""
    before = snapshot(db)
    with pytest.raises(sqlite3.Error) as e:
        db.execute(sql, args).fetchall()
    msg = str(e.value)
    assert msg.startswith(function + ":"), msg
    for w in words:
        assert w in msg, (w, msg)
    assert snapshot(db) == before, "a refused call changed the store"
    return msg


@pytest.fixture
def store(db):
    pin(db, T0)
    add(db, "q", '{"n": 1}', id="a")
    return db


def test_ERR_01_bare_number_text_is_a_duration_in_ms(store):
    one(store, "SELECT tq_add('q', '{}', '{\"id\": \"d\", \"delay\": \"5000\"}')")
    assert get(store, "d")["run_at"] == T0 + 5000
    one(store, "SELECT tq_add('q', '{}', '{\"id\": \"e\", \"delay\": \" 250 \"}')")
    assert get(store, "e")["run_at"] == T0 + 250
    # Where a number is a time (expires), text without a unit stays an error: not a guess.
    refused(store, "SELECT tq_add('q', '{}', ?)", ('{"expires": "5000"}',), "tq_add", "'5000'")


def test_ERR_01_options_key_given_twice_is_refused(store):
    refused(store, "SELECT tq_add('q', '{}', ?)", ('{"id": "x", "delay": "1s", "delay": "1h"}',),
            "tq_add", '"delay"', "twice")
    refused(store, "SELECT tq_queue('q', ?)", ('{"paused": true, "paused": false}',),
            "tq_queue", '"paused"', "twice")
    assert get(store, "x") is None


@pytest.mark.parametrize("at", ["1969-12-31T23:59:59Z", "1900-01-01", -1])
def test_ERR_01_times_before_1970_are_refused_as_ms_or_iso(store, at):
    shown = f"'{at}'" if isinstance(at, str) else str(at)
    refused(store, "SELECT tq_add('q', '{}', json_object('id', 'x', 'at', ?))", (at,),
            "tq_add", '"at"', shown, "out of range")


def test_ERR_01_the_epoch_itself_is_a_time(store):
    one(store, "SELECT tq_add('q', '{}', '{\"id\": \"x\", \"at\": \"1970-01-01T00:00:00Z\"}')")
    assert get(store, "x")["run_at"] == 0


@pytest.mark.parametrize("outcome", ["error", "fail"])
@pytest.mark.parametrize("value, shown", [(503, "503"), (1.5, "1.5")])
def test_ERR_01_error_and_fail_need_text_not_a_number(store, outcome, value, shown):
    assert claim(store, "q", "w1", 1)[0]["id"] == "a"
    refused(store, "SELECT tq_settle('a', 1, ?, ?)", (outcome, value), "tq_settle",
            f"'{outcome}'", "text", shown)
    assert get(store, "a")["state"] == "running"


def test_ERR_01_when_is_limited_and_messages_cut_long_values(store):
    msg = refused(store, "SELECT tq_schedule('s', 'q', ?, '{}')", ("* " * 5000,), "tq_schedule",
                  "when", "1000 bytes")
    assert len(msg) < 300, msg
    # Under the limit but wrong: the message quotes the start of the value, not all of it.
    when = "@every " + "9" * 900
    msg = refused(store, "SELECT tq_schedule('s', 'q', ?, '{}')", (when,), "tq_schedule", "'@every 999")
    assert len(msg) < 400, msg
    # The same cut wherever a value is echoed: a duration, a time, an unknown key.
    for sql, arg in [("SELECT tq_add('q', '{}', json_object('delay', ?))", "x" * 900),
                     ("SELECT tq_add('q', '{}', json_object('at', ?))", "x" * 900),
                     ("SELECT tq_add('q', '{}', json_object(?, 1))", "k" * 900)]:
        msg = refused(store, sql, (arg,), "tq_add", "xxxx" if "k" not in arg else "kkkk")
        assert len(msg) < 400, msg


def test_ERR_01_invalid_utf8_text_is_not_called_a_blob(store):
    msg = refused(store, "SELECT tq_add(CAST(x'71ff' AS TEXT), '{}')", (), "tq_add", "queue", "UTF-8")
    assert "blob" not in msg, msg
    msg = refused(store, "SELECT tq_add('q', CAST(x'7bff7d' AS TEXT))", (), "tq_add", "payload", "UTF-8")
    assert "blob" not in msg, msg


@pytest.mark.parametrize("options, words", [
    ('{"id": "\\q"}', ["not valid JSON", "escape"]),
    ('{"meta": ' + "[" * 200 + "]" * 200 + "}", ["not valid JSON", "recursion"]),
    ('{"id": ', ["not valid JSON"]),
    ("[1, 2]", ["must be a JSON object"]),
])
def test_ERR_01_bad_options_json_says_what_is_wrong(store, options, words):
    msg = refused(store, "SELECT tq_add('q', '{}', ?)", (options,), "tq_add", "options", *words)
    assert "delay" not in msg, msg  # no example that does not fit every function


def test_ERR_01_a_20_digit_integer_is_out_of_range_not_a_non_integer(store):
    msg = refused(store, "SELECT tq_add('q', '{}', ?)", ('{"priority": 12345678901234567890}',),
                  "tq_add", '"priority"', "12345678901234567890", "from")
    assert "not a number" not in msg, msg
    msg = refused(store, "SELECT id FROM tq_claim('q', 'w', ?)", ("12345678901234567890",),
                  "tq_claim", "12345678901234567890", "from")
    assert "must be an integer" not in msg, msg


def test_ERR_01_step_put_refuses_a_null_value(store):
    assert claim(store, "q", "w1", 1)[0]["id"] == "a"
    refused(store, "SELECT tq_step_put('a', 1, 'answer', NULL)", (), "tq_step_put", "value", "NULL")
    assert one(store, "SELECT tq_step_get('a', 'answer')") is None
    assert one(store, "SELECT tq_step_put('a', 1, 'answer', 'null')") == "null"


def test_ERR_01_an_infinite_number_is_not_data(store):
    refused(store, "SELECT tq_add('q', ?, '{\"id\": \"x\"}')", (float("inf"),), "tq_add", "payload", "inf")
    assert claim(store, "q", "w1", 1)[0]["id"] == "a"
    refused(store, "SELECT tq_settle('a', 1, 'done', ?)", (float("-inf"),), "tq_settle", "result", "inf")
    # Text that is not JSON stays text: kept and shown as given, not as null.
    one(store, "SELECT tq_add('q', '[Infinity]', '{\"id\": \"t\"}')")
    assert get(store, "t")["payload"] == "[Infinity]"


@pytest.mark.parametrize("sql, column", [
    ("SELECT * FROM tq_watch WHERE since > 0", "since"),
    ("SELECT * FROM tq_watch(0) WHERE of_queue <> 'q'", "of_queue"),
    ("SELECT * FROM tq_watch WHERE since IS 0", "since"),
    ("SELECT * FROM tq_steps WHERE job LIKE 'a%'", "job"),
])
def test_ERR_01_an_argument_compared_other_than_with_equals_is_an_error(db, sql, column):
    """`tq_watch WHERE since > 0` answered nothing (the rows leave their argument columns
    NULL): an argument is given with = or in the call."""
    add(db, "q", id="a")
    with pytest.raises(sqlite3.OperationalError, match=f'"{column}" is an argument: give it with ='):
        db.execute(sql).fetchall()
    assert len(db.execute("SELECT * FROM tq_watch WHERE since = 0").fetchall()) == 1
    assert len(db.execute("SELECT * FROM tq_jobs WHERE state <> 'done'").fetchall()) == 1   # visible: a filter
