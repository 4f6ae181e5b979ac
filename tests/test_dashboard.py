"""`tinyq dashboard DB` (python/tinyq/dashboard.py): its JSON API over HTTP, then the page
itself in headless Chromium, driven through chromedriver's WebDriver HTTP API (stdlib only).

The browser test is skipped when /usr/bin/chromium or /usr/bin/chromedriver is missing
(Debian: apt-get install chromium chromium-driver). With TINYQ_DASHBOARD_PNG=path it also
saves its screenshot there (that is how docs/dashboard.png is made).
"""
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from conftest import EXT, ROOT, claim, get, one

PY = "/usr/bin/python3"
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), TINYQ_EXT=EXT)
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def populate(db):
    """Ten minutes of history (the clock pinned in the past, so the chart has bars), then
    now: waiting, scheduled, running jobs with progress, and failed jobs with their errors."""
    now = int(time.time() * 1000)
    one(db, "SELECT tq_queue('reports', '{\"attempts\": 1}')")
    for i in range(58):
        one(db, "SELECT tq_clock(?)", now - 580_000 + i * 10_000)
        for queue, count in (("emails", 4 + (i * 7) % 9), ("reports", int(i % 11 == 5))):
            for _ in range(count):
                one(db, "SELECT tq_add(?, '{}')", queue)
            for job in claim(db, queue, "worker-%d" % (i % 3), count or 1):
                outcome = "done" if queue == "emails" else "error"
                one(db, "SELECT tq_settle(?, ?, ?, 'timeout talking to the renderer')"
                    if outcome == "error" else "SELECT tq_settle(?, ?, ?)",
                    job["id"], job["attempt"], outcome)
    one(db, "SELECT tq_clock(NULL)")
    for n in range(5):
        one(db, "SELECT tq_add('emails', json_object('to', ?))", "user%d@example.com" % n)
    one(db, "SELECT tq_add('sms', '{}', '{\"delay\": \"1h\"}')")
    one(db, "SELECT tq_queue('sms', '{\"paused\": true}')")
    for n in range(3):
        one(db, "SELECT tq_add('pdf', json_object('invoice', ?), json_object('id', ?))",
            n, "invoice-pdf:%d" % (1040 + n))
    for n, job in enumerate(claim(db, "pdf", "pdf-worker-1", 2)):
        one(db, "SELECT tq_progress(?, ?, ?)", job["id"], job["attempt"],
            json.dumps({"page": 3 + 5 * n, "of": 12}))
    one(db, "SELECT tq_add('emails', '{}', '{\"id\": \"welcome:ada\", \"attempts\": 1, \"priority\": 9}')")
    [job] = claim(db, "emails", "worker-1", 1)
    one(db, "SELECT tq_settle(?, ?, 'fail', 'SMTP 550: mailbox unavailable')",
        job["id"], job["attempt"])


@pytest.fixture
def dashboard(db, db_path):
    """The dashboard of a populated store, as a real process: yields its base URL."""
    populate(db)
    proc = subprocess.Popen([PY, "-m", "tinyq", "dashboard", db_path, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = proc.stdout.readline()
    assert "http://127.0.0.1:" in line, proc.stderr.read()
    yield line.split()[-3].rstrip("/") + "/"        # "...: http://127.0.0.1:PORT/ (Ctrl-C stops)"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0
    assert proc.stderr.read() == ""


def http(url, body=None, headers=None):
    """(status, JSON or text) of a GET, or of a POST when there is a body."""
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, data, kind = response.status, response.read(), response.headers.get_content_type()
    except urllib.error.HTTPError as err:
        status, data, kind = err.code, err.read(), err.headers.get_content_type()
    return status, json.loads(data) if kind == "application/json" else data.decode()


def post_json(url, value, **headers):
    return http(url, json.dumps(value).encode(), dict({"Content-Type": "application/json"}, **headers))


def test_state_and_retry_over_http(dashboard, db):
    status, state = http(dashboard + "api/state")
    assert status == 200
    queues = {q["queue"]: q for q in state["queues"]}
    assert set(queues) == {"emails", "pdf", "reports", "sms"} and queues["sms"]["paused"] == 1
    assert [j["id"] for j in state["running"]] == ["invoice-pdf:1040", "invoice-pdf:1041"]
    assert json.loads(state["running"][0]["progress"]) == {"page": 3, "of": 12}
    assert state["failed"][0]["id"] == "welcome:ada"
    assert state["failed"][0]["error"] == "SMTP 550: mailbox unavailable"
    chart = state["chart"]
    assert len(chart["done"]) == len(chart["failed"]) == 60
    assert sum(chart["done"]) == queues["emails"]["done"] and sum(chart["failed"]) > 0

    assert post_json(dashboard + "api/retry", {"id": "welcome:ada"}) == (200, {"retried": True})
    assert get(db, "welcome:ada")["state"] == "waiting"
    assert post_json(dashboard + "api/retry", {"id": "welcome:ada"}) == (200, {"retried": False})

    # Only JSON from its own page: no form posts, no other origin, no other host name.
    assert http(dashboard + "api/retry", b"id=x")[0] == 415
    assert post_json(dashboard + "api/retry", {"id": "x"}, Origin="http://evil.example")[0] == 403
    assert http(dashboard + "api/state", headers={"Host": "evil.example"})[0] == 403
    assert http(dashboard + "nothing")[0] == 404

    status, page = http(dashboard)
    assert status == 200 and "<svg" in page
    assert "src=" not in page and "<link" not in page      # no external script or style


# -- the page in headless Chromium --------------------------------------------------------

class Browser:
    """A headless Chromium session through chromedriver's WebDriver HTTP API."""

    def __init__(self, workdir):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.driver = subprocess.Popen([CHROMEDRIVER, "--port=%d" % port],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = "http://127.0.0.1:%d" % port
        for _ in range(100):
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except OSError:
                time.sleep(0.1)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--window-size=1100,1000", "--user-data-dir=" + os.path.join(workdir, "profile")]
        caps = {"browserName": "chrome",
                "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}
        self.session = "/session/" + \
            self._call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as err:
            raise AssertionError("WebDriver %s %s: %s" % (method, path, err.read()[:500]))

    def go(self, url):
        self._call("POST", self.session + "/url", {"url": url})

    def js(self, script, *args):
        return self._call("POST", self.session + "/execute/sync",
                          {"script": script, "args": list(args)})

    def text(self, element_id):
        return self.js("return document.getElementById(arguments[0]).innerText", element_id)

    def wait_for(self, what, predicate, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError("the page did not show %s: %r" % (what, self.text("status")))

    def click(self, css):
        element = self._call("POST", self.session + "/element",
                             {"using": "css selector", "value": css})
        self._call("POST", self.session + "/element/%s/click" % next(iter(element.values())), {})

    def screenshot(self):
        return base64.b64decode(self._call("GET", self.session + "/screenshot"))

    def close(self):
        try:
            self._call("DELETE", self.session)
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=10)


@pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                    reason="needs chromium and chromium-driver (apt-get install chromium chromium-driver)")
def test_the_page_in_headless_chromium(dashboard, db, tmp_path):
    workdir = tempfile.mkdtemp(prefix="tinyq-chromium-")
    browser = Browser(workdir)
    try:
        browser.go(dashboard)
        browser.wait_for("the queues", lambda: "emails" in browser.text("queues"))
        assert "invoice-pdf:1040" in browser.text("running")
        assert '{"page": 3, "of": 12}' in browser.text("running")
        assert "SMTP 550: mailbox unavailable" in browser.text("failed")
        assert browser.js("return document.querySelectorAll('#chart rect').length") == 120

        # A job that fails after the page opened shows up by itself (the page refreshes).
        one(db, "SELECT tq_add('webhooks', '{}', '{\"id\": \"hook:77\", \"attempts\": 1}')")
        claim(db, "webhooks", "hook-worker")
        one(db, "SELECT tq_settle('hook:77', 1, 'error', 'HTTP 502 from hooks.example.com')")
        browser.wait_for("hook:77", lambda: "hook:77" in browser.text("failed"))
        assert "webhooks" in browser.text("queues")
        png = browser.screenshot()
        assert png.startswith(b"\x89PNG")
        (tmp_path / "dashboard.png").write_bytes(png)
        if os.environ.get("TINYQ_DASHBOARD_PNG"):
            with open(os.environ["TINYQ_DASHBOARD_PNG"], "wb") as f:
                f.write(png)

        # Its Retry button brings it back: waiting again, and gone from the failed list.
        browser.click('button[data-id="hook:77"]')
        browser.wait_for("hook:77 retried", lambda: "hook:77" not in browser.text("failed"))
        assert get(db, "hook:77")["state"] == "waiting"
        assert not browser.text("status").startswith("could not")
    finally:
        browser.close()
        shutil.rmtree(workdir, ignore_errors=True)
