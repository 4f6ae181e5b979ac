"""The dashboard (python/tinyq/dashboard.py) against what it is sent, over real sockets to a
real `tinyq dashboard` process: writes back exactly what is stored, and answers bad requests
with 400/404/413 instead of a dropped connection, a wrong "busy" or a thread stuck for ever."""
import signal
import socket
import subprocess

import pytest

from helpers import claim, one
from test_dashboard import ENV, PY, browser, http, needs_chromium, post_json  # noqa: F401 (fixture)


@pytest.fixture
def server(db, db_path):
    """A dashboard process on a store with one queue and one job: yields its base URL."""
    one(db, "SELECT tq_add('emails', '{}', '{\"id\": \"welcome:ada\"}')")
    proc = subprocess.Popen([PY, "-m", "tinyq", "dashboard", db_path, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = proc.stdout.readline()
    assert "http://127.0.0.1:" in line, proc.stderr.read()
    yield line.split()[-3].rstrip("/") + "/"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0
    # No traceback: every request above got an answer.
    assert proc.stderr.read() == ""


def stored(db, name):
    return db.execute("SELECT typeof(payload), hex(payload), meta FROM tinyq_schedules WHERE name = ?",
                      (name,)).fetchone()


@pytest.mark.parametrize("payload", ['"hello"', "42", "12345678901234567890123", 42, 1.5,
                                     '{"a": 1, "a": 2, "big": 123456789012345678901234567890}',
                                     "not json at all"])
def test_schedule_pause_and_resume_keep_the_stored_payload(server, db, payload):
    one(db, "SELECT tq_schedule('digest', 'emails', '@every 1h', ?, "
            "'{\"meta\": {\"n\": 12345678901234567890123, \"tag\": \"x\"}, \"group\": \"acme\"}')", payload)
    before = stored(db, "digest")
    for paused in (True, False, True):
        status, answer = post_json(server + "api/schedule", {"name": "digest", "paused": paused})
        assert status == 200, answer
        assert answer["schedule"]["paused"] is paused
        assert stored(db, "digest") == before
    assert db.execute("SELECT paused, grp FROM tinyq_schedules WHERE name = 'digest'").fetchone() == (1, "acme")


def test_an_unknown_schedule_is_404(server):
    assert post_json(server + "api/schedule", {"name": "nope", "paused": True})[0] == 404


def raw(base, request, read=True):
    """Sends the bytes of a request over a socket; (status, body) of the answer."""
    host, port = base.split("//")[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request.replace(b"HOST", ("%s:%s" % (host, port)).encode()))
        if not read:
            return None
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data, "the connection was dropped without an answer"
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode("utf-8", "replace")


def post(base, body, length=None):
    length = len(body) if length is None else length
    return raw(base, b"POST /api/cancel HTTP/1.1\r\nHost: HOST\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %s\r\nConnection: close\r\n\r\n" % str(length).encode() + body)


def get_raw(base, target):
    return raw(base, b"GET %s HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n" % target)


@pytest.mark.parametrize("job_id, status", [("", 400), ("x" * 1001, 400), ("%00", 400),
                                            ("no-such-job", 404), ("100%", 404)],
                         ids=["empty", "too-long", "nul", "unknown", "percent"])
def test_bad_job_ids_are_400_or_404_not_busy(server, job_id, status):
    answer = http(server + "api/job/" + job_id)
    assert answer[0] == status, answer
    assert "tq_get" in answer[1]["error"] or "no job" in answer[1]["error"]


@pytest.mark.parametrize("since", ["%C2%B2", "1" + "0" * 23, "-1", "1.5", "x"],
                         ids=["superscript-2", "10^23", "negative", "fraction", "letter"])
def test_a_bad_since_is_400(server, since):
    assert get_raw(server, b"/api/job/welcome:ada?since=" + since.encode())[0] == 400
    assert get_raw(server, b"/api/job/welcome:ada?since=0")[0] == 200


@pytest.mark.parametrize("body", [b'{"id": "\\ud800"}', b"[" * 100000 + b"]" * 100000,
                                  b'{"id": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"\xff\xfe",
                                  b'{"id": "welcome:ada"'],
                         ids=["lone-surrogate", "deep-array", "deep-inside", "not-utf8", "cut-short"])
def test_a_bad_json_body_is_400(server, db, body):
    assert post(server, body)[0] == 400
    assert one(db, "SELECT state FROM tq_jobs WHERE id = 'welcome:ada'") == "waiting"


def test_a_body_too_large_is_413(server):
    assert post(server, b"{}", length=10**14)[0] == 413


@pytest.mark.parametrize("length", ["-1", "abc", "1e3"])
def test_a_bad_content_length_is_400(server, length):
    assert post(server, b"{}", length=length)[0] == 400


def test_a_client_that_sends_half_a_request_does_not_keep_a_thread(server):
    """A body shorter than its Content-Length: the server gives up on it after its socket
    timeout and closes the connection (before, the thread waited for ever)."""
    host, port = server.split("//")[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /api/cancel HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{" % (host.encode(), port.encode()))
        s.settimeout(120)
        assert s.recv(65536) == b""       # closed by the server, not by this timeout
    assert http(server + "api/state")[0] == 200


HOSTILE = '<img src=x onerror="document.title=1">\x1b]0;owned\x07\u202eevil'


@needs_chromium
def test_the_page_shows_hostile_text_as_text_and_opens_a_typed_percent_id(server, db, browser):
    one(db, "SELECT tq_add('emails', '{}', json_object('id', ?, 'attempts', 1))", HOSTILE)
    one(db, "SELECT tq_add('emails', '{}', '{\"id\": \"100%\"}')")
    claim(db, "emails", "w1", 3)
    one(db, "SELECT tq_settle(?, 1, 'error', '<b>bold</b> reply')", HOSTILE)
    browser.go(server)
    browser.wait_for("the failed job", lambda: "<b>bold</b> reply" in browser.text("failed"))
    assert "<img src=x" in browser.text("failed")
    assert browser.js("return document.querySelectorAll('#failed img, #failed b').length") == 0
    assert browser.js("return document.title") != "1"
    # A hand-typed address that is not valid percent-encoding still opens the job.
    browser.go(server + "job/100%")
    browser.wait_for("job 100%", lambda: browser.text("job-state") == "running")
    assert browser.text("job-id") == "100%"


@pytest.mark.parametrize("action", ["cancel", "retry"])
@pytest.mark.parametrize("job_id", ["", "x" * 1001, "a\x00b"], ids=["empty", "too-long", "nul"])
def test_an_action_on_a_bad_id_is_400_not_busy(server, action, job_id):
    status, answer = post_json(server + "api/" + action, {"id": job_id})
    assert status == 400 and answer["error"].startswith("tq_" + action), answer
