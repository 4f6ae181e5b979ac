"""`tinyq` human output shows ids, queues, workers and errors with their control characters
escaped (an OSC sequence that retitles the terminal, CR and backspace that overwrite what is
shown, bidi overrides that reorder a line), so that none reaches the operator's terminal as
a command; --json stays exact."""
import json
import re
import signal

import pytest

from helpers import claim, one
from test_cli import popen, tinyq

TITLE = "\x1b]0;owned\x07"                 # OSC 0: sets the terminal's title
ID = "job" + TITLE + "\rfake\x08\u202egnp.exe\u2066x\x9b2J"
QUEUE = "mail\x1b[2Kq\u202e"
WORKER = "w\x1b[1A\r"
ERROR = "smtp \x1b]0;down\x07\r\x1b[31mOK\x1b[0m \u202eevil"
# What must not be printed: C0 (but \n ending a line), DEL, C1, separators, bidi controls.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


@pytest.fixture
def hostile(db, db_path):
    """QUEUE: ID failed with ERROR by WORKER, 'run' running, 'ok' waiting; a schedule too."""
    one(db, "SELECT tq_add(?, '{}', json_object('id', ?, 'attempts', 1, 'group', ?))", QUEUE, ID, ERROR)
    one(db, "SELECT tq_add(?, '{}', '{\"id\": \"run\"}')", QUEUE)
    claim(db, QUEUE, WORKER, 2)
    one(db, "SELECT tq_settle(?, 1, 'error', ?)", ID, ERROR)
    one(db, "SELECT tq_add(?, '{}', '{\"id\": \"ok\"}')", QUEUE)
    one(db, "SELECT tq_step_put('run', 1, ?, ?)", ERROR, json.dumps(ERROR))
    one(db, "SELECT tq_schedule(?, ?, '@every 1h', '{}')", ID, QUEUE)
    return db_path


def assert_escaped(text):
    assert not RAW.search(text), repr(text)
    assert "\\x1b]0;" in text or "\\x1b[" in text, text


@pytest.mark.parametrize("args", [["stats"], ["jobs"], ["jobs", "--queue", QUEUE, "--state", "failed"],
                                  ["get", ID], ["get", "run"], ["schedules"]],
                         ids=["stats", "jobs", "jobs-page", "get-failed", "get-running", "schedules"])
def test_human_output_escapes_control_characters(hostile, args):
    proc = tinyq(args[0], hostile, *args[1:])
    assert proc.returncode == 0, proc.stderr
    assert_escaped(proc.stdout)
    assert proc.stderr == ""


def test_ids_and_errors_are_shown_escaped_not_dropped(hostile):
    out = tinyq("get", hostile, ID).stdout
    assert "job\\x1b]0;owned\\x07\\rfake\\x08\\u202egnp.exe\\u2066x\\x9b2J" in out
    assert "\\x1b[31mOK\\x1b[0m" in out and "\\u202eevil" in out
    assert "w\\x1b[1A\\r" in out


@pytest.mark.parametrize("args", [["get", "nope" + TITLE], ["retry", "x\r" + TITLE], ["cancel", ID],
                                  ["stats", "--queue", "x\r" + TITLE], ["pause", "q\x1b[2J\n"],
                                  ["jobs", "--state", "x" + TITLE]],
                         ids=["no-job", "retry-no-job", "not-cancellable", "no-queue", "pause-no-queue",
                              "usage"])
def test_errors_escape_control_characters_on_one_line(hostile, args):
    proc = tinyq(args[0], hostile, *args[1:])
    assert proc.returncode in (1, 2)
    assert proc.stdout == ""
    assert_escaped(proc.stderr)
    assert proc.stderr.startswith("tinyq: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_actions_print_the_id_escaped(hostile):
    proc = tinyq("retry", hostile, ID)
    assert proc.returncode == 0, proc.stderr
    assert_escaped(proc.stdout)
    proc = tinyq("pause", hostile, QUEUE)
    assert proc.returncode == 0 and "mail\\x1b[2Kq\\u202e: paused" in proc.stdout


def test_watch_escapes_events(hostile):
    proc = popen("watch", hostile, "-n", "20", "--interval", "0.05")
    try:
        lines = [proc.stdout.readline() for _ in range(6)]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    assert proc.returncode == 0 and proc.stderr.read() == ""
    assert_escaped("".join(lines))
    assert any(ERROR not in line and "\\u202eevil" in line for line in lines)


def test_json_output_stays_exact(hostile):
    rows = [json.loads(line) for line in tinyq("jobs", hostile, "--json").stdout.splitlines()]
    assert {(r["id"], r["queue"]) for r in rows} >= {(ID, QUEUE)}
    failed = next(r for r in rows if r["id"] == ID)
    assert (failed["error"], failed["group_key"]) == (ERROR, ERROR)
    story = json.loads(tinyq("get", hostile, "run", "--json").stdout)
    assert story["job"]["worker"] == WORKER and story["steps"][0]["name"] == ERROR
    [schedule] = [json.loads(line) for line in tinyq("schedules", hostile, "--json").stdout.splitlines()]
    assert schedule["name"] == ID
