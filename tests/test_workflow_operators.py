"""What an operator sees and does about workflows (issue 23): `tinyq signal`, blocked jobs
counted in `tinyq stats`, the dashboard's queue table and /metrics, and a job's page (and
`tinyq get`) showing what it waits for, the signal it waits for, and what waits for it,
linked both ways. Real processes: the CLI and the dashboard server; the page in headless
Chromium where it is installed."""
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import claim, get, one
from test_cli import assert_error, tinyq
from test_dashboard import browser, dashboard_process, http, needs_chromium, save  # noqa: F401 (fixture)


@pytest.fixture
def flow(db, db_path):
    """pages: p1 done, p2 waiting; reports: digest blocked after p1 and p2; desk: ticket-1
    blocked on the signal approve:ticket-1."""
    for page in ("p1", "p2"):
        one(db, "SELECT tq_add('pages', '{}', ?)", json.dumps({"id": page}))
    [job] = claim(db, "pages")
    one(db, "SELECT tq_settle(?, ?, 'done', '\"summary 1\"')", job["id"], job["attempt"])
    one(db, "SELECT tq_add('reports', '{}', '{\"id\": \"digest\", \"after\": [\"p1\", \"p2\"]}')")
    one(db, "SELECT tq_add('desk', '{}', '{\"id\": \"ticket-1\"}')")
    [job] = claim(db, "desk")
    one(db, "SELECT tq_settle('ticket-1', ?, 'wait', '{\"signal\": \"approve:ticket-1\", \"timeout\": \"7d\"}')",
        job["attempt"])
    return db_path


def test_tinyq_signal_wakes_the_jobs_waiting_for_it(flow, db):
    assert get(db, "ticket-1")["state"] == "blocked"
    sent = tinyq("signal", flow, "approve:ticket-1", '{"by": "lee"}')
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == "approve:ticket-1: sent; 1 job waiting for it runs again\n"
    assert get(db, "ticket-1")["state"] == "waiting"
    assert json.loads(one(db, "SELECT tq_step_get('ticket-1', 'signal:approve:ticket-1')")) == {"by": "lee"}
    again = tinyq("signal", flow, "approve:ticket-1", '"other"')
    assert again.returncode == 0 and "0 jobs" in again.stdout
    assert json.loads(one(db, "SELECT tq_step_get('ticket-1', 'signal:approve:ticket-1')")) == {"by": "lee"}


def test_tinyq_signal_refuses_a_bad_name_and_keep(flow, db):
    assert_error(tinyq("signal", flow, "x" * 1001), 2, "tq_signal")
    assert_error(tinyq("signal", flow, "approve:2", "--keep", "soon"), 2, "soon")
    assert tinyq("signal", flow, "approve:2", "--keep", "1h").returncode == 0


def test_stats_and_jobs_count_and_list_blocked_jobs(flow):
    stats = tinyq("stats", flow)
    assert stats.returncode == 0, stats.stderr
    header, *rows = stats.stdout.splitlines()
    column = header.split().index("blocked")
    blocked = {row.split()[0]: row.split()[column] for row in rows}
    assert blocked == {"desk": "1", "pages": "0", "reports": "1"}
    listed = tinyq("jobs", flow, "--state", "blocked")
    assert listed.returncode == 0, listed.stderr
    assert sorted(line.split()[0] for line in listed.stdout.splitlines()[1:]) == ["digest", "ticket-1"]
    page = tinyq("jobs", flow, "--queue", "reports", "--state", "blocked")     # one page of a list
    assert page.returncode == 0, page.stderr
    assert [line.split()[:3] for line in page.stdout.splitlines()[1:]] == [["digest", "reports", "blocked"]]


def test_get_shows_what_a_job_waits_for_and_what_waits_for_it(flow):
    digest = tinyq("get", flow, "digest").stdout
    assert "waits for:\n  p1  done\n  p2  waiting\n" in digest
    page = tinyq("get", flow, "p2").stdout
    assert "waited for by:\n  digest  blocked\n" in page
    ticket = tinyq("get", flow, "ticket-1").stdout
    assert "waits for    the signal approve:ticket-1, until " in ticket
    story = json.loads(tinyq("get", flow, "digest", "--json").stdout)
    assert [d["id"] for d in story["deps"]] == ["p1", "p2"] and story["job"]["blocked_on"] == {"after": ["p2"]}


@pytest.fixture
def dashboard(flow):
    yield from dashboard_process(flow)


def test_the_dashboard_api_and_metrics_know_blocked_jobs(dashboard):
    status, state = http(dashboard + "api/state")
    assert status == 200
    assert {q["queue"]: q["blocked"] for q in state["queues"]} == {"desk": 1, "pages": 0, "reports": 1}
    _, story = http(dashboard + "api/job/digest")
    assert [(d["id"], d["state"]) for d in story["deps"]] == [("p1", "done"), ("p2", "waiting")]
    _, story = http(dashboard + "api/job/p1")
    assert story["dependents"] == [{"id": "digest", "state": "blocked"}]
    families = {f.name: f for f in text_string_to_metric_families(http(dashboard + "metrics")[1])}
    blocked = {s.labels["queue"]: s.value for s in families["tinyq_jobs"].samples if s.labels["state"] == "blocked"}
    assert blocked == {"desk": 1, "pages": 0, "reports": 1}


@needs_chromium
def test_a_blocked_jobs_page_links_both_ways(dashboard, browser, tmp_path):
    browser.go(dashboard + "job/digest")
    browser.wait_for("the workflow", lambda: "p2" in browser.text("job-deps"))
    assert browser.text("job-state") == "blocked"
    assert browser.js("return [...document.querySelectorAll('#job-deps a')].map(a => a.getAttribute('href'))") == \
        ["/job/p1", "/job/p2"]
    save(browser, tmp_path, "dashboard-blocked.png")
    browser.click("#job-deps a[data-id='p2']")
    browser.wait_for("the page of p2", lambda: "digest" in browser.text("job-dependents"))
    assert browser.js("return document.querySelector('#job-dependents a').getAttribute('href')") == "/job/digest"
    browser.go(dashboard + "job/ticket-1")
    browser.wait_for("the signal", lambda: "approve:ticket-1" in browser.text("job-signal"))
    assert "until" in browser.text("job-signal")
