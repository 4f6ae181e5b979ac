"""The `tinyq` command line (python/tinyq/cli.py), run as real processes:
`python -m tinyq COMMAND DB ...`."""
import json
import os
import queue as queues
import re
import signal
import sqlite3
import subprocess
import threading
import time

import pytest

from helpers import EXT, ROOT, claim, connect, get, one

PY = "/usr/bin/python3"
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), TINYQ_EXT=EXT)


def tinyq(*args, timeout=120):
    return subprocess.run([PY, "-m", "tinyq", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def popen(*args):
    # SIGINT back to its default, so that Python turns it into KeyboardInterrupt even when
    # the test run itself was started with SIGINT ignored (a background job).
    return subprocess.Popen([PY, "-m", "tinyq", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def assert_error(proc, status, *words):
    """An error is `status` and one line on stderr, naming what went wrong."""
    assert proc.returncode == status, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("tinyq: ") and proc.stderr.count("\n") == 1, proc.stderr
    for word in words:
        assert word in proc.stderr


@pytest.fixture
def store(db, db_path):
    """emails: e1 running, e2 failed ('smtp down'), e3 waiting; sms: s1 scheduled."""
    one(db, "SELECT tq_add('emails', '{\"to\": 1}', '{\"id\": \"e1\"}')")
    one(db, "SELECT tq_add('emails', '{\"to\": 2}', '{\"id\": \"e2\", \"attempts\": 1}')")
    claim(db, "emails", "w1", 2)
    one(db, "SELECT tq_settle('e2', 1, 'error', 'smtp down')")
    one(db, "SELECT tq_add('emails', '{}', '{\"id\": \"e3\"}')")
    one(db, "SELECT tq_add('sms', '{}', '{\"id\": \"s1\", \"delay\": \"1h\"}')")
    return db_path


def test_stats_shows_each_queue(store):
    out = tinyq("stats", store)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:8] == ["queue", "scheduled", "waiting", "blocked", "running", "leases",
                                   "done", "failed"]
    assert lines[1].split()[:8] == ["emails", "0", "1", "0", "1", "1", "0", "1"]
    assert lines[2].split()[:8] == ["sms", "1", "0", "0", "0", "0", "0", "0"]
    [row] = [json.loads(line) for line in tinyq("stats", store, "--queue", "sms",
                                                "--json").stdout.splitlines()]
    assert row["queue"] == "sms" and row["scheduled"] == 1 and row["paused"] == 0


def test_jobs_filters_by_queue_and_state(store):
    out = tinyq("jobs", store, "--queue", "emails", "--state", "failed")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header.split() == ["id", "queue", "state", "attempt", "run", "at", "worker", "error"]
    assert row.split()[:4] == ["e2", "emails", "failed", "1"] and row.endswith("smtp down")
    rows = [json.loads(line) for line in tinyq("jobs", store, "--json").stdout.splitlines()]
    assert [(r["id"], r["state"]) for r in rows] == \
        [("e1", "running"), ("e2", "failed"), ("e3", "waiting"), ("s1", "scheduled")]
    assert rows[0]["payload"] == '{"to": 1}'
    limited = tinyq("jobs", store, "--limit", "1")
    assert len(limited.stdout.splitlines()) == 2
    assert "1 of 4 jobs" in limited.stderr
    assert tinyq("jobs", store, "--queue", "nope").stdout == "no jobs\n"


def test_retry_brings_a_failed_job_back(store, db):
    out = tinyq("retry", store, "e2")
    assert out.returncode == 0, out.stderr
    assert "e2" in out.stdout and get(db, "e2")["state"] == "waiting"
    assert_error(tinyq("retry", store, "e2"), 1, "'e2'", "waiting", "not failed")
    assert_error(tinyq("retry", store, "nope"), 2, "no job 'nope'")


def test_cancel_removes_a_job(store, db):
    out = tinyq("cancel", store, "e1")
    assert out.returncode == 0, out.stderr
    assert "was running" in out.stdout and get(db, "e1") is None
    assert_error(tinyq("cancel", store, "e1"), 2, "no job 'e1'")
    assert_error(tinyq("cancel", store, "e2"), 1, "'e2' is failed")


def test_pause_and_resume_a_queue(store, db):
    assert tinyq("pause", store, "emails").returncode == 0
    assert json.loads(one(db, "SELECT tq_queue('emails')"))["paused"] is True
    assert claim(db, "emails") == []
    assert tinyq("stats", store, "--queue", "emails").stdout.split()[-1] == "paused"
    assert tinyq("resume", store, "emails").returncode == 0
    assert [j["id"] for j in claim(db, "emails")] == ["e3"]
    before = one(db, "SELECT count(*) FROM tinyq_queues")
    assert_error(tinyq("pause", store, "emials"), 2, "no queue 'emials'", "emails, sms")
    assert one(db, "SELECT count(*) FROM tinyq_queues") == before       # nothing created


def test_sweep_removes_rows_past_their_windows(store, db):
    one(db, "SELECT tq_queue('short', '{\"keep\": \"1ms\"}')")
    one(db, "SELECT tq_add('short', '{}', '{\"id\": \"brief\"}')")
    claim(db, "short")
    one(db, "SELECT tq_settle('brief', 1, 'fail', 'no')")
    time.sleep(0.01)
    out = tinyq("sweep", store)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) >= 1
    assert get(db, "brief") is None and get(db, "e2") is not None      # e2 keeps 7 days
    assert tinyq("sweep", store, "--limit", "1").stdout == "rows removed: 0\n"


def test_errors_create_nothing(tmp_path):
    missing = str(tmp_path / "missing.db")
    for command in (["stats", missing], ["watch", missing], ["retry", missing, "x"],
                    ["pause", missing, "q"], ["dashboard", missing, "--port", "0"]):
        assert_error(tinyq(*command), 2, "no such file", missing)
    assert not os.path.exists(missing)

    plain = str(tmp_path / "plain.db")
    conn = sqlite3.connect(plain)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    before = open(plain, "rb").read()
    for command in (["stats", plain], ["jobs", plain], ["retry", plain, "x"],
                    ["pause", plain, "q"], ["sweep", plain], ["watch", plain]):
        assert_error(tinyq(*command), 2, plain, "has no tinyq store")
    assert open(plain, "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == ["plain.db"]

    junk = tmp_path / "junk.db"
    junk.write_text("not a database, just text\n" * 100)
    assert_error(tinyq("stats", str(junk)), 2, "file is not a database")
    assert_error(tinyq("stats", str(tmp_path)), 2, "not a database file")


def test_the_journal_mode_stays_as_it_was(tmp_path):
    path = str(tmp_path / "app.db")
    conn = sqlite3.connect(path, isolation_level=None)
    tinyq_conn = connect(path)                      # helpers' connect turns WAL on...
    tinyq_conn.execute("PRAGMA journal_mode=DELETE")  # ...so put the default back
    one(tinyq_conn, "SELECT tq_add('q', '{}')")
    tinyq_conn.close()
    for command in (["stats", path], ["jobs", path], ["sweep", path]):
        assert tinyq(*command).returncode == 0
    assert one(conn, "PRAGMA journal_mode") == "delete"
    conn.close()


def test_watch_follows_events_live_until_ctrl_c(store, db):
    proc = popen("watch", store, "-n", "2", "--interval", "0.05")
    lines = queues.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                     daemon=True).start()

    def next_line():
        try:
            return lines.get(timeout=60)
        except queues.Empty:
            proc.kill()
            raise AssertionError("watch printed nothing: %s" % proc.stderr.read())

    try:
        first, second = next_line().split(), next_line().split()   # the last two events
        assert first[3:6] == ["emails", "e3", "waiting"]
        assert second[3:6] == ["sms", "s1", "scheduled"]
        one(db, "SELECT tq_add('emails', '{}', '{\"id\": \"live\"}')")
        assert next_line().split()[3:6] == ["emails", "live", "waiting"]
        one(db, "SELECT tq_settle('e1', 1, 'fail', 'bad address')")
        line = next_line()
        assert line.split()[3:8] == ["emails", "e1", "failed", "attempt", "1"]
        assert line.rstrip().endswith("bad address")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    assert proc.returncode == 0
    assert proc.stderr.read() == ""                      # no traceback


def test_get_tells_a_jobs_story(store, db):
    one(db, "SELECT tq_add('emails', '{\"to\": 9}', '{\"id\": \"story\", \"attempts\": 2, \"meta\": {\"trace\": \"t-1\"}}')")
    [job] = [j for j in claim(db, "emails", "mailer-3", 5) if j["id"] == "story"]
    one(db, "SELECT tq_step_put('story', ?, 'render', 'ok')", job["attempt"])
    one(db, "SELECT tq_progress('story', ?, '{\"sent\": 1}')", job["attempt"])
    one(db, "SELECT tq_settle('story', ?, 'fail', 'mailbox full')", job["attempt"])
    out = tinyq("get", store, "story")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["story", "failed", "queue", "emails"]
    assert any(line.split()[:2] == ["meta", '{"trace":'] for line in lines)
    assert any(line.split() == ["attempt", "1", "(1", "of", "2", "charged)"] for line in lines)
    timeline = lines[lines.index("timeline:") + 1:]
    assert [line.split()[3] for line in timeline] == ["waiting", "running", "progress", "failed"]
    assert timeline[1].split()[6] == "mailer-3" and timeline[-1].endswith("mailbox full")
    step = lines[lines.index("steps:") + 1]
    assert step.split()[2:] == ["attempt", str(job["attempt"]), "render", "ok"]
    story = json.loads(tinyq("get", store, "story", "--json").stdout)
    assert story["job"]["meta"] == {"trace": "t-1"} and story["steps"][0]["name"] == "render"
    assert [e["worker"] for e in story["timeline"]] == [None, "mailer-3", "mailer-3", "mailer-3"]
    assert_error(tinyq("get", store, "nope"), 2, "no job 'nope'")
    one(db, "SELECT tq_cancel('e1')")
    gone = tinyq("get", store, "e1")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.splitlines()[0] == "e1  cancelled  (gone: only its events are kept)"
    assert [line.split()[3] for line in gone.stdout.splitlines()[2:]] == ["waiting", "running", "cancelled"]
    assert json.loads(tinyq("get", store, "e1", "--json").stdout)["job"] is None


def test_jobs_pages_in_tinyqs_order(store, db):
    for n in range(5):
        one(db, "SELECT tq_add('bulk', '{}', json_object('id', 'b' || ?, 'priority', ?, 'group', ?))",
            n, n % 2, "g%d" % (n % 2))
    first = tinyq("jobs", store, "--queue", "bulk", "--state", "waiting", "--limit", "2")
    assert [line.split()[0] for line in first.stdout.splitlines()[1:]] == ["b1", "b3"]
    assert "(more: --after b3)" in first.stderr
    rest = tinyq("jobs", store, "--queue", "bulk", "--state", "waiting", "--after", "b3", "--json")
    assert [json.loads(line)["id"] for line in rest.stdout.splitlines()] == ["b0", "b2", "b4"]
    assert json.loads(rest.stdout.splitlines()[0])["payload"] == "{}"      # every column
    assert rest.stderr == ""
    group = tinyq("jobs", store, "--queue", "bulk", "--state", "waiting", "--group", "g1", "--json")
    assert [json.loads(line)["id"] for line in group.stdout.splitlines()] == ["b1", "b3"]
    prefix = tinyq("jobs", store, "--prefix", "e", "--json")
    assert [json.loads(line)["id"] for line in prefix.stdout.splitlines()] == ["e1", "e2", "e3"]
    assert_error(tinyq("jobs", store, "--queue", "bulk", "--state", "waiting", "--after", "zz"), 2,
                 "tq_jobs: after: no job 'zz'")


def test_schedules_lists_each_schedule(store, db):
    assert tinyq("schedules", store).stdout == "no schedules\n"
    one(db, "SELECT tq_clock('2026-12-01T10:00:00Z')")
    one(db, "SELECT tq_schedule('digest', 'emails', '0 8 * * *', '{}', '{\"tz\": \"Europe/Paris\"}')")
    one(db, "SELECT tq_schedule('cleanup', 'sms', '@daily', '{}', '{\"paused\": true}')")
    out = tinyq("schedules", store)
    assert out.returncode == 0, out.stderr
    header, cleanup, digest = out.stdout.splitlines()
    assert header.split() == ["name", "queue", "when", "tz", "next", "last", "job", "paused"]
    assert cleanup.split() == ["cleanup", "sms", "@daily", "UTC", "paused"]
    assert digest.split()[:2] == ["digest", "emails"] and "Europe/Paris" in digest
    rows = [json.loads(line) for line in tinyq("schedules", store, "--json").stdout.splitlines()]
    assert [(r["name"], r["when"], r["paused"]) for r in rows] == [("cleanup", "@daily", 1), ("digest", "0 8 * * *", 0)]
    assert rows[1]["next_at"] > 0


def test_watch_aligns_its_columns(store, db):
    """Queues, ids and states of different lengths: each column starts at the same place on
    every line (the seq right-aligned), the detail last."""
    one(db, "SELECT tq_add('notifications', '{}', '{\"id\": \"a-much-longer-id:1\"}')")
    proc = popen("watch", store, "-n", "7", "--interval", "0.05")
    try:
        lines = [proc.stdout.readline().rstrip("\n") for _ in range(7)]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    assert proc.returncode == 0, proc.stderr.read()
    # cells: runs of words separated by single spaces (oneline() collapses a detail's spaces)
    cells = [[m.span() for m in re.finditer(r"\S+(?: \S+)*", line)] for line in lines]
    assert {len(c) for c in cells} <= {6, 7}, lines     # when, seq, queue, id, state, attempt [, detail]
    assert len({c[1][1] for c in cells}) == 1, lines    # seq: right-aligned
    for column in (2, 3, 4, 5):                         # queue, id, state, attempt: left-aligned
        assert len({c[column][0] for c in cells}) == 1, (column, lines)
    assert lines[-1].split()[3:6] == ["notifications", "a-much-longer-id:1", "waiting"]


def test_watch_json(store):
    proc = popen("watch", store, "-n", "1", "--json", "--interval", "0.05")
    try:
        line = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    event = json.loads(line)
    assert (event["id"], event["queue"], event["state"]) == ("s1", "sms", "scheduled")
    assert set(event) == {"seq", "id", "queue", "state", "attempt", "at", "detail"}
