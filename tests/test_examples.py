"""The examples in examples/ run as a newcomer would run them, and do what they say."""
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from helpers import EXT, ROOT, connect, one

PY = "/usr/bin/python3"


def example_env():
    return dict(os.environ, TINYQ_EXT=EXT)


# -- examples/web_slow_model.py ----------------------------------------------------------

def start(*args):
    """A process of the web example, once it has printed its first line (it is ready)."""
    proc = subprocess.Popen([PY, "examples/web_slow_model.py", *args], cwd=ROOT,
                            env=example_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    if not first:
        proc.kill()
        raise AssertionError("%s did not start: %s" % (args, proc.communicate()[1]))
    return proc, first


def stop(proc):
    """SIGTERM, then the exit code and everything it printed."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def http(method, url, body=None, key=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if key is not None:
        request.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read())


def poll(url, until, seen, timeout=60):
    """GET url every 50 ms until its state is one of `until`; appends each new state to
    `seen` (the states in the order they were seen) and returns the last reply."""
    deadline = time.monotonic() + timeout
    while True:
        status, job = http("GET", url)
        assert status == 200, job
        if not seen or seen[-1] != job["state"]:
            seen.append(job["state"])
        if job["state"] in until or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def in_order(seen, order):
    """Each state of `seen` is in `order`, and they come in that order."""
    positions = [order.index(state) for state in seen]
    return positions == sorted(positions) and len(set(positions)) == len(positions)


def test_web_slow_model_answers_202_at_once_and_the_worker_does_the_slow_part(tmp_path):
    db = str(tmp_path / "web.db")
    worker, _ = start("--db", db, "--worker")
    web = None
    try:
        web, first = start("--db", db, "--port", "0")
        base = first.strip().rsplit(" ", 1)[1]
        assert base.startswith("http://127.0.0.1:"), first

        # POST answers 202 with the job at once: before the model has answered, the job is
        # not done yet (a POST that waited for the model would answer "done").
        text = "The quarterly report shows revenue up four percent and costs flat overall."
        status, accepted = http("POST", base + "/summaries", {"text": text}, key="doc-7")
        assert status == 202
        assert accepted["job"] == "summary:doc-7"
        assert accepted["state"] in ("waiting", "running"), accepted

        # GET shows the job moving on, and its result once done.
        seen = [accepted["state"]]         # "running" in between, if a poll came in time
        job = poll(base + "/summaries/summary:doc-7", ("done", "failed"), seen)
        assert seen[-1] == "done", seen
        assert in_order(seen, ["waiting", "running", "done"]), seen
        assert job["attempt"] == 1
        assert job["result"] == {"summary": "The quarterly report shows revenue up four percent ..."}

        # The same key again: the same job, already done, and no second job.
        status, again = http("POST", base + "/summaries", {"text": text}, key="doc-7")
        assert status == 202 and again == {"job": "summary:doc-7", "state": "done"}
        conn = connect(db)
        try:
            assert one(conn, "SELECT count(*) FROM tq_jobs") == 1
            events = conn.execute("SELECT state FROM tq_watch(0) WHERE id = 'summary:doc-7'")
            assert [e[0] for e in events].count("running") == 1     # the model ran once

            # SIGTERM while a job runs (unless a stalled machine let it finish first): the
            # worker finishes it, settles it and exits cleanly.
            http("POST", base + "/summaries", {"text": "Short."}, key="doc-8")
            seen = []
            poll(base + "/summaries/summary:doc-8", ("running", "done", "failed"), seen)
            rc, out, err = stop(worker)
            assert rc == 0, err
            assert "summary:doc-8 done" in out and "stopped after 2 job(s)" in out, out
            job = json.loads(one(conn, "SELECT tq_get('summary:doc-8')"))
            assert job["state"] == "done" and job["result"] == {"summary": "Short."}, seen
            assert one(conn, "SELECT count(*) FROM tq_jobs") == 2
        finally:
            conn.close()

        rc, out, err = stop(web)
        assert rc == 0, err
        assert "web:    stopped" in out
        assert out.count('"POST /summaries HTTP/1.1" 202') == 3, out
    finally:
        for proc in (worker, web):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_web_slow_model_refuses_what_it_cannot_take(tmp_path):
    db = str(tmp_path / "web.db")
    web, first = start("--db", db, "--port", "0")
    try:
        base = first.strip().rsplit(" ", 1)[1]
        for body, key in (("not json", "k1"), ({"no text": 1}, "k2"), ({"text": "x"}, "k" * 2000)):
            request = urllib.request.Request(
                base + "/summaries", method="POST", headers={"Idempotency-Key": key},
                data=body.encode() if isinstance(body, str) else json.dumps(body).encode())
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(request, timeout=60)
            assert caught.value.code == 400
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(base + "/summaries/summary:nothing", timeout=60)
        assert caught.value.code == 404
        # Without a key, every POST is a new job with a generated id.
        ids = {http("POST", base + "/summaries", {"text": "x"})[1]["job"] for _ in range(2)}
        assert len(ids) == 2 and all(i.startswith("tq_") for i in ids)
    finally:
        rc, out, err = stop(web)
    assert rc == 0, err


# -- examples/two_submits.py -------------------------------------------------------------

def test_two_submits_make_two_jobs_one_fails_once_and_a_second_sweep_runs_nothing(tmp_path):
    db = str(tmp_path / "two.db")
    proc = subprocess.run([PY, "examples/two_submits.py", db], cwd=ROOT, env=example_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == """\
submit order-1 -> job invoice:order-1
submit order-2 -> job invoice:order-2
submit order-1 -> job invoice:order-1 (seen before: nothing added)
jobs in the store: 2
sweep 1:
  invoice:order-1 attempt 1: done
  invoice:order-2 attempt 1: raises 'upstream timeout'
  invoice:order-2 attempt 2: done
sweep 1 ran 3 attempt(s)
sweep 2:
sweep 2 ran 0 attempt(s)
invoice:order-1: done after 1 attempt(s), result 'INVOICE A'
invoice:order-2: done after 2 attempt(s), result 'INVOICE B'
invoice:order-2 went: waiting -> running -> scheduled (TimeoutError: upstream timeout) \
-> waiting -> running -> done
"""
    conn = connect(db)
    try:
        rows = conn.execute("SELECT id, state, attempt FROM tq_jobs ORDER BY id").fetchall()
        assert rows == [("invoice:order-1", "done", 1), ("invoice:order-2", "done", 2)]
        running = one(conn, "SELECT count(*) FROM tq_watch(0) WHERE state = 'running'")
        assert running == 3
    finally:
        conn.close()


# -- examples/trigger_enqueue.sql and examples/shell_session.sql -------------------------

def sqlite3_shell(script, *db):
    """Run an example script the way its header says: `sqlite3 [db] < script`, from the root."""
    with open(os.path.join(ROOT, script)) as f:
        proc = subprocess.run(["sqlite3", *db], stdin=f, cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout


def test_trigger_enqueue_commits_and_rolls_back_the_job_with_the_order(tmp_path):
    db = str(tmp_path / "shop.db")
    out = sqlite3_shell("examples/trigger_enqueue.sql", db)
    assert out == """\
1. Order 1, committed:
   order-email:1 waiting {"order":1,"to":"ada@example.com"}
2. Order 2, rolled back (its job is visible inside the transaction, then gone):
   inside: order-email:2 waiting
   after ROLLBACK: 0 job(s) for order 2, 0 order row(s)
3. Order 1 written again (INSERT OR REPLACE fires the trigger again):
   1 job(s) for order 1
4. Order 3, in autocommit (the INSERT is its own transaction):
   1 job(s) for order 3
5. In the end: orders and their email jobs
   order 1: order-email:1 waiting
   order 3: order-email:3 waiting
   jobs in the store: 2
6. A mail worker claims them:
   order-email:1 attempt 1 to ada@example.com
   order-email:3 attempt 1 to cy@example.com
"""
    conn = connect(db)
    try:
        rows = conn.execute("SELECT id, state FROM tq_jobs ORDER BY id").fetchall()
        assert rows == [("order-email:1", "running"), ("order-email:3", "running")]
        assert one(conn, "SELECT group_concat(id) FROM orders") == "1,3"
    finally:
        conn.close()


def test_shell_session_prints_its_expected_output():
    out = sqlite3_shell("examples/shell_session.sql")
    with open(os.path.join(ROOT, "examples", "shell_session.out")) as f:
        expected = f.read()
    # Column mode pads with spaces; an editor may trim them in the .out file.
    assert [line.split() for line in out.splitlines()] == \
        [line.split() for line in expected.splitlines()]


# -- examples/asyncio_web.py ---------------------------------------------------------------

def test_asyncio_web_answers_202_the_worker_runs_the_slow_call_and_sigterm_waits(tmp_path):
    proc = subprocess.Popen([PY, "examples/asyncio_web.py", "--db", str(tmp_path / "web.db"),
                             "--port", "0"], cwd=ROOT, env=example_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("listening on "), proc.communicate(timeout=60)
        base = first.split()[-1]
        request = urllib.request.Request(base + "/triage", data=b'{"ticket": 1}', method="POST",
                                         headers={"X-Request-Id": "req-41"})
        with urllib.request.urlopen(request, timeout=60) as response:
            status, accepted = response.status, json.loads(response.read())
        assert status == 202 and accepted["ticket"] == 1
        assert accepted["state"] in ("waiting", "running")          # the model has not answered
        seen = [accepted["state"]]
        job = poll(base + "/jobs/" + accepted["job"], ("done", "failed"), seen)
        assert seen[-1] == "done" and in_order(seen, ["waiting", "running", "done"])
        assert job["result"] == {"ticket": 1, "state": "awaiting_approval", "category": "refund",
                                 "confidence": "high"}
        _, failing = http("POST", base + "/triage", {"ticket": 13})
        job = poll(base + "/jobs/" + failing["job"], ("failed", "scheduled"), [])
        assert job["error"] == "ProviderError"                       # the class, not the message
        _, last = http("POST", base + "/triage", {"ticket": 2})
        poll(base + "/jobs/" + last["job"], ("running",), [])
        rc, out, err = stop(proc)                                     # a call in flight
    finally:
        proc.kill()
    assert rc == 0, err
    assert "stopped after" in out
    assert "job=%s request=req-41 classifying ticket 1" % accepted["job"] in err
    assert "sk-live" not in json.dumps(job)
    conn = connect(str(tmp_path / "web.db"))
    assert json.loads(one(conn, "SELECT tq_get(?)", last["job"]))["state"] == "done"
    conn.close()


# -- examples/approval.py -----------------------------------------------------------------

def start_approval(db, role):
    """A process of the approval example in `role`, once it has said it is ready."""
    proc = subprocess.Popen([PY, "examples/approval.py", "--db", db, "--port", "0", "--role", role],
                            cwd=ROOT, env=example_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    if not first:
        proc.kill()
        raise AssertionError("approval.py --role %s did not start: %s" % (role, proc.communicate()[1]))
    return proc, first.split()[-1]


def test_approval_waits_for_a_person_and_sends_once_even_if_its_worker_is_killed(tmp_path):
    db = str(tmp_path / "desk.db")
    web, base = start_approval(db, "web")
    worker, _ = start_approval(db, "worker")
    procs = [web, worker]
    try:
        status, accepted = http("POST", base + "/tickets/1/triage")
        assert status == 202 and accepted["job"] == "triage:ticket-1"
        assert accepted["state"] in ("waiting", "running")           # the model has not answered
        seen = [accepted["state"]]
        job = poll(base + "/jobs/triage:ticket-1", ("blocked", "done", "failed"), seen)
        assert seen[-1] == "blocked" and in_order(seen, ["waiting", "running", "blocked"]), seen
        assert job["blocked_on"]["signal"] == "approve:ticket-1"
        assert http("GET", base + "/tickets/1")[1] == {"ticket": 1, "state": "awaiting_approval", "sent": 0}

        worker.kill()                                  # SIGKILL while the job waits
        first_out, _ = worker.communicate(timeout=60)
        assert worker.returncode == -signal.SIGKILL

        assert http("POST", base + "/tickets/1/approve", {"by": "lee"}) == (200, {"ticket": 1, "approved_by": "lee"})
        with pytest.raises(urllib.error.HTTPError) as again:
            http("POST", base + "/tickets/1/approve", {"by": "sam"})
        assert again.value.code == 409
        assert http("GET", base + "/jobs/triage:ticket-1")[1]["state"] == "waiting"   # no worker alive

        worker, _ = start_approval(db, "worker")
        procs.append(worker)
        seen = []
        job = poll(base + "/jobs/triage:ticket-1", ("done", "failed"), seen)
        assert job["state"] == "done", job
        assert job["result"] == {"ticket": 1, "state": "sent", "approved_by": "lee", "category": "refund",
                                 "confidence": "high"}
        assert http("GET", base + "/tickets/1")[1] == {"ticket": 1, "state": "sent", "sent": 1}
        rc, second_out, err = stop(worker)
        assert rc == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    out = first_out + second_out
    assert out.count("model: classify ticket 1") == 1 and out.count("model: draft ticket 1") == 1, out
    assert out.count("sent: ticket 1") == 1 and "sent: ticket 1" in second_out, out
