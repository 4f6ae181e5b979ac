"""`tinyq dashboard DB` (python/tinyq/dashboard.py): its JSON API and /metrics over HTTP,
then the page itself in headless Chromium, driven through chromedriver's WebDriver HTTP API
(stdlib only), clicking through as an operator does.

The browser test is skipped when /usr/bin/chromium or /usr/bin/chromedriver is missing
(Debian: apt-get install chromium chromium-driver). With TINYQ_SCREENSHOTS=dir it also saves
its screenshots there (`make screenshots` makes docs/dashboard*.png so).
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
from prometheus_client.parser import text_string_to_metric_families

from helpers import EXT, ROOT, claim, get, one

PY = "/usr/bin/python3"
ENV = dict({k: v for k, v in os.environ.items() if not k.startswith("TINYQ_DASHBOARD_")},
           PYTHONPATH=os.path.join(ROOT, "python"), TINYQ_EXT=EXT)     # no sign-in unless a test asks
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
    report_story(db, now)
    one(db, "SELECT tq_schedule('nightly-report', 'reports', '0 2 * * *', '{\"kind\": \"nightly\"}')")
    one(db, "SELECT tq_schedule('digest', 'emails', '@every 1h', '{}', '{\"paused\": true}')")
    one(db, "SELECT tq_add('emails', '{}', '{\"id\": \"welcome:ada\", \"attempts\": 1, \"priority\": 9}')")
    [job] = claim(db, "emails", "worker-1", 1)
    one(db, "SELECT tq_settle(?, ?, 'fail', 'SMTP 550: mailbox unavailable')",
        job["id"], job["attempt"])


def report_story(db, now):
    """report:q3, a job with a story: two attempts by two workers, steps, progress, errors,
    then failed for good."""
    one(db, "SELECT tq_clock(?)", now - 90_000)
    one(db, "SELECT tq_add('reports', json_object('quarter', 'Q3', 'format', 'pdf'), json_object("
            "'id', 'report:q3', 'attempts', 2, 'group', 'acme', 'meta', json_object('requested_by', 'ada', "
            "'trace', 'req-4f1c')))")
    for attempt, worker, error in ((1, "report-worker-1", "timeout talking to the renderer"),
                                   (2, "report-worker-2", "renderer crashed: out of memory on page 7")):
        [job] = claim(db, "reports", worker)
        assert (job["id"], job["attempt"]) == ("report:q3", attempt)
        one(db, "SELECT tq_step_put('report:q3', ?, 'fetch-rows', json_object('rows', 18250))", attempt)
        one(db, "SELECT tq_clock(?)", now - 80_000 + attempt * 20_000)
        one(db, "SELECT tq_progress('report:q3', ?, json_object('page', ?, 'of', 12))", attempt, 3 + 4 * attempt)
        one(db, "SELECT tq_step_put('report:q3', ?, 'render-pages', 'pages 1-6')", attempt)
        one(db, "SELECT tq_settle('report:q3', ?, 'error', ?)", attempt, error)
        one(db, "SELECT tq_clock(?)", now - 60_000 + attempt * 20_000)
    one(db, "SELECT tq_clock(NULL)")


@pytest.fixture
def dashboard(db, db_path):
    """The dashboard of a populated store, as a real process: yields its base URL."""
    populate(db)
    yield from dashboard_process(db_path)


def dashboard_process(db_path, *args, env=ENV):
    """A `tinyq dashboard` process on the store (with `args`): yields its base URL; then
    Ctrl-C, and it must exit cleanly, with nothing on stderr."""
    proc = subprocess.Popen([PY, "-m", "tinyq", "dashboard", db_path, "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = proc.stdout.readline()
    assert "http://127.0.0.1:" in line, proc.stderr.read()
    yield line.split()[-3].rstrip("/") + "/"        # "...: http://127.0.0.1:PORT/ (Ctrl-C stops)"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == ""


def http(url, body=None, headers=None):
    """(status, JSON or text) of a GET, or of a POST when there is a body."""
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
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
    assert queues["reports"]["settings"]["attempts"] == 1
    assert [j["id"] for j in state["running"]] == ["invoice-pdf:1040", "invoice-pdf:1041"]
    assert json.loads(state["running"][0]["progress"]) == {"page": 3, "of": 12}
    assert state["failed"][0]["id"] == "welcome:ada"
    assert state["failed"][0]["error"] == "SMTP 550: mailbox unavailable"
    assert [(s["name"], s["paused"]) for s in state["schedules"]] == [("digest", 1), ("nightly-report", 0)]
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
    assert http(dashboard + "job/report%3Aq3") == (200, page)


def test_a_job_and_the_lists_over_http(dashboard, db):
    status, story = http(dashboard + "api/job/report%3Aq3")
    assert status == 200
    job = story["job"]
    assert (job["state"], job["queue"], job["group"], job["attempt"], job["attempts"]) == \
        ("failed", "reports", "acme", 2, 2)
    assert job["payload"] == {"quarter": "Q3", "format": "pdf"}
    assert job["meta"] == {"requested_by": "ada", "trace": "req-4f1c"}
    assert job["error"] == "renderer crashed: out of memory on page 7"
    assert [(s["name"], s["attempt"], s["value"]) for s in story["steps"]] == \
        [("fetch-rows", 1, '{"rows":18250}'), ("render-pages", 1, "pages 1-6")]
    assert [(e["state"], e["attempt"], e["worker"]) for e in story["timeline"]] == [
        ("waiting", 0, None), ("running", 1, "report-worker-1"), ("progress", 1, "report-worker-1"),
        ("scheduled", 1, "report-worker-1"), ("waiting", 1, "report-worker-1"),
        ("running", 2, "report-worker-2"), ("progress", 2, "report-worker-2"), ("failed", 2, "report-worker-2")]
    assert story["timeline"][3]["detail"] == "timeout talking to the renderer"
    # The page asks only for the events after the last one it has.
    status, later = http(dashboard + "api/job/report%%3Aq3?since=%d" % story["timeline"][5]["seq"])
    assert [(e["state"], e["worker"]) for e in later["timeline"]] == \
        [("progress", "report-worker-2"), ("failed", "report-worker-2")]
    assert http(dashboard + "api/job/report%3Aq3?since=x")[0] == 400
    assert http(dashboard + "api/job/nobody") == (404, {"error": "no job 'nobody'"})

    # Pages of a list: 50 at a time, continued by `next`, each job once.
    done = queue_count(db, "emails", "done")
    seen, after = [], None
    while True:
        status, page = http(dashboard + "api/jobs?queue=emails&state=done" + ("&after=" + after if after else ""))
        assert status == 200 and len(page["jobs"]) <= 50
        seen += [j["id"] for j in page["jobs"]]
        after = page["next"]
        if after is None:
            break
    assert len(seen) == len(set(seen)) == done > 100
    status, page = http(dashboard + "api/jobs?queue=reports&state=failed&group=acme")
    assert [j["id"] for j in page["jobs"]] == ["report:q3"]
    status, page = http(dashboard + "api/jobs?prefix=invoice-pdf%3A104")
    assert [j["id"] for j in page["jobs"]] == ["invoice-pdf:1040", "invoice-pdf:1041", "invoice-pdf:1042"]
    assert http(dashboard + "api/jobs?queue=emails&state=lost")[0] == 400
    status, answer = http(dashboard + "api/jobs?queue=emails&state=done&after=nobody")
    assert status == 400 and answer["error"].startswith("tq_jobs: after: no job 'nobody'")


def queue_count(db, queue, state):
    return one(db, "SELECT %s FROM tq_stats(?)" % state, queue)


def test_actions_go_through_tinyq(dashboard, db):
    assert post_json(dashboard + "api/cancel", {"id": "invoice-pdf:1040"}) == (200, {"cancelled": True})
    assert get(db, "invoice-pdf:1040") is None
    status, story = http(dashboard + "api/job/invoice-pdf%3A1040")
    assert status == 200 and story["job"] is None and story["steps"] == []
    assert [(e["state"], e["worker"]) for e in story["timeline"]][-2:] == \
        [("progress", "pdf-worker-1"), ("cancelled", "pdf-worker-1")]
    assert post_json(dashboard + "api/cancel", {"id": "invoice-pdf:1040"}) == (200, {"cancelled": False})
    failed = queue_count(db, "reports", "failed")
    assert failed > 2
    assert post_json(dashboard + "api/retry", {"queue": "reports"}) == (200, {"retried": failed})
    assert queue_count(db, "reports", "failed") == 0 and get(db, "report:q3")["state"] == "waiting"
    status, answer = post_json(dashboard + "api/pause", {"queue": "emails", "paused": True})
    assert status == 200 and answer["settings"]["paused"] is True
    assert json.loads(one(db, "SELECT tq_queue('emails')"))["paused"] is True
    status, answer = post_json(dashboard + "api/limits", {"queue": "emails",
                                                          "settings": {"concurrency": 4, "rate": "10/s"}})
    assert status == 200 and (answer["settings"]["concurrency"], answer["settings"]["rate"]) == (4, "10/1000ms")
    status, answer = post_json(dashboard + "api/limits", {"queue": "emails", "settings": {"concurrency": None}})
    assert answer["settings"]["concurrency"] is None
    # tinyq's own message names a bad value; a setting that is not a limit is refused; nothing changes.
    before = one(db, "SELECT tq_queue('emails')")
    status, answer = post_json(dashboard + "api/limits", {"queue": "emails", "settings": {"rate": "often"}})
    assert status == 400 and answer["error"].startswith("tq_queue:") and "often" in answer["error"]
    status, answer = post_json(dashboard + "api/limits", {"queue": "emails", "settings": {"keep": "1d"}})
    assert status == 400 and "not a limit: keep" in answer["error"]
    assert post_json(dashboard + "api/pause", {"queue": "nowhere", "paused": True})[0] == 404
    assert post_json(dashboard + "api/pause", {"queue": "emails", "paused": "yes"})[0] == 400
    assert one(db, "SELECT tq_queue('emails')") == before
    assert one(db, "SELECT count(*) FROM tq_stats('nowhere')") == 0
    # The schedule's pause toggle keeps its definition.
    status, answer = post_json(dashboard + "api/schedule", {"name": "digest", "paused": False})
    assert status == 200 and answer["schedule"]["paused"] is False and answer["schedule"]["next_at"]
    status, answer = post_json(dashboard + "api/schedule", {"name": "nightly-report", "paused": True})
    assert answer["schedule"]["paused"] is True and answer["schedule"]["payload"] == {"kind": "nightly"}
    assert answer["schedule"]["when"] == "0 2 * * *"
    assert post_json(dashboard + "api/schedule", {"name": "nothing", "paused": True})[0] == 404
    for path in ("api/cancel", "api/pause", "api/limits", "api/schedule"):
        assert post_json(dashboard + path, {"id": "x"}, Origin="http://evil.example")[0] == 403
        assert http(dashboard + path, b"{}", {"Content-Type": "text/plain"})[0] == 415


def test_metrics_parse_as_prometheus_text(dashboard, db):
    status, text = http(dashboard + "metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    jobs = {(s.labels["queue"], s.labels["state"]): s.value for s in families["tinyq_jobs"].samples}
    for q in json.loads(json.dumps(http(dashboard + "api/state")[1]["queues"])):
        for state in ("scheduled", "waiting", "running", "done", "failed"):
            assert jobs[(q["queue"], state)] == q[state]
    leases = {s.labels["queue"]: s.value for s in families["tinyq_running_leases"].samples}
    assert leases["pdf"] == 2
    oldest = {s.labels["queue"]: s.value for s in families["tinyq_oldest_waiting_seconds"].samples}
    assert oldest["emails"] >= 0 and oldest["pdf"] > 0
    assert families["tinyq_starts"].type == "counter" and families["tinyq_failures"].type == "counter"
    starts = {s.labels["queue"]: s.value for s in families["tinyq_starts"].samples if s.name.endswith("_total")}
    failures = {s.labels["queue"]: s.value for s in families["tinyq_failures"].samples if s.name.endswith("_total")}
    # Counted from the last 10 minutes of events when the dashboard started, then as they come.
    assert starts["emails"] > 100 and failures["reports"] >= 2
    claim(db, "emails", "w9", 3)
    one(db, "SELECT tq_add('reports', '{}')")
    [job] = claim(db, "reports", "w9")
    one(db, "SELECT tq_settle(?, ?, 'fail', 'bad input')", job["id"], job["attempt"])
    families = {f.name: f for f in text_string_to_metric_families(http(dashboard + "metrics")[1])}
    assert {s.labels["queue"]: s.value for s in families["tinyq_starts"].samples
            if s.name.endswith("_total")}["emails"] == starts["emails"] + 3
    assert {s.labels["queue"]: s.value for s in families["tinyq_failures"].samples
            if s.name.endswith("_total")}["reports"] == failures["reports"] + 1
    lag = {s.labels["schedule"]: s for s in families["tinyq_schedule_lag_seconds"].samples}
    assert set(lag) == {"digest", "nightly-report"} and lag["digest"].labels["queue"] == "emails"
    assert all(s.value == 0 for s in lag.values())       # neither is overdue
    assert http(dashboard + "metrics", headers={"Host": "evil.example"})[0] == 403


# -- the page in headless Chromium --------------------------------------------------------

PATIENCE = 60       # seconds: what the page may take to show something on a loaded machine
# WebDriver's answers when the element found was replaced by a re-render, is not there yet or
# is covered for a moment: finding it again and acting again is the cure.
RETRIABLE = {"stale element reference", "no such element", "element click intercepted",
             "element not interactable"}


class WebDriverError(AssertionError):
    """An error answer of chromedriver; .error is WebDriver's error code."""

    def __init__(self, method, path, body):
        super().__init__("WebDriver %s %s: %s" % (method, path, body[:500].decode(errors="replace")))
        try:
            self.error = json.loads(body)["value"]["error"]
        except (ValueError, KeyError, TypeError):
            self.error = None


class Browser:
    """A headless Chromium session through chromedriver's WebDriver HTTP API."""

    def __init__(self, workdir):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.driver = subprocess.Popen([CHROMEDRIVER, "--port=%d" % port],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = "http://127.0.0.1:%d" % port
        self.until("chromedriver", lambda: self._call("GET", "/status")["ready"],
                   retry=lambda err: isinstance(err, OSError))
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--window-size=1100,1300", "--user-data-dir=" + os.path.join(workdir, "profile")]
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
            raise WebDriverError(method, path, err.read()) from None

    @staticmethod
    def until(what, attempt, retry=lambda err: False, explain=lambda: ""):
        """attempt()'s first true result, tried again (after a false result, or an error that
        retry(error) accepts) until a deadline generous enough for a loaded machine."""
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                result = attempt()
                if result:
                    return result
            except Exception as err:
                if not retry(err) or time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise AssertionError("gave up waiting for %s%s" % (what, explain()))
            time.sleep(0.1)

    def go(self, url):
        self._call("POST", self.session + "/url", {"url": url})

    def js(self, script, *args):
        return self._call("POST", self.session + "/execute/sync",
                          {"script": script, "args": list(args)})

    def text(self, element_id):
        return self.js("return document.getElementById(arguments[0]).innerText", element_id)

    def wait_for(self, what, predicate):
        return self.until(what, predicate, explain=lambda: ": the page says %r" % self.text("status"))

    def act(self, css, action, body):
        """Find the element and act on it as one step, again until it works: the page re-renders
        itself every 1.5 s, so an element found may be replaced before the action reaches it
        (WebDriver: "stale element reference"), or not be there yet."""
        def attempt():
            element = self._call("POST", self.session + "/element", {"using": "css selector", "value": css})
            self._call("POST", self.session + "/element/%s/%s" % (next(iter(element.values())), action), body)
            return True
        self.until(css, attempt, retry=lambda err: getattr(err, "error", None) in RETRIABLE)

    def click(self, css):
        self.act(css, "click", {})

    def type(self, css, text):
        self.act(css, "value", {"text": text})

    def screenshot(self):
        return base64.b64decode(self._call("GET", self.session + "/screenshot"))

    def close(self):
        try:
            self._call("DELETE", self.session)
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=10)


def save(browser, tmp_path, name):
    """A screenshot, kept in the test's folder and, with TINYQ_SCREENSHOTS=dir, there too."""
    png = browser.screenshot()
    assert png.startswith(b"\x89PNG")
    (tmp_path / name).write_bytes(png)
    if os.environ.get("TINYQ_SCREENSHOTS"):
        with open(os.path.join(os.environ["TINYQ_SCREENSHOTS"], name), "wb") as f:
            f.write(png)


needs_chromium = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="needs chromium and chromium-driver (apt-get install chromium chromium-driver)")


@pytest.fixture
def browser():
    """A headless Chromium session, closed after the test."""
    workdir = tempfile.mkdtemp(prefix="tinyq-chromium-")
    session = Browser(workdir)
    try:
        yield session
    finally:
        session.close()
        shutil.rmtree(workdir, ignore_errors=True)


@needs_chromium
def test_the_page_in_headless_chromium(dashboard, db, tmp_path, browser):
    browser.go(dashboard)
    browser.wait_for("the queues", lambda: "emails" in browser.text("queues"))
    assert "invoice-pdf:1040" in browser.text("running")
    assert '{"page": 3, "of": 12}' in browser.text("running")
    assert "SMTP 550: mailbox unavailable" in browser.text("failed")
    assert browser.js("return document.querySelectorAll('#chart rect').length") == 120
    assert "nightly-report" in browser.text("schedules") and "paused" in browser.text("schedules")

    # A job that fails after the page opened shows up by itself (the page refreshes).
    one(db, "SELECT tq_add('webhooks', '{}', '{\"id\": \"hook:77\", \"attempts\": 1}')")
    claim(db, "webhooks", "hook-worker")
    one(db, "SELECT tq_settle('hook:77', 1, 'error', 'HTTP 502 from hooks.example.com')")
    browser.wait_for("hook:77", lambda: "hook:77" in browser.text("failed"))
    assert "webhooks" in browser.text("queues")
    browser.js("window.scrollTo(0, 0)")
    save(browser, tmp_path, "dashboard.png")

    # The failed jobs of a queue: its count in the queues table opens that list.
    browser.click('a[data-list="reports:failed"]')
    browser.wait_for("the failed reports", lambda: "report:q3" in browser.text("jobs"))
    assert "Jobs · reports · failed" in browser.text("jobs-title")
    assert "renderer crashed" in browser.text("jobs")
    browser.js("document.getElementById('jobs-title').scrollIntoView()")
    save(browser, tmp_path, "dashboard-lists.png")

    # A list answer older than the one shown is dropped: the waiting list, asked for first,
    # is answered after the failed list asked next, which stays.
    browser.js("""
        window.slowAnswers = 0;
        window.plainFetch = window.fetch;
        window.fetch = (url, options) => {
          const answer = window.plainFetch(url, options);
          if (!String(url).includes('state=waiting')) return answer;
          return answer.then((r) => new Promise((resolve) => setTimeout(() => {
            window.slowAnswers += 1; resolve(r); }, 800)));
        };""")
    browser.click('#list-states button[data-state="waiting"]')
    browser.click('#list-states button[data-state="failed"]')
    browser.wait_for("the slow answer", lambda: browser.js("return window.slowAnswers") >= 1)
    assert "failed" in browser.text("jobs-title") and "report:q3" in browser.text("jobs")
    browser.js("window.fetch = window.plainFetch")

    # Open the failed job from the list and read its timeline.
    browser.click('#jobs a[data-id="report:q3"]')
    browser.wait_for("the job's timeline", lambda: "report-worker-2" in browser.text("job-timeline"))
    assert browser.js("return location.pathname") == "/job/report%3Aq3"
    assert browser.text("job-state") == "failed"
    timeline = browser.text("job-timeline")
    for words in ("running", "progress", "report-worker-1", "timeout talking to the renderer",
                  '{"page":7,"of":12}', "failed"):
        assert words in timeline, words
    assert "fetch-rows" in browser.text("job-steps") and "pages 1-6" in browser.text("job-steps")
    assert '"requested_by": "ada"' in browser.text("job-meta")
    assert '"quarter": "Q3"' in browser.text("job-payload")
    assert "2 of 2 charged" in browser.text("job-fields")
    save(browser, tmp_path, "dashboard-job.png")

    # A payload stored as text that is not JSON says so: it shows as the JSON string
    # '"hello"' would (hello), and only the stored type tells the two apart.
    one(db, "SELECT tq_add('webhooks', 'hello', '{\"id\": \"plain:1\"}')")
    browser.go(dashboard.rstrip("/") + "/job/plain%3A1")
    browser.wait_for("the text payload", lambda: "payload (stored as text)" in browser.text("job-values"))
    assert browser.text("job-payload") == "hello"
    browser.go(dashboard.rstrip("/") + "/job/report%3Aq3")
    browser.wait_for("report:q3 again", lambda: browser.text("job-state") == "failed")
    assert "stored as" not in browser.text("job-values")

    # Retry it: asked first; then it is waiting again.
    browser.click('button[data-retry="report:q3"]')
    browser.wait_for("the question", lambda: browser.js("return document.getElementById('confirm').open"))
    assert "Retry job report:q3?" in browser.text("confirm-text")
    browser.click("#confirm-yes")
    browser.wait_for("report:q3 waiting", lambda: browser.text("job-state") == "waiting")
    assert get(db, "report:q3")["state"] == "waiting"
    assert "waiting" in browser.text("job-timeline").splitlines()[-1]

    # Cancel a running one, from the front page; "Keep as is" first changes nothing.
    browser.go(dashboard)
    browser.wait_for("the running jobs", lambda: "invoice-pdf:1041" in browser.text("running"))
    browser.click('#running button[data-cancel="invoice-pdf:1041"]')
    browser.wait_for("the question", lambda: browser.js("return document.getElementById('confirm').open"))
    browser.click("#confirm-no")
    assert get(db, "invoice-pdf:1041")["state"] == "running"
    browser.click('#running button[data-cancel="invoice-pdf:1041"]')
    browser.wait_for("the question", lambda: browser.js("return document.getElementById('confirm').open"))
    browser.click("#confirm-yes")
    browser.wait_for("invoice-pdf:1041 gone", lambda: "invoice-pdf:1041" not in browser.text("running"))
    assert get(db, "invoice-pdf:1041") is None
    # Its page still tells its story: the job is gone, its events are kept.
    browser.go(dashboard + "job/invoice-pdf%3A1041")
    browser.wait_for("the cancelled job", lambda: "cancelled" in browser.text("job-state"))
    assert [line.split("\t")[2] for line in browser.text("job-timeline").splitlines()] == \
        ["waiting", "running", "progress", "cancelled"]
    browser.go(dashboard)
    browser.wait_for("the queues", lambda: "emails" in browser.text("queues"))

    # Pause a queue.
    browser.click('button[data-pause="emails"]')
    browser.wait_for("the question", lambda: browser.js("return document.getElementById('confirm').open"))
    browser.click("#confirm-yes")
    browser.wait_for("emails paused", lambda: "paused" in browser.js(
        "return document.querySelector('td[data-queue=\"emails\"]').parentNode.innerText"))
    assert json.loads(one(db, "SELECT tq_queue('emails')"))["paused"] is True

    # Edit a queue's limits in its dialog; then pause a schedule.
    browser.click('button[data-limits="pdf"]')
    browser.wait_for("the limits", lambda: browser.js("return document.getElementById('limits').open"))
    browser.type("#limit-concurrency", "3")
    browser.type("#limit-rate", "20/m")
    browser.click("#limits-save")
    browser.wait_for("the question", lambda: browser.js("return document.getElementById('confirm').open"))
    assert '"concurrency":3' in browser.text("confirm-text")
    browser.click("#confirm-yes")
    browser.wait_for("the new limits", lambda: "concurrency 3, rate 20/60000ms" in browser.text("queues"))
    settings = json.loads(one(db, "SELECT tq_queue('pdf')"))
    assert (settings["concurrency"], settings["rate"]) == (3, "20/60000ms")
    browser.click('button[data-schedule="nightly-report"]')
    browser.wait_for("the question", lambda: browser.js("return document.getElementById('confirm').open"))
    browser.click("#confirm-yes")
    browser.wait_for("nightly-report paused", lambda: browser.js(
        "return document.querySelector('button[data-schedule=\"nightly-report\"]').textContent") == "Resume")
    assert [r[0] for r in db.execute("SELECT paused FROM tq_schedules WHERE name = 'nightly-report'")] == [1]

    # Page through a list: the second page has other jobs. A refresh under way at a click
    # may still draw the rows it had asked for under the new page number (the next one
    # mends it), so the test waits for the rows themselves, read with the number.
    def done_emails_on(page, besides=frozenset()):
        """The ids listed, when the list shows that page, only done emails, and some id
        not in `besides`."""
        number, rows = browser.js(
            "return [document.getElementById('page-number').innerText,"
            " [...document.querySelectorAll('#jobs tr')].filter(tr => tr.querySelector('a'))"
            ".map(tr => [tr.querySelector('a').dataset.id, tr.cells[1].innerText, tr.cells[2].innerText])]")
        ids = {job for job, _, _ in rows}
        shown = number == page and {(queue, state) for _, queue, state in rows} == {("emails", "done")}
        return ids if shown and ids - besides else None
    browser.click('a[data-list="emails:done"]')
    first = browser.wait_for("page 1 of the done emails", lambda: done_emails_on("page 1"))
    assert len(first) == 50 and "emails · done" in browser.text("jobs-title")
    browser.click("#page-next")
    second = browser.wait_for("page 2 of the done emails", lambda: done_emails_on("page 2", first))
    assert not first & second

    # Paste an id into the search box: its page opens.
    browser.type("#search-text", "welcome:ada")
    browser.click("#search button")
    browser.wait_for("welcome:ada's page", lambda: browser.js("return location.pathname") == "/job/welcome%3Aada")
    browser.wait_for("its timeline", lambda: "SMTP 550" in browser.text("job-timeline"))
    assert not browser.text("status").startswith("could not")
