#!/usr/bin/python3
"""Real worker processes for tests/test_limits.py and tests/test_recovery.py.

    /usr/bin/python3 tests/support/proc_worker.py MODE DB_PATH 'JSON ARGS'

Each process opens its own connection (tinyq loaded, WAL, a busy timeout unless told
otherwise) exactly the way tests/helpers.py's `connect` does. Modes:

- hold      claim once, print the rows as one JSON line, then obey JSON commands read
            from stdin (run SQL, close/reopen the connection, exit). Used to keep a LIVE
            process holding leases, or to have one to SIGKILL.
- load      claim/handle/settle in a loop until a stop file appears; every claim and
            settlement is logged (one JSON line each, written unbuffered) with monotonic
            timestamps taken just before and just after the call.
- crash     like load, but the handler does two steps whose effects are written in the
            same transaction as tq_step_put, and the process SIGKILLs itself at random
            points (before a step, inside a step, after a step, before/after settling).
- waiter    rounds of: print "ready", tq_wait, claim + settle what came, print timings.
- idle      one tq_wait on a queue where nothing happens; prints wall and CPU time.
- due       tq_wait (looping, like a worker) until a claim returns a job; prints timings.

Log and stdout lines are JSON. Times are time.monotonic() (system-wide on Linux, so
comparable across processes) unless named otherwise.
"""
import json
import os
import random
import signal
import sqlite3
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
EXT = os.environ.get("TINYQ_EXT") or os.path.join(os.path.dirname(TESTS), "dist", "tinyq")


# The same connection and helpers as the tests (tests/helpers.py).
sys.path.insert(0, TESTS)
from helpers import claim, connect, one  # noqa: E402


def err_info(e):
    return {"type": type(e).__name__, "msg": str(e),
            "code": getattr(e, "sqlite_errorcode", None)}


def is_busy(e):
    code = getattr(e, "sqlite_errorcode", None)
    return isinstance(e, sqlite3.OperationalError) and (
        (code is not None and code & 0xFF == 5) or "database is locked" in str(e))


class Log:
    """Append-only JSON lines written with os.write: survives a SIGKILL right after."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, **rec):
        rec.setdefault("pid", os.getpid())
        os.write(self.fd, (json.dumps(rec) + "\n").encode())


def out(**rec):
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- hold

def mode_hold(db, a):
    conn = connect(db, a.get("busy_ms", 5000))
    rows = claim(conn, a["queue"], a.get("worker", f"hold-{os.getpid()}"), a.get("n", 1),
                 a.get("options"))
    if a.get("close_after_claim"):
        conn.close()
        conn = None
    out(pid=os.getpid(), rows=rows)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "exit":
            break
        if op == "close":
            if conn is not None:
                conn.close()
                conn = None
            out(ok=True)
            continue
        if op == "open":
            if conn is None:
                conn = connect(db, a.get("busy_ms", 5000))
            out(ok=True)
            continue
        try:
            if conn is None:
                conn = connect(db, a.get("busy_ms", 5000))
            cur = conn.execute(cmd["sql"], cmd.get("args", []))
            out(rows=[list(r) for r in cur.fetchall()])
        except Exception as e:  # reported to the test, which decides
            out(error=err_info(e))
    if conn is not None:
        conn.close()


# --------------------------------------------------------------------------- load

def mode_load(db, a):
    log = Log(a["log"])
    busy_ms = a.get("busy_ms", 5000)
    conn = connect(db, busy_ms)
    worker = f"{a.get('name', 'load')}-{os.getpid()}"
    lo, hi = a.get("handler_ms", [5, 30])
    nlo, nhi = a.get("n", [1, 3])
    deadline = time.monotonic() + a.get("max_s", 120)
    rnd = random.Random(a.get("seed", os.getpid()))
    adds_left = a.get("adds", 0)
    add_seq = 0

    def retry_busy(op, fn):
        # with busy_ms=0 a busy error is expected; it must change nothing, so retry
        while True:
            try:
                return fn()
            except sqlite3.Error as e:
                log(ev="err", op=op, busy=is_busy(e), **err_info(e))
                if not is_busy(e) or time.monotonic() > deadline:
                    raise
                time.sleep(rnd.uniform(0.0005, 0.003))

    log(ev="start", worker=worker)
    while not os.path.exists(a["stop"]) and time.monotonic() < deadline:
        if adds_left > 0 and rnd.random() < 0.3:
            add_seq += 1
            payload = f"extra:{os.getpid()}:{add_seq}"
            t0 = time.monotonic()
            jid = retry_busy("add", lambda: one(conn, "SELECT tq_add(?, ?)", a["queue"], payload))
            log(ev="add", id=jid, payload=payload, t0=t0, t1=time.monotonic())
            adds_left -= 1
        n = rnd.randint(nlo, nhi)
        t0 = time.monotonic()
        try:
            rows = claim(conn, a["queue"], worker, n)
        except sqlite3.Error as e:
            log(ev="err", op="claim", busy=is_busy(e), **err_info(e))
            if not is_busy(e):
                raise
            time.sleep(rnd.uniform(0.0005, 0.003))
            continue
        t1 = time.monotonic()
        log(ev="claim", n=n, t0=t0, t1=t1,
            jobs=[[r["id"], r["attempt"], r["group_key"], r["payload"]] for r in rows])
        if not rows:
            time.sleep(rnd.uniform(0.003, 0.012))
            continue
        for r in rows:
            time.sleep(rnd.uniform(lo, hi) / 1000)
            s0 = time.monotonic()
            res = retry_busy("settle", lambda: one(
                conn, "SELECT tq_settle(?, ?, 'done', ?)", r["id"], r["attempt"],
                json.dumps({"by": worker})))
            log(ev="settle", id=r["id"], attempt=r["attempt"], group=r["group_key"],
                r=res, t0=s0, t1=time.monotonic())
    log(ev="stop")
    conn.close()


# --------------------------------------------------------------------------- crash

def mode_crash(db, a):
    log = Log(a["log"])
    conn = connect(db, a.get("busy_ms", 10000))
    pid = os.getpid()
    worker = f"crash-{pid}"
    rnd = random.Random(a.get("seed", pid))
    p_kill = a.get("p_kill", 0.04)
    deadline = time.monotonic() + a.get("max_s", 150)

    def maybe_die(point, **info):
        if rnd.random() < p_kill and not os.path.exists(a["nokill"]):
            log(ev="suicide", point=point, **info)
            os.kill(pid, signal.SIGKILL)
            time.sleep(10)  # never reached

    def busy_retry(op, fn):
        # A busy error must change nothing (tests/test_limits.py checks that); a worker
        # retries it. Logged, so the test can report how often it happened.
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not is_busy(e) or time.monotonic() > deadline:
                    raise
                log(ev="busy", op=op, **err_info(e))
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                time.sleep(rnd.uniform(0.001, 0.005))

    log(ev="start", worker=worker)
    while not os.path.exists(a["stop"]) and time.monotonic() < deadline:
        rows = busy_retry("claim", lambda: claim(conn, a["queue"], worker, a.get("n", 2)))
        log(ev="claim", jobs=[[r["id"], r["attempt"]] for r in rows])
        if not rows:
            time.sleep(rnd.uniform(0.005, 0.02))
            continue
        for r in rows:
            jid, att = r["id"], r["attempt"]
            stale = False
            for step in ("a", "b"):
                maybe_die("before_step", id=jid, attempt=att, step=step)
                kept = busy_retry("step_get", lambda: one(
                    conn, "SELECT tq_step_get(?, ?)", jid, step))
                if kept is None:
                    value = f"{step}|{jid}|{att}|{pid}"

                    def effect_and_step():
                        conn.execute("BEGIN IMMEDIATE")
                        conn.execute(
                            "INSERT INTO effects(key, job, step, attempt, pid, value) "
                            "VALUES (?, ?, ?, ?, ?, ?)",
                            (f"{jid}/{step}", jid, step, att, pid, value))
                        maybe_die("inside_step", id=jid, attempt=att, step=step)
                        return one(conn, "SELECT tq_step_put(?, ?, ?, ?)", jid, att, step, value)

                    kept = busy_retry("step_put", effect_and_step)
                    if kept is None:          # stale attempt: keep nothing, do nothing
                        conn.execute("ROLLBACK")
                        log(ev="stale_step", id=jid, attempt=att, step=step)
                        stale = True
                        break
                    if kept != value:         # another answer won: do not do it twice
                        conn.execute("ROLLBACK")
                        log(ev="lost_step", id=jid, attempt=att, step=step, kept=kept)
                    else:
                        conn.execute("COMMIT")
                        log(ev="step", id=jid, attempt=att, step=step, value=value)
                else:
                    log(ev="step_kept", id=jid, attempt=att, step=step, value=kept)
                maybe_die("after_step", id=jid, attempt=att, step=step)
                slo, shi = a.get("step_ms", [0, 8])
                time.sleep(rnd.uniform(slo, shi) / 1000)
            if stale:
                continue
            maybe_die("before_settle", id=jid, attempt=att)
            res = busy_retry("settle", lambda: one(
                conn, "SELECT tq_settle(?, ?, 'done', ?)", jid, att, json.dumps({"pid": pid})))
            log(ev="settle", id=jid, attempt=att, r=res)
            maybe_die("after_settle", id=jid, attempt=att)
    log(ev="stop")
    conn.close()


# --------------------------------------------------------------------------- wait modes

def retry_busy(busy, fn):
    """A busy error changes nothing: retry it, and keep a note for the test to report."""
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if not is_busy(e) or len(busy) > 200:
                raise
            busy.append(err_info(e))
            time.sleep(0.002)


def mode_waiter(db, a):
    conn = connect(db, a.get("busy_ms", 5000))
    start = time.monotonic()
    for i in range(a["rounds"]):
        if time.monotonic() - start > a.get("max_s", 60):
            out(abort="took too long", round=i)
            return
        out(ready=i)
        w0 = time.monotonic()
        r = one(conn, "SELECT tq_wait(?, ?)", a["queue"], a.get("timeout", "5s"))
        t = time.monotonic()
        busy = []
        rows = retry_busy(busy, lambda: claim(conn, a["queue"], "waiter", 10))
        for row in rows:
            retry_busy(busy, lambda: one(conn, "SELECT tq_settle(?, ?, 'done')",
                                         row["id"], row["attempt"]))
        out(round=i, r=r, t=t, waited=t - w0, claimed=[row["id"] for row in rows], busy=busy)


def mode_idle(db, a):
    conn = connect(db, a.get("busy_ms", 5000))
    if a.get("warm", True):
        one(conn, "SELECT tq_wait(?, ?)", a["queue"], 10)   # warm up (load, prepare)
    c0, w0 = time.process_time(), time.monotonic()
    r = one(conn, "SELECT tq_wait(?, ?)", a["queue"], a["timeout"])
    c1, w1 = time.process_time(), time.monotonic()
    out(r=r, cpu=c1 - c0, wall=w1 - w0)


def mode_due(db, a):
    conn = connect(db, a.get("busy_ms", 5000))
    out(ready=True)
    start = time.monotonic()
    results = []
    while time.monotonic() - start < a.get("max_s", 20):
        w0 = time.monotonic()
        r = one(conn, "SELECT tq_wait(?, ?)", a["queue"], a.get("timeout", "10s"))
        t = time.monotonic()
        now = one(conn, "SELECT tq_now()")
        busy = []
        rows = retry_busy(busy, lambda: claim(conn, a["queue"], "due-waiter", 10))
        results.append({"r": r, "waited": t - w0, "now": now, "claimed": [x["id"] for x in rows],
                        "busy": busy})
        if rows or a.get("single"):
            break
    out(results=results, elapsed=time.monotonic() - start, end=time.monotonic())


# --------------------------------------------------------------------------- parent side

def wait_all(procs, timeout=30):
    """Wait for worker processes to exit (after their stop file appeared); kill stragglers."""
    import subprocess
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def spawn(mode, db, args=None, **popen):
    """Start a worker process with Debian's python (the one that can load extensions)."""
    import subprocess
    env = dict(os.environ, TINYQ_EXT=EXT)
    return subprocess.Popen(["/usr/bin/python3", os.path.abspath(__file__), mode, db,
                             json.dumps(args or {})], env=env, text=True, **popen)


class Holder:
    """A live process holding the leases it claimed; talk to it over stdin/stdout."""

    def __init__(self, db, queue, n=1, **args):
        import subprocess
        args.update(queue=queue, n=n)
        self.proc = spawn("hold", db, args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        first = self._read()
        self.pid = first["pid"]
        self.rows = first["rows"]

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"holder process ended (rc={self.proc.poll()})")
        return json.loads(line)

    def cmd(self, **c):
        self.proc.stdin.write(json.dumps(c) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def sql(self, sql, *args):
        """The first value of the first row, or raise AssertionError with the error."""
        res = self.cmd(sql=sql, args=list(args))
        if "error" in res:
            raise AssertionError(f"holder: {sql}: {res['error']}")
        return res["rows"][0][0] if res["rows"] else None

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        """SIGKILL, and reap it (a dead process is gone only once its parent reaps it)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def exit(self):
        if self.alive():
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        self.proc.wait(timeout=30)

    def close(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=30)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


MODES = {"hold": mode_hold, "load": mode_load, "crash": mode_crash, "waiter": mode_waiter,
         "idle": mode_idle, "due": mode_due}

if __name__ == "__main__":
    MODES[sys.argv[1]](sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
