"""The helper scenarios (tests/helper_scenarios.json), each run against the three worker
helpers — Python threads, asyncio and Node — in real processes, so that a behaviour is
specified once and the helpers answer alike (after river's driver tests)."""
import collections
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from helpers import EXT, ROOT, connect, one

PY = "/usr/bin/python3"
SUPPORT = os.path.join(ROOT, "tests", "support")
with open(os.path.join(ROOT, "tests", "helper_scenarios.json")) as f:
    SCENARIOS = json.load(f)["scenarios"]
HELPERS = ("threads", "asyncio", "node")
FINAL = ("done", "failed")
GIVE_UP_S = 180          # only a failing run waits this long


def start_worker(helper, db_path, log, index):
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python"))
    if helper == "node":
        argv = ["node", os.path.join(SUPPORT, "scenario_worker.js"), db_path, log, str(index)]
    else:
        argv = [PY, os.path.join(SUPPORT, "scenario_worker.py"), helper, db_path, log, str(index)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "working", proc.stderr.read()
    return proc


def queues(spec):
    """The scenario's queues: its `queues`, else the one queue q."""
    return list(spec.get("queues", {"q": {}}))


def total_jobs(spec):
    return spec["jobs"] * len(queues(spec))


def counts(conn, spec):
    return dict(conn.execute("SELECT state, count(*) FROM tq_jobs WHERE queue IN (SELECT value FROM json_each(?)) "
                             "GROUP BY state", (json.dumps(queues(spec)),)))


def most_at_once(conn, log):
    """Queue -> the most of its handlers that ran at once, from the order of the log's
    start and end lines."""
    queue_of = dict(conn.execute("SELECT id, queue FROM tq_jobs"))
    running, most = collections.Counter(), collections.Counter()
    with open(log) as f:
        for line in f:
            job, _, _, event = line.split()
            running[queue_of[job]] += {"start": 1, "end": -1}.get(event, 0)
            most[queue_of[job]] = max(most[queue_of[job]], running[queue_of[job]])
    return dict(most)


def events(log, event):
    """The [id, attempt, pid] of each `event` line of LOG ("id attempt pid event")."""
    try:
        with open(log) as f:
            return [line.split()[:3] for line in f if line.split()[3] == event]
    except FileNotFoundError:
        return []


def wait_until(condition, what):
    deadline = time.monotonic() + GIVE_UP_S
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting for " + what
        time.sleep(0.05)


def returned_line(proc):
    """The worker's next line of output (work() returned or raised), "" when none came."""
    line = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(GIVE_UP_S)
    return line[0] if line else ""


def until_final(spec, conn, workers, log):
    """Wait until every job is done or failed, then SIGTERM: work() returns. The output."""
    deadline = time.monotonic() + GIVE_UP_S
    while sum(counts(conn, spec).get(s, 0) for s in FINAL) < total_jobs(spec) and time.monotonic() < deadline:
        if any(w.poll() is not None for w in workers):
            break
        time.sleep(0.05)
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    return [w.communicate(timeout=120) for w in workers]


def stop_scenario(spec, conn, workers, log):
    """SIGTERM once the scenario's event was logged for every job: the worker calls stop()
    with the scenario's timeout, and work() must return though the handlers still run;
    then, once every handler that ends has ended, the worker is killed. Returns the output."""
    jobs = spec["jobs"]
    wait_until(lambda: len(events(log, spec["stop"]["when"])) >= jobs, spec["stop"]["when"])
    for w in workers:
        w.send_signal(signal.SIGTERM)
    outs = [(returned_line(w), "") for w in workers]
    assert all("returned" in out for out, _ in outs), outs   # before the kill: it returned by itself
    if spec["handler"].get("sleep_ms"):
        wait_until(lambda: len(events(log, "end")) >= jobs, "the abandoned handlers' return")
    for w in workers:
        w.kill()
        w.communicate()
    return outs


def check_abandoned(conn, jobs):
    """No job was settled by its abandoned handler, and each runs again (attempt 2) once
    its lease has run out."""
    for (job,) in conn.execute("SELECT tq_get(id) FROM tq_jobs WHERE queue = 'q'"):
        job = json.loads(job)
        assert job["state"] != "done" and job.get("result") is None, job
    claimed = []
    wait_until(lambda: claimed.extend(conn.execute("SELECT id, attempt FROM tq_claim('q', 'check', 10)"))
               or len(claimed) >= jobs, "the abandoned jobs to be claimable again")
    assert [attempt for _, attempt in claimed] == [2] * jobs, claimed


def add_jobs(conn, spec):
    """The scenario's jobs, {"n": 0}, {"n": 1}... on each queue, in one transaction; with
    after_previous, each after the one before it. IMMEDIATE: a worker may be creating the
    store meanwhile, and a deferred transaction's write would meet its lock at once."""
    conn.execute("BEGIN IMMEDIATE")
    previous = {}
    for n in range(spec["jobs"]):
        for queue in queues(spec):
            options = {"after": [previous[queue]]} if spec.get("after_previous") and queue in previous else {}
            previous[queue] = one(conn, "SELECT tq_add(?, ?, ?)", queue, json.dumps({"n": n}), json.dumps(options))
    conn.execute("COMMIT")


@pytest.mark.parametrize("helper", HELPERS)
@pytest.mark.parametrize("index", range(len(SCENARIOS)), ids=[s["name"] for s in SCENARIOS])
def test_helper_scenario(tmp_path, helper, index):
    spec = SCENARIOS[index]
    db_path, log = str(tmp_path / "store.db"), str(tmp_path / "ran.log")
    conn = connect(db_path)
    if spec.get("settings"):
        one(conn, "SELECT tq_queue('q', ?)", json.dumps(spec["settings"]))
    workers = []
    try:
        if not spec.get("drain"):     # drain() returns at once on an empty queue: jobs first
            workers = [start_worker(helper, db_path, log, index) for _ in range(spec.get("workers", 1))]
        add_jobs(conn, spec)
        if spec.get("drain"):
            workers = [start_worker(helper, db_path, log, index)]
            outs = [w.communicate(timeout=GIVE_UP_S) for w in workers]
        else:
            outs = (stop_scenario if spec.get("stop") else until_final)(spec, conn, workers, log)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    expect = spec["expect"]
    if spec.get("drain"):
        assert [out.split()[0] for out, _ in outs] == ["drained"], outs
        assert [json.loads(out.split(None, 1)[1]) for out, _ in outs] == [expect["drained"]], outs
    else:
        for out, err in outs:
            assert "returned" in out, (out, err)
    if "returned" in expect:
        assert sum(int(out.split()[1]) for out, _ in outs) == expect["returned"], outs
    if expect.get("abandoned"):
        check_abandoned(conn, spec["jobs"])
    got = counts(conn, spec)
    for state in FINAL:
        assert got.get(state, 0) == expect.get(state, 0), got
    if expect.get("each_ran_once"):
        with open(log) as f:
            starts = collections.Counter(line.split()[0] for line in f if line.split()[3] == "start")
        assert len(starts) == total_jobs(spec) and set(starts.values()) == {1}, starts.most_common(3)
    for event, n in expect.get("events", {}).items():   # each job logged `event` n times
        logged = collections.Counter(job for job, _, _ in events(log, event))
        assert len(logged) == total_jobs(spec) and set(logged.values()) == {n}, (event, logged)
    if expect.get("most_at_once"):
        most = most_at_once(conn, log)
        assert set(most) == set(expect["most_at_once"]), most    # every queue's jobs ran
        for queue, limit in expect["most_at_once"].items():
            assert most[queue] <= limit, most
    if expect.get("result_has"):
        for (result,) in conn.execute("SELECT tq_get(id) ->> 'result' FROM tq_jobs WHERE queue = 'q'"):
            assert expect["result_has"] in str(result), result
    if expect.get("error_has"):
        for (error,) in conn.execute("SELECT tq_get(id) ->> 'error' FROM tq_jobs WHERE queue = 'q'"):
            assert expect["error_has"] in str(error), error
    conn.close()
