#!/usr/bin/python3
"""The Python processes of the soak (tests/support/soak.py), through the Python helper (tinyq.Queue).

    soak_worker.py worker   DB LOG SEED    Queue.work(handler, concurrency=2) until SIGTERM
    soak_worker.py producer DB LOG SEED    adds jobs (and cancels some) until the stop file

A job's payload says what its handler does: "ok"; "slow" (2.5 s, past its lease, with
progress); "retry", "snooze", "error", "fail" on
its first attempt (then ok); "steps": two steps (each step's work logged as an *effect*,
with its attempt) and progress in between. Every line of LOG is JSON, written with one
os.write (survives a SIGKILL right after).
"""
import json
import os
import random
import signal
import sys
import time

# A SIGTERM before work() has put in its own handler (the first log line is written after
# this): nothing is in flight yet, so leave with 0, as work() would.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import tinyq  # noqa: E402

KINDS = (os.environ.get("TINYQ_SOAK_KINDS") or "ok,ok,ok,ok,ok,steps,steps,steps,retry,snooze,error,fail").split(",")
QUEUE = os.environ.get("TINYQ_SOAK_QUEUE") or "soak"
P_CANCEL = float(os.environ.get("TINYQ_SOAK_CANCELS") or 0.03)     # per producer round
PATIENT_BUSY_S = 60


class Log:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, **rec):
        rec["pid"] = os.getpid()
        os.write(self.fd, (json.dumps(rec) + "\n").encode())


def worker(db, log, rnd):
    q = tinyq.Queue(db, QUEUE)

    def effect(run, step):
        log(ev="effect", id=run.id, step=step, attempt=run.attempt)
        return "%d:%d" % (run.attempt, os.getpid())

    def handler(payload, run):
        # each run's start and end on the monotonic clock (which a wall-clock jump leaves alone)
        log(ev="run", id=run.id, attempt=run.attempt, t=time.monotonic())
        try:
            return handle(payload, run)
        finally:
            log(ev="ran", id=run.id, attempt=run.attempt, t=time.monotonic())

    def handle(payload, run):
        kind = payload["k"]
        time.sleep(rnd.uniform(0.005, 0.04))
        if kind == "slow":                  # longer than the lease: renewed while it runs
            for pct in range(0, 100, 20):
                if run.cancelled:               # cancelled, timed out or taken: stop
                    return None
                run.progress({"pct": pct})
                time.sleep(0.5)
            return {"slow": True}
        if kind == "steps":
            a = run.step("a", lambda: effect(run, "a"))
            run.progress({"pct": 50})
            time.sleep(rnd.uniform(0.005, 0.03))
            b = run.step("b", lambda: effect(run, "b"))
            return {"a": a, "b": b}
        if run.attempt == 1:
            if kind == "retry":
                run.retry("50ms")
            if kind == "snooze":
                run.snooze("50ms")
            if kind == "error":
                raise RuntimeError("first attempt fails")
            if kind == "fail":
                run.fail("failed for good (the soak retries it)")
        return {"by": os.getpid()}

    log(ev="start", role="worker")
    q.work(handler, concurrency=2, poll=0.2)
    log(ev="stopped")


def producer(db, log, rnd, stop):
    # A minute's busy timeout: on a starved machine a writer can hold the lock past 5 s, and
    # the soak's producers are to wait for it, not fail.
    q = tinyq.Queue(tinyq.open(db, busy_timeout=PATIENT_BUSY_S), QUEUE)
    n, recent = 0, []
    while not os.path.exists(stop):
        # The jobs due now, by this producer's clock: after the clock steps back (the clock
        # jumps test), jobs dated in the hour ahead are not due, and a cap counting them
        # would stop every producer while no job can start.
        backlog = q.conn.execute("SELECT count(*) FROM tinyq_jobs WHERE queue = ? AND status = 'queued'"
                                 " AND run_at <= tq_now()", (QUEUE,)).fetchone()[0]
        if backlog < 150:
            n += 1
            kind = rnd.choice(KINDS)
            group = "g%d" % rnd.randrange(5)
            opts = {"group": group}
            if rnd.random() < 0.5:
                opts["id"] = "py-%d-%d" % (os.getpid(), n)
            if rnd.random() < 0.1:
                opts["delay"] = "%dms" % rnd.randrange(50, 2000)
            if rnd.random() < 0.2:
                opts["priority"] = rnd.randint(-1, 2)
            jid = q.add({"k": kind, "n": n}, **opts)
            log(ev="add", id=jid, kind=kind, group=group)
            recent = (recent + [jid])[-20:]
        if recent and rnd.random() < P_CANCEL:
            jid = rnd.choice(recent)
            log(ev="cancel", id=jid, r=int(q.cancel(jid)))
        time.sleep(rnd.uniform(0.01, 0.05))
    log(ev="stopped")


if __name__ == "__main__":
    role, db, log_path, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rnd = random.Random(seed)
    if role == "worker":
        worker(db, Log(log_path), rnd)
    else:
        producer(db, Log(log_path), rnd, sys.argv[5])
