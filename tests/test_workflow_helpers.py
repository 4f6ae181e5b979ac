"""Workflows through the worker helpers (issue 23): add(after=...), signal(), and in handlers
run.wait_for, run.wait_signal and run.sleep, each run against the three helpers (Python
threads, asyncio, Node) in real worker processes (tests/support/workflow_worker.py and .js),
with SIGKILL where it is about a crash. The rules themselves (DEP-01, SIG-01) are tested on
the SQL functions; here: that a handler reads as straight-line code, its kept steps are not
done again, and a waiting job holds no worker."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import DAY, EXT, ROOT, connect, one, pin, sweep_all

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402
from tinyq import _waits  # noqa: E402

PY = "/usr/bin/python3"
SUPPORT = os.path.join(ROOT, "tests", "support")
HELPERS = ("threads", "asyncio", "node")
GIVE_UP_S = 120          # only a failing run waits this long


def wait_for(predicate, what, timeout=GIVE_UP_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


class Worker:
    """A worker process of `helper` on the queue `wf`, its events logged to `log`."""

    def __init__(self, helper, db_path, log, concurrency=1):
        env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python"))
        if helper == "node":
            argv = ["node", os.path.join(SUPPORT, "workflow_worker.js"), db_path, log, str(concurrency)]
        else:
            argv = [PY, os.path.join(SUPPORT, "workflow_worker.py"), helper, db_path, log, str(concurrency)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout.readline().strip() == "working", self.proc.stderr.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=GIVE_UP_S)
        assert "returned" in out, (out, err)

    def kill(self):
        self.proc.kill()
        self.proc.communicate(timeout=GIVE_UP_S)
        assert self.proc.returncode == -signal.SIGKILL


@pytest.fixture
def wf(tmp_path):
    """(queue `wf` on a new store, its log's path, a function reading the log's events)."""
    db_path, log = str(tmp_path / "store.db"), str(tmp_path / "events.log")
    queue = tinyq.Queue(db_path, "wf")
    open(log, "w").close()

    def events(event=None, job=None):
        with open(log) as f:
            lines = [line.split() for line in f]
        return [e for e in lines if (event is None or e[0] == event) and (job is None or e[1] == job)]
    yield queue, log, events
    queue.close()


def state(queue, job_id):
    job = queue.get(job_id)
    return job and job["state"]


def workers(helper, queue, log, concurrency=1):
    return Worker(helper, queue.path, log, concurrency)


# -- wait_for: a fan-out whose parent collects its children's results ------------------------

@pytest.mark.parametrize("helper", HELPERS)
def test_fan_out_then_wait_for_returns_each_childs_result(wf, helper):
    queue, log, events = wf
    queue.add({"kind": "parent", "children": 5}, id="parent")
    worker = workers(helper, queue, log)          # concurrency 1: the parent's wait frees the slot
    try:
        wait_for(lambda: state(queue, "parent") == "done", "the parent to finish")
    finally:
        worker.stop()
    assert queue.get("parent")["result"] == {"results": [0, 10, 20, 30, 40]}
    assert [state(queue, "parent/%d" % n) for n in range(5)] == ["done"] * 5
    assert len(events("start", "parent")) == 2 and len(events("collected", "parent")) == 1
    assert all(len(events("start", "parent/%d" % n)) == 1 for n in range(5))   # the replay added none
    assert [d["id"] for d in queue.deps("parent")] == ["parent/%d" % n for n in range(5)]


@pytest.mark.parametrize("helper", HELPERS)
def test_a_child_that_fails_for_good_fails_the_parent_waiting_for_it(wf, helper):
    queue, log, events = wf
    queue.add({"kind": "parent", "children": 3, "failing": 1}, id="parent")
    worker = workers(helper, queue, log)
    try:
        wait_for(lambda: state(queue, "parent") == "failed", "the parent to fail")
        # The parent fails with its first failed child; the others run on (they may not have
        # started yet when it fails, on a loaded machine).
        wait_for(lambda: [state(queue, "parent/%d" % n) for n in (0, 2)] == ["done", "done"],
                 "the other children to finish")
    finally:
        worker.stop()
    job = queue.get("parent")
    assert job["error"] == "dependency 'parent/1' failed: bad page", job
    assert len(events("start", "parent")) == 1 and not events("collected")
    assert [state(queue, "parent/%d" % n) for n in range(3)] == ["done", "failed", "done"]


@pytest.mark.parametrize("helper", ("threads", "asyncio"))
def test_DEP_01_wait_for_keeps_jobs_that_were_done_at_once(wf, helper):
    """Children already done when their parent's handler first calls wait_for: they are kept
    until the parent has finished, through a later wait_signal('7d') that outlasts their
    dedupe (1 day): a sweep on a clock pinned 2 days on takes them not, and the replay after
    the signal returns their results (before: swept, the parent failed, "... is gone")."""
    queue, log, events = wf
    ids = ["kid/0", "kid/1"]
    for n, kid in enumerate(ids):
        queue.add({"kind": "child", "n": n, "fail": False}, id=kid)
    worker = workers(helper, queue, log)
    try:
        wait_for(lambda: all(state(queue, kid) == "done" for kid in ids), "the children to finish")
        queue.add({"kind": "collect", "ids": ids, "signal": "approve"}, id="parent")
        wait_for(lambda: ((queue.get("parent") or {}).get("blocked_on") or {}).get("signal") == "approve",
                 "the parent to wait for its signal")
        later = connect(queue.path)
        try:
            pin(later, one(later, "SELECT tq_now()") + 2 * DAY)     # past the children's dedupe
            sweep_all(later)
            assert [one(later, "SELECT tq_get(?) ->> 'state'", kid) for kid in ids] == ["done", "done"]
        finally:
            later.close()
        assert queue.signal("approve", "yes") == 1
        wait_for(lambda: state(queue, "parent") in ("done", "failed"), "the parent to finish")
    finally:
        worker.stop()
    job = queue.get("parent")
    assert (job["state"], job["result"]) == ("done", {"results": [0, 10], "approval": "yes"}), job
    assert all(len(events("start", kid)) == 1 for kid in ids)
    assert len(events("sent", "parent")) == 1
    assert [d["id"] for d in queue.deps("parent")] == ids


def test_add_after_blocks_a_job_until_its_dependencies_are_done(wf):
    queue, log, events = wf
    first = queue.add({"kind": "plain"}, id="first")
    queue.add({"kind": "plain"}, id="then", after=[first])
    assert state(queue, "then") == "blocked"
    assert queue.get("then")["blocked_on"] == {"after": ["first"]}
    worker = workers("threads", queue, log)
    try:
        wait_for(lambda: state(queue, "then") == "done", "the dependent to run")
    finally:
        worker.stop()
    starts = [e[1] for e in events("start")]
    assert starts == ["first", "then"]


def test_add_after_failed_reaches_the_extension(wf):
    queue, _, _ = wf
    queue.add({"kind": "plain"}, id="first")
    with pytest.raises(Exception, match="after_failed"):
        queue.add({"kind": "plain"}, id="then", after=["first"], after_failed="sometimes")
    assert queue.get("then") is None
    queue.add({"kind": "plain"}, id="then", after="first", after_failed="run")   # one id alone
    assert queue.get("then")["blocked_on"] == {"after": ["first"]}


# -- wait_signal ------------------------------------------------------------------------------

@pytest.mark.parametrize("helper", HELPERS)
def test_wait_signal_gets_a_signal_sent_by_another_process(wf, helper):
    queue, log, events = wf
    queue.add({"kind": "approval", "signal": "approve:1"}, id="ticket-1")
    worker = workers(helper, queue, log)
    try:
        wait_for(lambda: state(queue, "ticket-1") == "blocked", "the job to wait for its signal")
        assert queue.get("ticket-1")["blocked_on"]["signal"] == "approve:1"
        cli = subprocess.run([PY, "-m", "tinyq", "signal", queue.path, "approve:1", '{"by": "lee"}'],
                             env=dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python")),
                             capture_output=True, text=True, timeout=GIVE_UP_S)
        assert cli.returncode == 0, cli.stderr
        wait_for(lambda: state(queue, "ticket-1") == "done", "the signal to finish the job")
    finally:
        worker.stop()
    assert queue.get("ticket-1")["result"] == {"draft": "a draft", "approval": {"by": "lee"}}
    assert len(events("model")) == 1 and len(events("sent")) == 1


@pytest.mark.parametrize("helper", HELPERS)
def test_a_signal_sent_before_the_wait_returns_at_once(wf, helper):
    queue, log, events = wf
    queue.signal("approve:2", "yes")
    queue.add({"kind": "approval", "signal": "approve:2"}, id="ticket-2")
    worker = workers(helper, queue, log)
    try:
        wait_for(lambda: state(queue, "ticket-2") == "done", "the job to finish")
    finally:
        worker.stop()
    assert queue.get("ticket-2")["result"]["approval"] == "yes"
    assert len(events("model")) == 1 and len(events("sent")) == 1


@pytest.mark.parametrize("helper", HELPERS)
def test_a_signal_without_payload_from_sql_ends_the_wait_with_none(wf, helper):
    """tq_signal(name) from SQL (a trigger, the shell) keeps a NULL payload: the wait must end
    all the same, not come back to wait again."""
    queue, log, events = wf
    queue.add({"kind": "approval", "signal": "approve:6", "timeout": "7d"}, id="ticket-6")
    worker = workers(helper, queue, log)
    try:
        wait_for(lambda: state(queue, "ticket-6") == "blocked", "the job to wait")
        assert one(queue.conn, "SELECT tq_signal('approve:6')") == 1
        wait_for(lambda: state(queue, "ticket-6") == "done", "the signal to finish the job")
    finally:
        worker.stop()
    assert queue.get("ticket-6")["result"] == {"draft": "a draft", "approval": None}
    assert len(events("start")) == 2 and len(events("sent")) == 1


@pytest.mark.parametrize("helper", HELPERS)
def test_wait_signal_returns_none_after_its_timeout(wf, helper):
    queue, log, events = wf
    queue.add({"kind": "approval", "signal": "approve:3", "timeout": "200ms"}, id="ticket-3")
    worker = workers(helper, queue, log)
    try:
        wait_for(lambda: state(queue, "ticket-3") == "done", "the timeout to end the wait")
    finally:
        worker.stop()
    assert queue.get("ticket-3")["result"] == {"draft": "a draft", "approval": None}
    assert len(events("model")) == 1 and len(events("sent")) == 1
    assert queue.signal("approve:3", "late") == 0          # nothing waits for it any more


@pytest.mark.parametrize("helper", HELPERS)
def test_a_killed_worker_loses_nothing_while_its_job_waits(wf, helper):
    queue, log, events = wf
    queue.add({"kind": "approval", "signal": "approve:4"}, id="ticket-4")
    first = workers(helper, queue, log)
    try:
        wait_for(lambda: state(queue, "ticket-4") == "blocked", "the job to wait for its signal")
    finally:
        first.kill()
    assert queue.signal("approve:4", {"by": "sam"}) == 1     # no worker alive: the store wakes it
    assert state(queue, "ticket-4") == "waiting"
    second = workers(helper, queue, log)
    try:
        wait_for(lambda: state(queue, "ticket-4") == "done", "a new worker to finish the job")
    finally:
        second.stop()
    assert queue.get("ticket-4")["result"] == {"draft": "a draft", "approval": {"by": "sam"}}
    assert len(events("model")) == 1 and len(events("sent")) == 1
    assert {e[3] for e in events("start")} == {str(first.proc.pid), str(second.proc.pid)}


@pytest.mark.parametrize("helper", HELPERS)
def test_a_waiting_job_leaves_its_workers_place_free(wf, helper):
    queue, log, events = wf
    queue.add({"kind": "approval", "signal": "approve:5"}, id="ticket-5")
    worker = workers(helper, queue, log)          # concurrency 1
    try:
        wait_for(lambda: state(queue, "ticket-5") == "blocked", "the job to wait")
        for n in range(3):
            queue.add({"kind": "plain"}, id="other-%d" % n)
        wait_for(lambda: all(state(queue, "other-%d" % n) == "done" for n in range(3)), "the others to run")
        assert state(queue, "ticket-5") == "blocked"
        queue.signal("approve:5", "ok")
        wait_for(lambda: state(queue, "ticket-5") == "done", "the job to finish")
    finally:
        worker.stop()
    assert len(events("sent")) == 1


# -- sleep ------------------------------------------------------------------------------------

@pytest.mark.parametrize("helper", HELPERS)
def test_sleep_snoozes_then_returns_once_its_time_has_passed(wf, helper):
    queue, log, events = wf
    queue.add({"kind": "sleeper", "ms": 300}, id="nap")
    worker = workers(helper, queue, log)
    try:
        wait_for(lambda: state(queue, "nap") == "done", "the sleeper to wake")
    finally:
        worker.stop()
    job = queue.get("nap")
    assert job["result"] == "woke" and len(events("woke")) == 1
    until = json.loads(one(queue.conn, "SELECT tq_step_get('nap', 'sleep:nap')"))
    started = [e for e in queue.watch() if e["id"] == "nap" and e["state"] == "running"]
    assert len(started) >= 2 and started[-1]["at"] >= until      # it ran again only once awake
    assert job["tries"] <= 1                                     # a snooze uses up no try


# -- the decisions, without a worker -------------------------------------------------------

def test_durations_are_read_as_the_extension_reads_them():
    assert [_waits.duration_ms(d) for d in (250, "500ms", "30s", "10m", "1.5h", "7d")] == \
        [250, 500, 30_000, 600_000, 5_400_000, 604_800_000]
    for bad in ("10 weeks", "", -1, True, None):
        with pytest.raises(ValueError, match="not a duration"):
            _waits.duration_ms(bad, "sleep")


def test_wait_for_fails_the_job_on_a_failed_or_gone_dependency():
    done = json.dumps({"state": "done", "result": 1})
    failed = json.dumps({"state": "failed", "error": "boom"})
    with pytest.raises(tinyq.Outcome) as fail:
        _waits.after_results(["a", "b"], [("a", done, 1), ("b", failed, 0)])
    assert (fail.value.outcome, fail.value.value) == ("fail", "dependency 'b' failed: boom")
    with pytest.raises(tinyq.Outcome) as gone:
        _waits.after_results(["a", "b"], [("a", done, 1), ("b", None, 0)])
    assert gone.value.value == "dependency 'b' is gone: cancelled, or never added"
    assert _waits.after_results(["a", "a"], [("a", done, 1), ("a", done, 1)]) == [1, 1]
    assert _waits.after_results([], []) == []


def test_DEP_01_wait_for_links_the_jobs_done_before_it_waits_once():
    """A wait_for whose jobs are all done returns at once only once they are linked to the
    waiting job (tq_deps); before, it waits for those not linked yet (done ones included)."""
    done = json.dumps({"state": "done", "result": 1})
    running = json.dumps({"state": "running"})
    with pytest.raises(tinyq.Outcome) as first:
        _waits.after_results(["a", "b", "a"], [("a", done, 0), ("b", done, 1), ("a", done, 0)])
    assert (first.value.outcome, json.loads(first.value.value)) == ("wait", {"after": ["a"]})
    with pytest.raises(tinyq.Outcome) as mixed:     # a done one waits with the unfinished
        _waits.after_results(["a", "b"], [("a", done, 0), ("b", running, 0)])
    assert json.loads(mixed.value.value) == {"after": ["a", "b"]}
    assert _waits.after_results(["a", "b"], [("a", done, 1), ("b", done, 1)]) == [1, 1]


# -- the fan-out / fan-in of docs/workflows.md, as printed there ------------------------------

def test_the_fan_in_of_the_docs_prints_what_the_docs_say(tmp_path):
    with open(os.path.join(ROOT, "docs", "workflows.md"), encoding="utf-8") as f:
        page = f.read()
    section = page.split("## Fan-out, fan-in", 1)[1]
    program = section.split("```python\n", 1)[1].split("```", 1)[0]
    printed = section.split("It prints:\n\n```\n", 1)[1].split("```", 1)[0]
    run = subprocess.run([PY, "-c", program], cwd=str(tmp_path), capture_output=True, text=True, timeout=GIVE_UP_S,
                         env=dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python")))
    assert run.returncode == 0, run.stderr
    assert run.stdout == printed
