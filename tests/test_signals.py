"""SIG-01: a signal wakes every job that waits for it, exactly once each, whether the wait
began before it or after it (within its keep); a wait whose timeout passes first runs again
without it. tq_signal is callable from triggers, in the transaction of the row."""
import json
import sqlite3

import pytest

from helpers import add, claim, connect, get, one, pin, setq, snapshot, sweep, watch

NOW = 1_900_000_000_000


def wait_signal(db, queue, job_id, name, timeout=None):
    (row,) = claim(db, queue, "w", 1)
    assert row["id"] == job_id
    value = {"signal": name} if timeout is None else {"signal": name, "timeout": timeout}
    assert one(db, "SELECT tq_settle(?, ?, 'wait', ?)", job_id, row["attempt"], json.dumps(value)) == 1
    return row


def step(db, job_id, name):
    return one(db, "SELECT tq_step_get(?, ?)", job_id, name)


def test_SIG_01_signal_after_the_wait_wakes_the_job_with_the_payload(db):
    pin(db, NOW)
    add(db, "triage", "{}", id="t1")
    wait_signal(db, "triage", "t1", "approve:ticket-1", "7d")
    job = get(db, "t1")
    assert (job["state"], job["tries"]) == ("blocked", 0)
    assert job["blocked_on"] == {"signal": "approve:ticket-1", "until": NOW + 7 * 86_400_000}
    assert claim(db, "triage", "w", 5) == []
    assert one(db, "SELECT tq_signal('approve:ticket-1', '{\"by\": \"ana\"}')") == 1
    assert get(db, "t1")["state"] == "waiting"
    assert step(db, "t1", "signal:approve:ticket-1") == '{"by": "ana"}'
    (row,) = claim(db, "triage", "w", 1)
    assert (row["id"], row["attempt"]) == ("t1", 2)
    assert get(db, "t1")["tries"] == 1
    # first payload wins; a resend while kept changes nothing
    assert one(db, "SELECT tq_signal('approve:ticket-1', 'again')") == 0
    assert [e["state"] for e in watch(db) if e["id"] == "t1"] == ["waiting", "running", "blocked", "waiting", "running"]


def test_SIG_01_signal_before_the_wait_returns_at_once(db):
    pin(db, NOW)
    assert one(db, "SELECT tq_signal('go', '1')") == 0
    add(db, "q", "{}", id="late")
    wait_signal(db, "q", "late", "go", "1h")
    assert get(db, "late")["state"] == "waiting"
    assert step(db, "late", "signal:go") == "1"
    # past its keep, the signal is gone (swept), and a new wait blocks
    pin(db, NOW + 7 * 86_400_000)
    assert sweep(db) >= 1
    add(db, "q", "{}", id="later")
    claim(db, "q", "w", 1)  # 'late' again
    wait_signal(db, "q", "later", "go")
    assert get(db, "later")["state"] == "blocked"
    assert get(db, "later")["blocked_on"] == {"signal": "go", "until": None}


def test_SIG_01_keep_option_and_resend_after_keep(db):
    pin(db, NOW)
    assert one(db, "SELECT tq_signal('s', 'first', '{\"keep\": \"1m\"}')") == 0
    pin(db, NOW + 60_000)
    add(db, "q", "{}", id="j")
    wait_signal(db, "q", "j", "s")
    assert get(db, "j")["state"] == "blocked"  # the signal was past its keep
    assert one(db, "SELECT tq_signal('s', 'second')") == 1
    assert step(db, "j", "signal:s") == "second"


def test_SIG_01_timeout_runs_again_without_the_step(db):
    pin(db, NOW)
    add(db, "q", "{}", id="j")
    wait_signal(db, "q", "j", "never", "10m")
    pin(db, NOW + 600_000 - 1)
    assert claim(db, "q", "w", 1) == []
    pin(db, NOW + 600_000)
    (row,) = claim(db, "q", "w", 1)
    assert row["id"] == "j"
    assert step(db, "j", "signal:never") is None
    assert one(db, "SELECT tq_signal('never', 'late')") == 0  # it no longer waits


def test_SIG_01_many_waiters_each_woken_once(db):
    for i in range(50):
        add(db, "q", "{}", id=f"j{i}")
    rows = claim(db, "q", "w", 50)
    db.execute("BEGIN")
    for r in rows:
        one(db, "SELECT tq_settle(?, ?, 'wait', '{\"signal\": \"deploy\"}')", r["id"], r["attempt"])
    db.execute("COMMIT")
    assert db.execute("SELECT blocked FROM tq_stats('q')").fetchone() == (50,)
    assert one(db, "SELECT tq_signal('deploy', 'v2')") == 50
    assert one(db, "SELECT tq_signal('deploy', 'v2')") == 0
    assert db.execute("SELECT blocked, waiting FROM tq_stats('q')").fetchone() == (0, 50)
    assert {step(db, f"j{i}", "signal:deploy") for i in range(50)} == {"v2"}


def test_SIG_01_signal_from_a_trigger_commits_or_rolls_back_with_the_row(db):
    add(db, "triage", "{}", id="t1")
    wait_signal(db, "triage", "t1", "approve:1")
    db.executescript("""
        PRAGMA trusted_schema = ON;
        CREATE TABLE approvals (ticket INTEGER, who TEXT);
        CREATE TRIGGER approvals_signal AFTER INSERT ON approvals BEGIN
            SELECT tq_signal('approve:' || NEW.ticket, json_object('by', NEW.who));
        END;
    """)
    db.execute("BEGIN")
    db.execute("INSERT INTO approvals VALUES (1, 'ana')")
    assert get(db, "t1")["state"] == "waiting"
    db.execute("ROLLBACK")
    assert get(db, "t1")["state"] == "blocked"  # rolled back: no wake, no signal kept
    assert step(db, "t1", "signal:approve:1") is None
    db.execute("INSERT INTO approvals VALUES (1, 'bo')")
    assert get(db, "t1")["state"] == "waiting"
    assert step(db, "t1", "signal:approve:1") == '{"by":"bo"}'


def test_SIG_01_wait_is_fenced_by_attempt(db):
    setq(db, "q", lease="1s")
    pin(db, NOW)
    add(db, "q", "{}", id="j")
    (first,) = claim(db, "q", "w", 1)
    pin(db, NOW + 2000)
    (second,) = claim(db, "q", "w", 1)  # the first lease ran out; a later attempt took it
    before = snapshot(db)
    assert one(db, "SELECT tq_settle('j', ?, 'wait', '{\"signal\": \"s\"}')", first["attempt"]) == 0
    assert snapshot(db) == before
    assert one(db, "SELECT tq_settle('j', ?, 'wait', '{\"signal\": \"s\"}')", second["attempt"]) == 1
    assert one(db, "SELECT tq_settle('j', ?, 'done')", second["attempt"]) == 0  # it waits now


def test_SIG_01_blocked_job_holds_no_place_in_any_limit(db):
    setq(db, "q", concurrency=1, group_concurrency=1)
    add(db, "q", "{}", id="a", group="g")
    add(db, "q", "{}", id="b", group="g")
    wait_signal(db, "q", "a", "s")
    (row,) = claim(db, "q", "w", 5)
    assert row["id"] == "b"
    assert db.execute("SELECT running, blocked FROM tq_stats('q')").fetchone() == (1, 1)


def test_SIG_01_cancel_a_waiting_job(db):
    add(db, "q", "{}", id="j")
    wait_signal(db, "q", "j", "s")
    assert one(db, "SELECT tq_cancel('j')") == 1
    assert one(db, "SELECT tq_signal('s')") == 0
    assert db.execute("SELECT blocked FROM tq_stats('q')").fetchone() == (0,)


def test_SIG_01_bad_input_is_refused_and_changes_nothing(db):
    add(db, "q", "{}", id="j")
    (row,) = claim(db, "q", "w", 1)
    before = snapshot(db)
    for sql, args, message in [
        ("SELECT tq_signal()", (), "tq_signal: expects (name [, payload [, options]])"),
        ("SELECT tq_signal(NULL)", (), "tq_signal: name must be text, not NULL"),
        ("SELECT tq_signal('')", (), "tq_signal: name must not be empty"),
        ("SELECT tq_signal(?)", ("x" * 1001,), "tq_signal: name is longer than 1000 bytes"),
        ("SELECT tq_signal('s', x'00')", (), "tq_signal: payload must be text or a number, not a blob"),
        ("SELECT tq_signal('s', '1', '{\"keep\": \"soon\"}')", (), "tq_signal: option \"keep\""),
        ("SELECT tq_signal('s', '1', '{\"keep\": 0}')", (), "tq_signal: option \"keep\" must be longer than 0ms"),
        ("SELECT tq_signal('s', '1', '{\"colour\": 1}')", (), "tq_signal: unknown option \"colour\""),
        ("SELECT tq_settle('j', ?, 'wait', '{\"signal\": 5}')", (row["attempt"],),
         "tq_settle: outcome 'wait': option \"signal\" must be text"),
        ("SELECT tq_settle('j', ?, 'wait', '{\"signal\": \"s\", \"timeout\": \"x\"}')", (row["attempt"],),
         "tq_settle: outcome 'wait': option \"timeout\""),
    ]:
        with pytest.raises(sqlite3.Error) as e:
            one(db, sql, *args)
        assert str(e.value).startswith(message), (sql, str(e.value))
    assert snapshot(db) == before
