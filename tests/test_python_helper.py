"""The Python worker helper (python/tinyq): Queue methods, the work() loop, and what it
promises across threads and real processes (SIGKILL, SIGTERM, lease renewal, cancel)."""
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from helpers import EXT, ROOT, SIGNAL_TAKEN, claim, connect, get, one, open_handles, read_until

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402

PY = "/usr/bin/python3"


# -- helpers ---------------------------------------------------------------------------

def wait_for(predicate, timeout=60.0, every=0.02):
    """predicate()'s first true value, asked until a deadline generous enough for a loaded
    machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting for %s" % predicate)


def start_work(queue, handler, **kw):
    """queue.work(handler) in a background thread; returns (thread, box) where box['handled']
    is work()'s return value once it returned."""
    box = {}

    def target():
        box["handled"] = queue.work(handler, poll=kw.pop("poll", 0.2), **kw)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def stop(queue, thread, timeout=60):
    queue.stop()
    thread.join(timeout)
    assert not thread.is_alive(), "work() did not return after stop()"


def worker_process(db_path, body):
    """A real worker process: `q` is tinyq.Queue(db_path, 'q'); `body` is the rest."""
    code = "import json, os, sys, time, tinyq\nq = tinyq.Queue(sys.argv[1], 'q')\n" + \
        textwrap.dedent(body)
    env = dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "python"))
    return subprocess.Popen([PY, "-c", code, db_path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def finish(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.fixture
def queue(db_path):
    q = tinyq.Queue(db_path, "q")
    yield q
    q.close()


# -- loading and opening ---------------------------------------------------------------

def test_open_configures_the_connection(db_path):
    conn = tinyq.open(db_path)
    assert conn.isolation_level is None
    assert one(conn, "PRAGMA journal_mode") == "wal"
    assert one(conn, "PRAGMA synchronous") == 2          # FULL
    assert one(conn, "PRAGMA busy_timeout") == 5000
    assert one(conn, "SELECT tq_version()")
    conn.close()


def test_load_into_any_connection_and_env_override(db_path, monkeypatch):
    conn = sqlite3.connect(db_path)
    assert tinyq.load(conn) is conn
    assert one(conn, "SELECT tq_version()")
    monkeypatch.setenv("TINYQ_EXT", EXT)
    assert tinyq.extension_path() == EXT
    monkeypatch.setenv("TINYQ_EXT", "/nowhere/tinyq")
    with pytest.raises(sqlite3.OperationalError):
        tinyq.load(sqlite3.connect(":memory:"))
    monkeypatch.delenv("TINYQ_EXT")
    assert os.path.samefile(tinyq.extension_path(), EXT + ".so")


# -- queue methods ---------------------------------------------------------------------

def test_add_encodes_payload_and_passes_options(queue):
    assert queue.add({"messageId": 41}, id="reply:41", priority=5, group="acme",
                     attempts=3, delay="1h") == "reply:41"
    job = queue.get("reply:41")
    assert job["payload"] == {"messageId": 41}
    assert (job["queue"], job["state"], job["group"], job["priority"]) == \
        ("q", "scheduled", "acme", 5)
    assert queue.add({"other": 1}, id="reply:41") == "reply:41"          # dedupe
    assert queue.get("reply:41")["payload"] == {"messageId": 41}
    generated = queue.add([1, 2, 3])
    assert generated.startswith("tq_") and queue.get(generated)["payload"] == [1, 2, 3]
    assert queue.get(queue.add("plain text"))["payload"] == "plain text"
    assert queue.get("nope") is None


def test_add_joins_the_callers_transaction(db_path):
    conn = sqlite3.connect(db_path)           # the module's default: implicit transactions
    tinyq.load(conn)
    q = tinyq.Queue(conn, "q")
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.execute("INSERT INTO orders VALUES (1)")
    q.add({"order": 1}, id="order:1")
    assert conn.in_transaction                 # add neither committed nor began anything
    conn.rollback()
    assert q.get("order:1") is None and one(conn, "SELECT count(*) FROM orders") == 0
    conn.execute("INSERT INTO orders VALUES (2)")
    q.add({"order": 2}, id="order:2")
    conn.commit()
    other = connect(db_path)
    assert get(other, "order:2")["state"] == "waiting"
    conn.close()
    other.close()


def test_cancel_retry_watch_and_settings(queue, db):
    assert queue.settings()["lease"] == 30000
    assert queue.settings(lease="2s", attempts=1)["lease"] == 2000
    queue.add({}, id="a")
    queue.add({}, id="b")
    assert queue.cancel("a") is True and queue.cancel("a") is False
    [job] = claim(db, "q")
    assert one(db, "SELECT tq_settle(?, ?, 'error', 'boom')", job["id"], job["attempt"]) == 1
    assert queue.get("b")["state"] == "failed"
    assert queue.retry("b") is True and queue.get("b")["state"] == "waiting"
    events = queue.watch()
    assert [(e["id"], e["state"]) for e in events if e["id"] == "a"] == \
        [("a", "waiting"), ("a", "cancelled")]
    assert [e["state"] for e in events if e["id"] == "b"] == \
        ["waiting", "running", "failed", "waiting"]
    assert set(events[0]) == {"seq", "id", "queue", "state", "attempt", "at", "detail"}
    assert queue.watch(events[-1]["seq"]) == []


# -- the work loop, in threads ---------------------------------------------------------

def test_return_value_settles_done(queue):
    queue.add({"n": 1}, id="dict")
    queue.add({"n": 2}, id="text")
    queue.add({"n": 3}, id="none")
    results = {1: {"ok": 1}, 2: "plain", 3: None}
    thread, box = start_work(queue, lambda payload, run: results[payload["n"]])
    wait_for(lambda: all(queue.get(i)["state"] == "done" for i in ("dict", "text", "none")))
    stop(queue, thread)
    assert box["handled"] == 3
    assert queue.get("dict")["result"] == {"ok": 1}
    assert queue.get("text")["result"] == "plain"
    assert queue.get("none")["result"] is None


def test_raised_exception_is_an_error_with_its_class_name(queue):
    queue.add({}, id="once", attempts=1)
    queue.add({}, id="twice", attempts=2)

    def handler(payload, run):
        raise ValueError("boom on attempt %d" % run.attempt)

    thread, _ = start_work(queue, handler)
    wait_for(lambda: queue.get("once")["state"] == "failed")
    wait_for(lambda: queue.get("twice")["state"] == "failed")     # after a ~1 s backoff
    stop(queue, thread)
    assert queue.get("once")["error"] == "ValueError: boom on attempt 1"
    assert queue.get("twice")["error"] == "ValueError: boom on attempt 2"
    details = [e["detail"] or "" for e in queue.watch() if e["id"] == "twice"]
    assert any("ValueError: boom on attempt 1" in d for d in details)


def test_retry_snooze_and_fail(queue):
    queue.add("retry", id="retry", attempts=2)
    queue.add("retry", id="retry-last", attempts=1)
    queue.add("snooze", id="snooze", attempts=1)
    queue.add("fail", id="fail")
    queue.add("bad", id="bad", attempts=1)

    def handler(payload, run):
        try:
            if payload == "retry":
                run.retry("1h")
            elif payload == "snooze":
                run.snooze("1h")
            elif payload == "bad":
                run.snooze("5 minutes")         # refused by tq_settle: recorded as an error
            run.fail("no such customer")
        except Exception:                       # the controls are not swallowed by this
            raise AssertionError("unreachable")

    before = int(time.time() * 1000)
    thread, _ = start_work(queue, handler)
    wait_for(lambda: all(queue.get(i)["state"] != "running" and queue.get(i)["attempt"] == 1
                         for i in ("retry", "retry-last", "snooze", "fail", "bad")))
    stop(queue, thread)
    retry, snooze = queue.get("retry"), queue.get("snooze")
    assert retry["state"] == "scheduled" and retry["run_at"] >= before + 3_500_000
    assert queue.get("retry-last")["state"] == "failed"       # retry counts: no budget left
    assert snooze["state"] == "scheduled" and snooze["run_at"] >= before + 3_500_000
    fail = queue.get("fail")
    assert fail["state"] == "failed" and fail["error"] == "no such customer"
    bad = queue.get("bad")
    assert bad["state"] == "failed" and "tq_settle" in bad["error"] and "5 minutes" in bad["error"]


def test_progress_shows_in_get(queue):
    queue.add({}, id="p")
    release = threading.Event()

    def handler(payload, run):
        assert run.progress({"pct": 50}) is True
        release.wait(600)                       # until the test has looked
        return "ok"

    thread, _ = start_work(queue, handler)
    wait_for(lambda: queue.get("p")["progress"] == {"pct": 50})
    assert queue.get("p")["state"] == "running"
    assert any(e["state"] == "progress" for e in queue.watch())
    release.set()
    wait_for(lambda: queue.get("p")["state"] == "done")
    stop(queue, thread)


def test_stop_waits_for_work_in_flight(queue):
    queue.add({}, id="first", priority=1)
    queue.add({}, id="second")
    started, release, finished = threading.Event(), threading.Event(), []

    def handler(payload, run):
        started.set()
        release.wait(600)                       # in flight until stop() was asked
        finished.append(time.monotonic())
        return "finished"

    thread, box = start_work(queue, handler, concurrency=1)
    assert started.wait(60)
    queue.stop()
    release.set()
    thread.join(60)
    returned = time.monotonic()
    assert not thread.is_alive() and finished and finished[0] <= returned
    assert box["handled"] == 1
    assert queue.get("first")["state"] == "done"              # settled before work() returned
    assert queue.get("second")["state"] == "waiting"          # nothing more was claimed
    assert queue.get("second")["attempt"] == 0


@pytest.mark.parametrize("stop_after", [0.0, 0.05])
def test_once_work_returned_nothing_of_the_worker_holds_the_file(db_path, stop_after):
    # stop() at once (the tq_wait thread may not have started) and once it sleeps in tq_wait
    q = tinyq.Queue(db_path, "q")
    q.add({})
    # An idle poll of an hour: stop() does not wait it out (else stop()'s join fails).
    thread, _box = start_work(q, lambda payload, run: None, poll=3600.0)
    time.sleep(stop_after)
    stop(q, thread)
    q.close()
    assert open_handles(db_path) == []


def test_handlers_run_in_parallel_threads_with_their_own_connections(queue):
    ids = [queue.add({"i": i}) for i in range(3)]
    seen, together = [], threading.Barrier(3, timeout=60)

    def handler(payload, run):
        seen.append((threading.get_ident(), id(run.conn)))
        together.wait()                         # passes only with all three running at once

    thread, _ = start_work(queue, handler, concurrency=3)
    wait_for(lambda: all(queue.get(i)["state"] == "done" for i in ids))
    stop(queue, thread)
    assert len({t for t, _ in seen}) == 3 and len({c for _, c in seen}) == 3


def test_idle_worker_wakes_through_tq_wait(queue):
    called = threading.Event()

    def handler(payload, run):
        called.set()
        queue.stop()            # from a handler: work() returns once this job is settled

    # A poll of an hour: without tq_wait's wake-up the job would wait that long.
    thread, _ = start_work(queue, handler, poll=3600.0)
    time.sleep(0.5)                              # the loop is asleep in tq_wait by now, most likely
    queue.add({}, id="wake")
    assert called.wait(60), "the add did not wake tq_wait"
    thread.join(60)
    assert not thread.is_alive()
    assert queue.get("wake")["state"] == "done"


def test_cancellation_sets_run_cancelled_and_skips_the_settle(queue):
    queue.settings(lease="1s")
    queue.add({}, id="c")
    started, seen = threading.Event(), []

    def handler(payload, run):
        started.set()
        deadline = time.monotonic() + 60
        while not run.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(run.cancelled)
        return "must not be recorded"

    thread, _ = start_work(queue, handler)
    assert started.wait(60)
    assert queue.cancel("c") is True
    wait_for(lambda: seen)
    stop(queue, thread)
    assert seen == [True]
    assert queue.get("c") is None
    states = [e["state"] for e in queue.watch() if e["id"] == "c"]
    assert states[-1] == "cancelled" and "done" not in states


def test_timed_out_attempt_is_cancelled_and_not_settled(queue):
    queue.settings(lease="1s", timeout="1s", attempts=1)
    queue.add({}, id="slow")
    seen = []

    def handler(payload, run):
        deadline = time.monotonic() + 60
        while not run.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(run.cancelled)
        return "too late"

    thread, _ = start_work(queue, handler)
    wait_for(lambda: seen)
    wait_for(lambda: queue.get("slow")["state"] == "failed")   # the next claim ends it
    stop(queue, thread)
    assert seen == [True]
    job = queue.get("slow")
    assert job["result"] is None and "timeout" in job["error"]


def test_JOB_06_a_first_attempt_keeps_its_steps_without_reading_them_first(queue):
    """On a job's first attempt nothing is kept but by the attempt itself, so run.step
    keeps fn()'s answer without asking the store first, and a name it kept again answers
    from what it kept (fn not called). The next attempt reads the kept answer."""
    queue.add({}, id="a")
    seen = {}

    def handler(payload, run):
        statements = seen.setdefault(run.attempt, [])
        run.conn.set_trace_callback(statements.append)
        try:
            first = run.step("answer", lambda: "from attempt %d" % run.attempt)
            again = run.step("answer", lambda: "called again")
        finally:
            run.conn.set_trace_callback(None)
        seen[run.attempt, "answers"] = (first, again)
        if run.attempt == 1:
            run.snooze(0)
        return first

    thread, _ = start_work(queue, handler)
    wait_for(lambda: queue.get("a")["state"] == "done")
    stop(queue, thread)
    reads = {attempt: sum("tq_step_get" in sql for sql in seen[attempt]) for attempt in (1, 2)}
    puts = {attempt: sum("tq_step_put" in sql for sql in seen[attempt]) for attempt in (1, 2)}
    assert reads == {1: 0, 2: 1} and puts == {1: 1, 2: 0}, seen
    assert seen[1, "answers"] == seen[2, "answers"] == ("from attempt 1", "from attempt 1")
    assert queue.get("a")["result"] == "from attempt 1"


def test_works_with_apsw_connections(db_path):
    apsw = pytest.importorskip("apsw")
    conn = apsw.Connection(db_path)
    conn.setbusytimeout(5000)
    tinyq.load(conn)
    q = tinyq.Queue(conn, "q")
    q.add({"n": 20}, id="a")

    def handler(payload, run):
        assert type(run.conn).__module__ == "apsw"
        return {"twice": run.step("double", lambda: payload["n"] * 2)}

    thread, _ = start_work(q, handler)
    wait_for(lambda: q.get("a")["state"] == "done")
    stop(q, thread)
    assert q.get("a")["result"] == {"twice": 40}
    conn.close()


# -- real processes --------------------------------------------------------------------

def test_step_survives_a_sigkilled_worker(db_path, queue):
    queue.settings(lease="1s")
    queue.add({"messageId": 41}, id="reply:41")
    first = worker_process(db_path, """
        def handler(payload, run):
            run.step("answer", lambda: "answer of pid %d" % os.getpid())
            time.sleep(60)                      # killed in here
        q.work(handler)
    """)
    try:
        wait_for(lambda: q_step(db_path))
    finally:
        first.kill()
        finish(first)
    assert first.returncode == -signal.SIGKILL
    second = worker_process(db_path, """
        def handler(payload, run):
            called = []
            answer = run.step("answer", lambda: called.append(1) or "a new answer")
            q.stop()
            return {"answer": answer, "attempt": run.attempt, "called": bool(called)}
        q.work(handler, poll=0.2)
    """)
    rc, out, err = finish(second)
    assert rc == 0, err
    job = queue.get("reply:41")
    assert job["state"] == "done" and job["attempt"] == 2
    assert job["result"] == {"answer": "answer of pid %d" % first.pid, "attempt": 2,
                             "called": False}


def q_step(db_path):
    conn = connect(db_path)
    try:
        return one(conn, "SELECT tq_step_get('reply:41', 'answer')")
    finally:
        conn.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_finishes_the_job_in_flight_then_exits(db_path, queue, sig):
    queue.add({}, id="first", priority=1)
    queue.add({}, id="second")
    proc = worker_process(db_path, """
        import logging
        logging.basicConfig(level=logging.INFO)     # tinyq says on stderr when a signal came
        def handler(payload, run):
            run.progress("started")
            while not os.path.exists(sys.argv[1] + ".signalled"):   # in flight until then
                time.sleep(0.01)
            return "finished"
        print("handled", q.work(handler), flush=True)
    """)
    try:
        wait_for(lambda: queue.get("first")["progress"] == "started")
        proc.send_signal(sig)
        read_until(proc.stderr, SIGNAL_TAKEN)   # or the handler may end before the signal is in
        open(db_path + ".signalled", "w").close()
        rc, out, err = finish(proc)
    finally:
        proc.kill()
    assert rc == 0, err
    assert "handled 1" in out
    first = queue.get("first")
    assert first["state"] == "done" and first["result"] == "finished"
    second = queue.get("second")
    assert second["state"] == "waiting" and second["attempt"] == 0


def test_renewals_keep_a_long_handlers_lease(db_path, queue, db):
    # 5 s: renewed at half of it, so a loaded machine has 2.5 s to spare
    queue.settings(lease="5s")
    queue.add({}, id="long")
    proc = worker_process(db_path, """
        def handler(payload, run):
            run.progress("started")
            first_lease_ends = run.lease_until
            while time.time() * 1000 < first_lease_ends + 500:     # outlive the first lease
                time.sleep(0.05)
            q.stop()
            return "still mine"
        q.work(handler, poll=0.2)
    """)
    try:
        wait_for(lambda: queue.get("long")["progress"] == "started")
        stolen = []
        while proc.poll() is None:              # another worker keeps trying, all along
            stolen += claim(db, "q", worker="thief")
            time.sleep(0.1)
        rc, out, err = finish(proc)
    finally:
        proc.kill()
    assert rc == 0, err
    assert stolen == []
    job = queue.get("long")
    assert job["state"] == "done" and job["attempt"] == 1 and job["result"] == "still mine"
    assert [e["state"] for e in queue.watch()].count("running") == 1


# -- the thread pool (issue 14) ----------------------------------------------------------

def test_pool_threads_and_connections_live_as_long_as_work(queue):
    ids = [queue.add({"i": i}) for i in range(40)]
    seen = []

    def handler(payload, run):
        seen.append((threading.get_ident(), id(run.conn)))

    thread, box = start_work(queue, handler, concurrency=3)
    wait_for(lambda: all(queue.get(i)["state"] == "done" for i in ids))
    stop(queue, thread)
    assert box["handled"] == 40 and len(seen) == 40
    assert len({t for t, _ in seen}) <= 3 and len({c for _, c in seen}) <= 3


def test_heartbeat_renews_every_running_job_in_one_pass(queue):
    queue.settings(lease="3s")
    release = threading.Event()

    def handler(payload, run):
        release.wait(600)                        # running until the test has looked

    def leases():
        return [queue.get("j%d" % i)["lease_until"] for i in range(3)]

    thread, _ = start_work(queue, handler, concurrency=3)
    for i in range(3):                           # claimed 150 ms apart (or more)
        queue.add({}, id="j%d" % i)
        wait_for(lambda: queue.get("j%d" % i)["state"] == "running")
        time.sleep(0.15)
    claimed = leases()

    def renewed_together():
        """One pass gave the three one lease end (one by one, they would stay 150 ms apart
        and this wait would fail)."""
        now = leases()
        return max(now) - min(now) <= 5 and min(now) > max(claimed)
    wait_for(renewed_together)
    release.set()
    wait_for(lambda: all(queue.get("j%d" % i)["state"] == "done" for i in range(3)))
    stop(queue, thread)
    assert all(queue.get("j%d" % i)["attempt"] == 1 for i in range(3))


def test_errors_class_records_only_the_exception_class(queue):
    queue.add({}, id="secret", attempts=1)

    def handler(payload, run):
        raise PermissionError("provider said: key sk-123 is over quota")

    thread, _ = start_work(queue, handler, errors="class")
    wait_for(lambda: queue.get("secret")["state"] == "failed")
    stop(queue, thread)
    assert queue.get("secret")["error"] == "PermissionError"
    assert not any("sk-123" in (e["detail"] or "") for e in queue.watch())
    with pytest.raises(ValueError, match="errors"):
        queue.work(handler, errors="everything")


def test_prefetch_claims_ahead_and_puts_those_back_on_stop(queue):
    for i in range(5):
        queue.add({"i": i}, id="p%d" % i, priority=10 - i)
    started, release = threading.Event(), threading.Event()

    def handler(payload, run):
        started.set()
        if payload["i"] == 0:
            release.wait(600)                   # in flight until stop() was asked

    thread, box = start_work(queue, handler, prefetch=2)
    assert started.wait(60)
    running = [queue.get("p%d" % i)["state"] for i in range(5)]
    queue.stop()
    release.set()
    thread.join(60)
    assert not thread.is_alive()
    assert running == ["running", "running", "running", "waiting", "waiting"]
    states = [queue.get("p%d" % i)["state"] for i in range(5)]
    assert states == ["done", "waiting", "waiting", "waiting", "waiting"]
    assert queue.get("p1")["tries"] == 0          # put back by a snooze: not a try used up
    assert box["handled"] == 3


def test_meta_reaches_the_handler_and_the_log_filter(queue, caplog):
    queue.add({}, id="m", meta={"correlation_id": "req-7", "tenant": "acme"})
    queue.add({}, id="plain")
    seen = {}
    logger = logging.getLogger("test_meta")
    caplog.handler.addFilter(tinyq.JobContextFilter())

    def handler(payload, run):
        seen[run.id] = (run.meta, tinyq.current_run.get() is run)
        logger.warning("handling")

    with caplog.at_level(logging.WARNING, logger="test_meta"):
        thread, _ = start_work(queue, handler)
        wait_for(lambda: len(seen) == 2)
        stop(queue, thread)
    assert seen["m"] == ({"correlation_id": "req-7", "tenant": "acme"}, True)
    assert seen["plain"] == ({}, True)
    tagged = {(r.job_id, r.correlation_id) for r in caplog.records if r.name == "test_meta"}
    assert tagged == {("m", "req-7"), ("plain", None)}
    assert tinyq.current_run.get() is None


def test_public_api_has_type_hints_that_resolve():
    """py.typed promises type checkers hints on the public API: every public method of
    Queue, AsyncQueue and the runs names its return type, and the hints resolve."""
    import typing
    for cls in (tinyq.Queue, tinyq.AsyncQueue, tinyq.Run, tinyq.AsyncRun):
        for name in dir(cls):
            member = getattr(cls, name)
            if name.startswith("_") or not callable(member):
                continue
            assert "return" in typing.get_type_hints(member), "%s.%s" % (cls.__name__, name)
    for fn in (tinyq.open, tinyq.load, tinyq.extension_path):
        assert "return" in typing.get_type_hints(fn)
    assert typing.get_type_hints(tinyq.Queue.work)["return"] is int
    assert os.path.exists(os.path.join(ROOT, "python", "tinyq", "py.typed"))


def test_prefetch_auto_claims_ahead_only_after_fast_handlers(queue):
    for i in range(20):
        queue.add({"i": i}, id="a%02d" % i, priority=100 - i)
    blocked, release = threading.Event(), threading.Event()

    def handler(payload, run):
        if payload["i"] == 10:              # ten tiny jobs first, then one that blocks
            blocked.set()
            release.wait(600)               # until the test has looked

    thread, box = start_work(queue, handler)              # prefetch="auto", one thread
    assert blocked.wait(60)
    ahead = [i for i in range(11, 20) if queue.get("a%02d" % i)["state"] == "running"]
    # the jobs done before the blocked one are settled meanwhile (not held behind it)
    wait_for(lambda: all(queue.get("a%02d" % i)["state"] == "done" for i in range(10)))
    queue.stop()
    release.set()
    thread.join(60)
    assert not thread.is_alive()
    assert 1 <= len(ahead) <= 7, ahead                    # claimed ahead of the blocked one
    assert all(queue.get("a%02d" % i)["state"] == "done" for i in range(11))
    back = [queue.get("a%02d" % i) for i in range(11, 20)]
    assert all(j["state"] == "waiting" and j["tries"] == 0 for j in back)   # put back on stop
    with pytest.raises(ValueError, match="prefetch"):
        queue.work(handler, prefetch=-1)


def test_jobs_claimed_ahead_do_not_wait_behind_a_slow_one_while_another_thread_is_free(queue):
    ids = [queue.add({"i": i}, id="s%02d" % i, priority=100 - i) for i in range(30)]
    release = threading.Event()

    def handler(payload, run):
        if payload["i"] == 10:
            release.wait(600)                   # until the test has looked

    thread, _ = start_work(queue, handler, concurrency=2)
    try:
        wait_for(lambda: all(queue.get(i)["state"] == "done" for i in ids if i != "s10"))
        assert queue.get("s10")["state"] == "running"
    finally:
        release.set()
    wait_for(lambda: queue.get("s10")["state"] == "done")
    stop(queue, thread)


def test_a_write_lock_held_elsewhere_delays_the_pool_but_loses_nothing(queue, db_path):
    ids = [queue.add({"i": i}) for i in range(20)]
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")                 # another process's long write
    thread, box = start_work(queue, lambda payload, run: None, concurrency=4)
    time.sleep(1.0)
    assert all(queue.get(i)["state"] == "waiting" for i in ids)
    holder.execute("COMMIT")
    holder.close()
    wait_for(lambda: all(queue.get(i)["state"] == "done" for i in ids))
    stop(queue, thread)
    assert box["handled"] == 20
    assert all(queue.get(i)["attempt"] == 1 for i in ids)
