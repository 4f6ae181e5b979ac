"""The dashboard's sign-in, sessions, CSRF tokens and read-only mode (DASH-01), against a
real `tinyq dashboard` process on 127.0.0.1: every refused request is checked to have
changed nothing in the store (every tinyq_* table, event log included, read before and
after), and the same request with the right credential is checked to act, so that the
refusal is the check's and not some other failure's.
"""
import base64
import html
import http.client
import json
import os
import re
import secrets
import subprocess
import urllib.parse

import pytest

from helpers import claim, get, one
from test_dashboard import (ENV, PY, browser, dashboard_process, needs_chromium,  # noqa: F401 (fixture)
                            populate)

USER, PASSWORD = "ada", "correct horse battery"
TOKEN = secrets.token_urlsafe(24)
ACTIONS = [("/api/cancel", {"id": "invoice-pdf:1040"}), ("/api/retry", {"id": "welcome:ada"}),
           ("/api/retry", {"queue": "reports"}), ("/api/pause", {"queue": "emails", "paused": True}),
           ("/api/limits", {"queue": "emails", "settings": {"concurrency": 1}}),
           ("/api/schedule", {"name": "nightly-report", "paused": True})]


def store(db):
    """Every row of every tinyq table: what a refused request must leave as it was."""
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tinyq%'")]
    return {t: sorted(map(repr, db.execute("SELECT * FROM " + t))) for t in tables}


def call(base, method, path, body=None, headers=None):
    """(status, headers, body) of one request; redirects are not followed."""
    host, port = base.split("//")[1].rstrip("/").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def post(base, path, value, **headers):
    return call(base, "POST", path, json.dumps(value).encode(), dict({"Content-Type": "application/json"}, **headers))


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()}


def sign_in(base, user, password):
    """(Cookie header, CSRF token) of a new session."""
    status, headers, _ = call(base, "POST", "/login", urllib.parse.urlencode({"user": user, "password": password}),
                              {"Content-Type": "application/x-www-form-urlencoded"})
    assert (status, headers["Location"]) == (303, "/")
    cookie = headers["Set-Cookie"].split(";")[0]
    status, _, page = call(base, "GET", "/", headers={"Cookie": cookie})
    session = json.loads(html.unescape(re.search(rb'name="tinyq-session" content="([^"]*)"', page)[1].decode()))
    assert status == 200 and session["signedIn"] and not session["readOnly"]
    return cookie, session["csrf"]


@pytest.fixture
def signed(db, db_path, tmp_path):
    """A populated store's dashboard that needs a sign-in: USER:PASSWORD from the environment,
    TOKEN from a credentials file."""
    populate(db)
    path = tmp_path / "credentials"
    path.write_text("# the dashboard's token\n%s\n" % TOKEN)
    path.chmod(0o600)
    env = dict(ENV, TINYQ_DASHBOARD_PASSWORD="%s:%s" % (USER, PASSWORD))
    yield from dashboard_process(db_path, "--credentials-file", str(path), "--server-name", "dash.example.test",
                                 env=env)


def run_dashboard(db_path, *args, env=ENV):
    """A dashboard that must refuse to start: (exit status, stdout, stderr)."""
    proc = subprocess.Popen([PY, "-m", "tinyq", "dashboard", db_path, "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail("the dashboard started: %r" % out)
    return proc.returncode, out, err


def test_DASH_01_a_host_beyond_loopback_needs_a_sign_in(db, db_path, tmp_path):
    populate(db)
    status, out, err = run_dashboard(db_path, "--host", "0.0.0.0")
    assert (status, out) == (2, "")
    assert err == ("tinyq: dashboard: --host 0.0.0.0 is reachable from other machines: give it a sign-in "
                   "(TINYQ_DASHBOARD_TOKEN=token, TINYQ_DASHBOARD_PASSWORD=user:password or "
                   "--credentials-file FILE); nothing was started\n")
    # --read-only is no sign-in: the jobs' payloads would be anyone's to read.
    assert run_dashboard(db_path, "--host", "0.0.0.0", "--read-only")[0] == 2
    # A credential too short to resist guessing, or an unreadable file: not started either.
    status, out, err = run_dashboard(db_path, "--host", "0.0.0.0", env=dict(ENV, TINYQ_DASHBOARD_TOKEN="short"))
    assert (status, out) == (2, "") and "a token must have at least 16 characters" in err
    status, out, err = run_dashboard(db_path, "--credentials-file", str(tmp_path / "none"))
    assert (status, out) == (2, "") and "--credentials-file" in err and "No such file" in err
    # No credential on the command line, where ps shows it.
    status, out, err = run_dashboard(db_path, "--token", TOKEN)
    assert status == 2 and "unrecognized arguments" in err


def test_DASH_01_without_or_with_a_wrong_credential_nothing_is_read_or_changed(signed, db):
    before = store(db)
    forged = {"Cookie": "tinyq_session_%s=%s" % (signed.rstrip("/").rsplit(":", 1)[1], secrets.token_urlsafe(32))}
    for headers in ({}, basic(USER, "wrong password"), basic("eve", TOKEN[:-1] + "x"),
                    {"Authorization": "Bearer " + TOKEN[:-1]}, {"Authorization": "Bearer " + PASSWORD},
                    forged, basic(USER + ":" + PASSWORD[:3], PASSWORD[3:])):
        # the page sends a browser to sign in; the API and /metrics say 401
        status, answer, _ = call(signed, "GET", "/", headers=headers)
        assert (status, answer["Location"]) == (303, "/login")
        assert call(signed, "GET", "/job/welcome%3Aada", headers=headers)[0] == 303
        for path in ("/api/state", "/api/jobs?queue=emails", "/api/job/welcome%3Aada"):
            status, _, body = call(signed, "GET", path, headers=headers)
            assert (status, json.loads(body)) == (401, {"error": "sign in first"}), path
        status, answer, body = call(signed, "GET", "/metrics", headers=headers)
        assert status == 401 and answer["WWW-Authenticate"].startswith("Basic ") and b"tinyq_jobs" not in body
        for path, value in ACTIONS:
            assert post(signed, path, value, **headers)[0] == 401, path
    # Wrong sign-ins get no cookie.
    for form in ("user=ada&password=wrong+password", "user=&password=" + TOKEN[:-1], "user=ada&password=",
                 "user=ADA&password=correct+horse+battery", ""):
        status, answer, page = call(signed, "POST", "/login", form,
                                    {"Content-Type": "application/x-www-form-urlencoded"})
        assert status == 401 and answer["Set-Cookie"] is None and b"Wrong user, password or token." in page
    # Signed in, an action still needs the session's own CSRF token; basic auth reads but never acts.
    cookie, csrf = sign_in(signed, USER, PASSWORD)
    _, other = sign_in(signed, "token-user", TOKEN)
    for path, value in ACTIONS:
        assert post(signed, path, value, Cookie=cookie)[0] == 403
        assert post(signed, path, value, Cookie=cookie, **{"X-CSRF-Token": csrf[:-1]})[0] == 403
        assert post(signed, path, value, Cookie=cookie, **{"X-CSRF-Token": other})[0] == 403
        assert post(signed, path, value, **{"X-CSRF-Token": csrf}, **basic(USER, PASSWORD))[0] == 401
        # ... and from another site's page, none of it: the Host and Origin guard comes first
        assert post(signed, path, value, Cookie=cookie, Origin="http://evil.example",
                    **{"X-CSRF-Token": csrf})[0] == 403
    assert call(signed, "POST", "/login", "user=ada&password=" + PASSWORD.replace(" ", "+"),
                {"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"})[0] == 403
    assert store(db) == before

    # The right credential reads (basic auth, bearer, a session) and acts (a session and its token).
    for headers in (basic(USER, PASSWORD), basic("prometheus", TOKEN), {"Authorization": "Bearer " + TOKEN},
                    {"Cookie": cookie}):
        status, _, body = call(signed, "GET", "/metrics", headers=headers)
        assert status == 200 and b'tinyq_jobs{queue="emails",state="done"}' in body
        assert call(signed, "GET", "/api/state", headers=headers)[0] == 200
    status, _, body = post(signed, "/api/cancel", {"id": "invoice-pdf:1040"}, Cookie=cookie, **{"X-CSRF-Token": csrf})
    assert (status, json.loads(body)) == (200, {"cancelled": True}) and get(db, "invoice-pdf:1040") is None
    status, _, body = post(signed, "/api/pause", {"queue": "emails", "paused": True}, Cookie=cookie,
                           **{"X-CSRF-Token": other})
    assert status == 403 and json.loads(one(db, "SELECT tq_queue('emails')"))["paused"] is False

    # Signed out, the session is gone for good.
    assert post(signed, "/logout", {}, Cookie=cookie)[0] == 403          # no token: stays signed in
    status, answer, _ = post(signed, "/logout", {}, Cookie=cookie, **{"X-CSRF-Token": csrf})
    assert status == 200 and "Max-Age=0" in answer["Set-Cookie"]
    assert call(signed, "GET", "/api/state", headers={"Cookie": cookie})[0] == 401
    assert post(signed, "/api/retry", {"id": "welcome:ada"}, Cookie=cookie, **{"X-CSRF-Token": csrf})[0] == 401
    assert get(db, "welcome:ada")["state"] == "failed"


def test_DASH_01_the_session_cookie(signed):
    status, answer, _ = call(signed, "POST", "/login", "user=&password=" + TOKEN,
                             {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 303
    name, _, rest = answer["Set-Cookie"].partition("=")
    sid, *flags = [part.strip() for part in rest.split(";")]
    assert name == "tinyq_session_" + signed.rstrip("/").rsplit(":", 1)[1]
    assert len(base64.urlsafe_b64decode(sid + "=")) == 32           # secrets.token_urlsafe(32)
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(flags)
    # and no page of it can be framed by another site (a click there would act)
    _, answer, _ = call(signed, "GET", "/login")
    assert answer["X-Frame-Options"] == "DENY" and answer["Content-Security-Policy"] == "frame-ancestors 'none'"


def test_DASH_01_the_host_guard_stays_with_a_sign_in(signed):
    """Only its own names (--server-name adds a proxy's) and pages from them, http or https
    (behind a TLS proxy): a DNS-rebound name or another site's form gets 403."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert call(signed, "GET", "/login", headers={"Host": "dash.example.test"})[0] == 200
    assert call(signed, "POST", "/login", "password=" + TOKEN,
                dict(form, Host="dash.example.test", Origin="https://dash.example.test"))[0] == 303
    assert call(signed, "GET", "/login", headers={"Host": "rebound.example"})[0] == 403
    assert call(signed, "GET", "/metrics", headers=dict(basic(USER, PASSWORD), Host="rebound.example"))[0] == 403
    assert call(signed, "POST", "/login", "password=" + TOKEN,
                dict(form, Host="dash.example.test", Origin="https://evil.example"))[0] == 403


@pytest.fixture
def read_only(db, db_path):
    populate(db)
    yield from dashboard_process(db_path, "--read-only")


def test_DASH_01_read_only_refuses_every_action(read_only, db, db_path):
    before = store(db)
    for path, value in ACTIONS:
        status, _, body = post(read_only, path, value)
        assert (status, json.loads(body)) == (403, {"error": "this dashboard is read-only"}), path
    assert store(db) == before
    for path in ("/", "/job/welcome%3Aada", "/api/state", "/api/jobs?queue=emails", "/metrics"):
        assert call(read_only, "GET", path)[0] == 200, path


@pytest.fixture
def read_only_signed(db, db_path):
    populate(db)
    yield from dashboard_process(db_path, "--read-only", env=dict(ENV, TINYQ_DASHBOARD_TOKEN=TOKEN))


def test_DASH_01_read_only_with_a_sign_in_refuses_a_signed_in_action(read_only_signed, db):
    before = store(db)
    status, answer, _ = call(read_only_signed, "POST", "/login", "password=" + TOKEN,
                             {"Content-Type": "application/x-www-form-urlencoded"})
    cookie = answer["Set-Cookie"].split(";")[0]
    page = call(read_only_signed, "GET", "/", headers={"Cookie": cookie})[2]
    session = json.loads(html.unescape(re.search(rb'name="tinyq-session" content="([^"]*)"', page)[1].decode()))
    assert session["readOnly"] and session["signedIn"]
    for path, value in ACTIONS:
        status, _, body = post(read_only_signed, path, value, Cookie=cookie, **{"X-CSRF-Token": session["csrf"]})
        assert (status, json.loads(body)) == (403, {"error": "this dashboard is read-only"}), path
    assert store(db) == before


@needs_chromium
def test_DASH_01_read_only_page_has_no_controls(read_only, db, browser):
    browser.go(read_only)
    browser.wait_for("the jobs", lambda: "invoice-pdf:1040" in browser.text("running"))
    assert "welcome:ada" in browser.text("failed") and "nightly-report" in browser.text("schedules")
    assert browser.js("return document.querySelectorAll("
                      "'#queues button, #running button, #failed button, #schedules button').length") == 0
    assert browser.js("return getComputedStyle(document.getElementById('read-only')).display") != "none"
    browser.go(read_only + "job/welcome%3Aada")
    browser.wait_for("the job", lambda: browser.text("job-state") == "failed")
    assert browser.js("return document.querySelectorAll('#job-actions button').length") == 0


@needs_chromium
def test_DASH_01_a_browser_signs_in_and_acts(signed, db, browser):
    browser.go(signed)
    browser.wait_for("the sign-in form", lambda: browser.js("return location.pathname") == "/login")
    browser.type("#user", USER)
    browser.type("#password", "wrong password")
    browser.click("#sign-in")
    browser.wait_for("the refusal", lambda: "Wrong" in browser.js("return document.body.innerText"))
    browser.type("#user", USER)
    browser.type("#password", PASSWORD)
    browser.click("#sign-in")
    browser.wait_for("the queues", lambda: browser.js("return location.pathname") == "/"
                     and "emails" in browser.text("queues"))
    assert browser.js("return document.cookie") == ""                     # HttpOnly: no script reads it

    # Cancel a running job: asked first, then done, through the session's CSRF token.
    browser.wait_for("the running jobs", lambda: "invoice-pdf:1041" in browser.text("running"))
    browser.click('#running button[data-cancel="invoice-pdf:1041"]')
    browser.wait_for("the question", lambda: browser.js("return document.getElementById('confirm').open"))
    browser.click("#confirm-yes")
    browser.wait_for("invoice-pdf:1041 gone", lambda: "invoice-pdf:1041" not in browser.text("running"))
    assert get(db, "invoice-pdf:1041") is None
    browser.click('button[data-pause="emails"]')
    browser.wait_for("the question", lambda: browser.js("return document.getElementById('confirm').open"))
    browser.click("#confirm-yes")
    browser.wait_for("emails paused", lambda: json.loads(one(db, "SELECT tq_queue('emails')"))["paused"])

    # A job failing now shows up; signed out, the page is the sign-in form again.
    one(db, "SELECT tq_add('hooks', '{}', '{\"id\": \"hook:1\", \"attempts\": 1}')")
    claim(db, "hooks", "w")
    one(db, "SELECT tq_settle('hook:1', 1, 'error', 'HTTP 502')")
    browser.wait_for("hook:1", lambda: "hook:1" in browser.text("failed"))
    browser.click("#sign-out")
    browser.wait_for("the sign-in form", lambda: browser.js("return location.pathname") == "/login")
    browser.go(signed)
    browser.wait_for("the sign-in form again", lambda: browser.js("return location.pathname") == "/login")
    assert get(db, "hook:1")["state"] == "failed"
