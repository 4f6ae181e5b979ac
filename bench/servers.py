#!/usr/bin/python3
"""tinyq beside the server-backed queues a team would pick instead (issue 45), at matched
durability, in one run: `make bench-systems` -> bench/results/systems.md and systems-*.png.

    /usr/bin/python3 bench/servers.py            # full: best of 3 (about 30-40 minutes)
    /usr/bin/python3 bench/servers.py --quick    # smaller counts, 1 run (about 6 minutes)
    /usr/bin/python3 bench/servers.py --quick --only tinyq-node,bullmq   # a subset

Node: tinyq's `work()` (node/), BullMQ on Redis, pg-boss and graphile-worker on PostgreSQL
(bench/servers_node.js, one class per system). Python: tinyq's `Queue.work` (threads) and
`AsyncQueue.work` (asyncio), RQ on Redis, procrastinate on PostgreSQL (the classes below).

Durability, two levels, each system at both:
  strict  (a job acknowledged is on disk: fsync per commit) tinyq synchronous=FULL,
          Redis appendonly yes + appendfsync always, PostgreSQL synchronous_commit=on;
  relaxed (a power cut may undo the last moments, never corrupts) tinyq synchronous=NORMAL,
          Redis appendfsync everysec, PostgreSQL synchronous_commit=off.

Services: redis-server and PostgreSQL from Debian's packages (installed with apt-get if
missing), started by this script on 127.0.0.1, free ports, in a temporary folder under
bench/work/ (the same disk as tinyq's files), and stopped at the end, also on failure or
SIGTERM. PostgreSQL runs as the `postgres` user (created if missing) with its defaults but
for the port, the socket folder and max_connections=300; every run gets a fresh database
whose synchronous_commit is the run's. Redis gets FLUSHALL and CONFIG SET appendfsync
before every run.

Setup (first run, under bench/work/): a venv `sysvenv/` of Debian's python3 with rq,
procrastinate, psycopg[binary] and matplotlib; `sysnode/` with bullmq, ioredis, pg-boss and
graphile-worker from npm (current versions; the results say which).
"""
import argparse
import atexit
import json
import os
import platform
import pwd
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from _common import best_of, better, child_error, log, npm_install

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
WORK = os.path.join(BENCH, "work")
RESULTS = os.path.join(BENCH, "results")
VENV = os.path.join(WORK, "sysvenv")
VENV_PY = os.path.join(VENV, "bin", "python")
NODE_DIR = os.path.join(WORK, "sysnode")
PY_PACKAGES = ["rq", "procrastinate", "psycopg[binary]", "matplotlib"]
NODE_PACKAGES = ["bullmq", "ioredis", "pg-boss", "graphile-worker"]
EXT = os.path.join(ROOT, "dist", "tinyq")

SIZES = {
    # drain: jobs per drain run; cap_s: a run stops there (rate = jobs done / time, marked *)
    "quick": dict(drain=3_000, sleep=1_000, lat=50, gap_ms=20, cap_s=8, repeats=1),
    "full": dict(drain=20_000, sleep=4_000, lat=200, gap_ms=20, cap_s=10, repeats=3),
}
SLEEP_S = 0.2
SLEEP_C = 200
RQ_SLEEP_PROCS = 32   # RQ runs one job per process: 32 processes, not 200 (see the results)

# system -> (language, kind of durability, node or python child)
SYSTEMS = {
    "tinyq-node": ("Node", "sqlite", "node"),
    "bullmq": ("Node", "redis", "node"),
    "pg-boss": ("Node", "pg", "node"),
    "graphile-worker": ("Node", "pg", "node"),
    "tinyq-threads": ("Python", "sqlite", "py"),
    "tinyq-asyncio": ("Python", "sqlite", "py"),
    "rq": ("Python", "redis", "py"),
    "procrastinate": ("Python", "pg", "py"),
}
LABELS = {
    "tinyq-node": "tinyq Node `work()`",
    "bullmq": "BullMQ (Redis)",
    "pg-boss": "pg-boss (PostgreSQL)",
    "graphile-worker": "graphile-worker (PostgreSQL)",
    "tinyq-threads": "tinyq `Queue.work` (threads)",
    "tinyq-asyncio": "tinyq `AsyncQueue.work` (asyncio)",
    "rq": "RQ (Redis)",
    "procrastinate": "procrastinate (PostgreSQL)",
}
NODE_KEYS = {"tinyq-node": "tinyq", "bullmq": "bullmq", "pg-boss": "pgboss", "graphile-worker": "graphile"}
BASE = {"Node": "tinyq-node", "Python": "tinyq-threads"}
LEVELS = {  # durability level -> setting per kind
    "strict": {"sqlite": "FULL", "redis": "always", "pg": "on"},
    "relaxed": {"sqlite": "NORMAL", "redis": "everysec", "pg": "off"},
}


# =========================================================================== Python children
# Each class: how that system is driven, as its docs recommend for throughput. drain(spec)
# and latency(spec) return the same JSON as bench/servers_node.js: a drain is timed from the
# worker's start until the store holds all n jobs as completed (polled every 5 ms once the
# last handler has run).


def wait_settled(settled, n, jobs):
    """Once every handler ran (jobs == n), polls settled() until the store has n completed."""
    if jobs < n:
        return
    until = time.monotonic() + 15
    while settled() < n:
        if time.monotonic() > until:
            raise RuntimeError("only %d of %d jobs completed in the store 15 s after the last handler" % (settled(), n))
        time.sleep(0.005)

def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


class TinyqPython:
    """tinyq's helpers as users run them: `tinyq.Queue(path, "q").work(handler,
    concurrency=c)` (threads) or `await tinyq.AsyncQueue(path, "q").work(handler,
    concurrency=c)` (asyncio). Their connections are opened with synchronous=FULL (the
    default); for NORMAL the bench wraps tinyq._connection._configure to set NORMAL after.
    Adds (prefill, latency) go through a sqlite3 connection of the bench's own, at the same
    durability: no in-process shortcut to the worker."""

    def __init__(self, spec):
        self.spec = spec
        sys.path.insert(0, os.path.join(ROOT, "python"))
        os.environ["TINYQ_EXT"] = EXT
        import tinyq
        import tinyq._connection as connection
        self.tinyq = tinyq
        if spec["sync"] != "FULL":
            configure = connection._configure

            def with_sync(conn, busy_timeout):
                configure(conn, busy_timeout)
                connection._rows(conn, "PRAGMA synchronous=%s" % spec["sync"])
            connection._configure = with_sync

    def raw(self):
        conn = sqlite3.connect(self.spec["path"], isolation_level=None, timeout=5)
        conn.enable_load_extension(True)
        conn.load_extension(EXT)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=%s" % self.spec["sync"])
        return conn

    def prefill(self, n):
        conn = self.raw()
        conn.execute("BEGIN")
        for i in range(n):
            conn.execute("SELECT tq_add('q', ?)", ('{"i": %d}' % i,))
        conn.execute("COMMIT")
        conn.close()

    def run(self, handler, c, sleep):
        """Runs the worker until stop() (in this thread); handler(i) after the sleep, if any."""
        if self.spec["system"] == "tinyq-threads":
            self.q = self.tinyq.Queue(self.spec["path"], "q")

            def job(payload, run):
                if sleep:
                    time.sleep(sleep)
                handler(payload["i"])
            self.q.work(job, concurrency=c, poll=0.05)
        else:
            import asyncio

            async def main():
                self.q = self.tinyq.AsyncQueue(self.spec["path"], "q")
                self.loop = asyncio.get_running_loop()

                async def job(payload, run):
                    if sleep:
                        await asyncio.sleep(sleep)
                    handler(payload["i"])
                await self.q.work(job, concurrency=c, poll=0.05)
                await self.q.close()
            asyncio.run(main())

    def stop(self):
        if self.spec["system"] == "tinyq-threads":
            self.q.stop()
        else:
            self.loop.call_soon_threadsafe(self.q.stop)

    def drain(self, spec):
        self.prefill(spec["n"])
        done, finished = [0], threading.Event()
        lock = threading.Lock()

        def handler(i):
            with lock:
                done[0] += 1
                if done[0] == spec["n"]:
                    finished.set()
        print("working", flush=True)
        t0 = time.perf_counter()
        worker = threading.Thread(target=self.run, args=(handler, spec["c"], spec.get("sleep")))
        worker.start()
        finished.wait(spec["cap_s"])
        ran, jobs = time.perf_counter() - t0, done[0]
        reader = self.raw()
        wait_settled(lambda: reader.execute("SELECT done FROM tq_stats('q')").fetchone()[0], spec["n"], jobs)
        seconds = time.perf_counter() - t0
        self.stop()
        worker.join(10)
        return {"seconds": seconds, "ran": ran, "jobs": jobs, "n": spec["n"], "capped": jobs < spec["n"]}

    def latency(self, spec):
        starts = {}
        worker = threading.Thread(target=self.run, args=(lambda i: starts.setdefault(i, time.monotonic()), 1, None))
        worker.start()
        conn = self.raw()

        def add(i):
            conn.execute("SELECT tq_add('q', ?)", ('{"i": %d}' % i,))
        result = latency_loop(spec, add, starts)
        self.stop()
        worker.join(10)
        return result


def latency_loop(spec, add, starts):
    """spec["n"] adds, each after the previous job started and spec["gap_ms"] more; each add
    committed by its own call. add -> start from just before the add call."""
    time.sleep(1.5)   # the worker settles into idle
    print("working", flush=True)
    adds, calls = [], []
    stop_at = time.monotonic() + spec["cap_s"] + 2
    for i in range(spec["n"]):
        if time.monotonic() > stop_at:
            break
        time.sleep(spec["gap_ms"] / 1000)
        t0 = time.monotonic()
        add(i)
        calls.append(time.monotonic() - t0)
        adds.append(t0)
        until = t0 + 3
        while i not in starts() if callable(starts) else i not in starts:
            if time.monotonic() > until:
                break
            time.sleep(0.001 if callable(starts) else 0.0002)
    got = starts() if callable(starts) else starts
    lat = [(got[i] - t0) * 1000 if i in got else float("inf") for i, t0 in enumerate(adds)]
    return {"p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
            "add_ms": percentile(calls, 0.5) * 1000, "lost": sum(x == float("inf") for x in lat),
            "samples": len(lat)}


class RQ:
    """RQ's own worker processes, as its docs run them: `rq worker --url URL -q q`, one
    process per job in parallel (RQ has no concurrency inside a worker), so c processes;
    each forks a work horse per job (RQ's default Worker). `-q` (quiet) because it logs
    every job otherwise. Jobs: `Queue.enqueue_many` in pipelines of 1,000 (prefill),
    `Queue.enqueue` (latency). The end of a drain is seen by polling the finished registry
    every 10 ms (the jobs are in another process): a job is there once acknowledged."""

    def __init__(self, spec):
        from redis import Redis
        from rq import Queue
        self.spec, self.Queue = spec, Queue
        self.redis = Redis(host="127.0.0.1", port=spec["redis_port"])
        self.q = Queue("q", connection=self.redis)
        self.workers = []

    def prefill(self, n, fn, args):
        for at in range(0, n, 1000):
            with self.redis.pipeline() as pipe:
                self.q.enqueue_many([self.Queue.prepare_data(fn, (i,) + args, result_ttl=3600)
                                     for i in range(at, min(n, at + 1000))], pipeline=pipe)
                pipe.execute()

    def start(self, c):
        env = dict(os.environ, PYTHONPATH=BENCH)
        rq = os.path.join(os.path.dirname(sys.executable), "rq")
        self.workers = [subprocess.Popen([rq, "worker", "--url", "redis://127.0.0.1:%d" % self.spec["redis_port"],
                                          "-q", "q"], env=env, stdout=subprocess.DEVNULL)
                        for _ in range(c)]

    def stop(self):
        for w in self.workers:
            w.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.wait(10)
            except subprocess.TimeoutExpired:
                w.kill()

    def drain(self, spec):
        import servers_jobs
        if spec.get("sleep"):
            self.prefill(spec["n"], servers_jobs.nap, (spec["sleep"],))
        else:
            self.prefill(spec["n"], servers_jobs.noop, ())
        print("working", flush=True)
        t0 = time.perf_counter()
        self.start(spec["c"])
        finished = self.q.finished_job_registry
        while True:
            jobs = finished.count
            seconds = time.perf_counter() - t0
            if jobs >= spec["n"] or seconds > spec["cap_s"]:
                break
            time.sleep(0.01)
        failed = self.q.failed_job_registry.count
        self.stop()
        if failed:
            return {"error": "%d jobs failed" % failed}
        return {"seconds": seconds, "jobs": jobs, "n": spec["n"], "capped": jobs < spec["n"]}

    def latency(self, spec):
        import servers_jobs
        stamps = os.path.join(os.path.dirname(spec["path"]), "stamps")
        self.start(1)

        def starts():
            got = {}
            if os.path.exists(stamps):
                for line in open(stamps):
                    i, t = line.split()
                    got[int(i)] = float(t)
            return got
        result = latency_loop(spec, lambda i: self.q.enqueue(servers_jobs.stamp, i, stamps), starts)
        self.stop()
        return result


class Procrastinate:
    """procrastinate's worker in this process: `await app.run_worker_async(queues=["q"],
    concurrency=c)` with async tasks (its docs: concurrency is for async tasks), LISTEN/NOTIFY
    on (its default), PsycopgConnector with a pool of at most 10 connections (pg-boss's
    default too). Jobs: `task.batch_defer_async` by 1,000 (prefill), `task.defer_async`
    (latency). Jobs kept after they finish (its default, delete_jobs="never")."""

    def __init__(self, spec):
        import procrastinate
        self.spec = spec
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(
            conninfo=spec["pg_url"], min_size=2, max_size=10))
        self.handler = None

        @self.app.task(name="job", queue="q")
        async def job(i):
            if spec.get("sleep"):
                import asyncio
                await asyncio.sleep(spec["sleep"])
            self.handler(i)
        self.job = job

    async def _run(self, body):
        async with self.app.open_async():
            await self.app.schema_manager.apply_schema_async()
            return await body()

    async def _worker(self, c, until, cap):
        import asyncio
        task = asyncio.create_task(self.app.run_worker_async(queues=["q"], concurrency=c, install_signal_handlers=False))
        try:
            await asyncio.wait_for(until.wait(), cap)
        except asyncio.TimeoutError:
            pass
        return task

    async def _stop(self, task):
        import asyncio
        task.cancel()
        try:
            await asyncio.wait_for(task, 10)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            pass

    def drain(self, spec):
        import asyncio

        async def body():
            for at in range(0, spec["n"], 1000):
                await self.job.batch_defer_async(*({"i": i} for i in range(at, min(spec["n"], at + 1000))))
            done, finished = [0], asyncio.Event()

            def handler(i):
                done[0] += 1
                if done[0] == spec["n"]:
                    finished.set()
            self.handler = handler
            print("working", flush=True)
            t0 = time.perf_counter()
            task = await self._worker(spec["c"], finished, spec["cap_s"])
            ran, jobs = time.perf_counter() - t0, done[0]
            until = time.monotonic() + 15
            while jobs == spec["n"] and await self.settled() < spec["n"]:
                if time.monotonic() > until:
                    raise RuntimeError("jobs not completed in the store 15 s after the last handler")
                await asyncio.sleep(0.005)
            seconds = time.perf_counter() - t0
            await self._stop(task)
            return {"seconds": seconds, "ran": ran, "jobs": jobs, "n": spec["n"], "capped": jobs < spec["n"]}
        return asyncio.run(self._run(body))

    async def settled(self):
        row = await self.app.connector.execute_query_one_async(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'succeeded'")
        return row["n"]

    def latency(self, spec):
        import asyncio

        async def body():
            starts = {}
            self.handler = lambda i: starts.setdefault(i, time.monotonic())
            task = asyncio.create_task(self.app.run_worker_async(queues=["q"], concurrency=1, install_signal_handlers=False))
            await asyncio.sleep(1.5)
            print("working", flush=True)
            adds, calls = [], []
            stop_at = time.monotonic() + spec["cap_s"] + 2
            for i in range(spec["n"]):
                if time.monotonic() > stop_at:
                    break
                await asyncio.sleep(spec["gap_ms"] / 1000)
                t0 = time.monotonic()
                await self.job.defer_async(i=i)
                calls.append(time.monotonic() - t0)
                adds.append(t0)
                until = t0 + 3
                while i not in starts and time.monotonic() < until:
                    await asyncio.sleep(0.0002)
            await self._stop(task)
            lat = [(starts[i] - t0) * 1000 if i in starts else float("inf") for i, t0 in enumerate(adds)]
            return {"p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
                    "add_ms": percentile(calls, 0.5) * 1000, "lost": sum(x == float("inf") for x in lat),
            "samples": len(lat)}
        return asyncio.run(self._run(body))


PY_CHILDREN = {"tinyq-threads": TinyqPython, "tinyq-asyncio": TinyqPython, "rq": RQ, "procrastinate": Procrastinate}


def child(spec):
    sys.path.insert(0, BENCH)
    system = PY_CHILDREN[spec["system"]](spec)
    result = system.latency(spec) if spec["workload"] == "latency" else system.drain(spec)
    print(json.dumps(result), flush=True)
    os._exit(0)


# =========================================================================== services

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_packages():
    pg = sorted(d for d in (os.listdir("/usr/lib/postgresql") if os.path.isdir("/usr/lib/postgresql") else []))
    if not shutil.which("redis-server") or not pg:
        log("apt-get install -y redis-server postgresql")
        subprocess.run(["apt-get", "install", "-y", "redis-server", "postgresql"], check=True,
                       stdout=subprocess.DEVNULL)
        pg = sorted(os.listdir("/usr/lib/postgresql"))
    return "/usr/lib/postgresql/%s/bin" % pg[-1]


class Services:
    """redis-server and a PostgreSQL cluster of our own, in `folder`, on free local ports."""

    def __init__(self, folder):
        self.folder, self.redis, self.pg_bin, self.pg_data = folder, None, None, None
        self.redis_port, self.pg_port, self.runs = free_port(), free_port(), 0

    def start(self):
        self.pg_bin = ensure_packages()
        os.chmod(self.folder, 0o755)
        # Redis: AOF on, fsync per write (always) to begin with; no RDB snapshots.
        rdir = os.path.join(self.folder, "redis")
        os.makedirs(rdir)
        conf = os.path.join(rdir, "redis.conf")
        with open(conf, "w") as f:
            f.write("bind 127.0.0.1\nport %d\ndir %s\nappendonly yes\nappendfsync always\nsave \"\"\n"
                    "daemonize no\nprotected-mode yes\nlogfile %s\n" % (self.redis_port, rdir, os.path.join(rdir, "log")))
        self.redis = subprocess.Popen(["redis-server", conf], stdout=subprocess.DEVNULL)
        for _ in range(100):
            if self.redis_cli("PING") == "PONG":
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("redis-server did not start")
        # PostgreSQL: initdb + pg_ctl as the postgres user (it will not run as root).
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
        self.pg_data = os.path.join(self.folder, "pg")
        os.makedirs(self.pg_data)
        shutil.chown(self.pg_data, "postgres", "postgres")
        os.chmod(self.pg_data, 0o700)
        self.as_pg([os.path.join(self.pg_bin, "initdb"), "-D", self.pg_data, "-U", "postgres",
                    "--auth=trust", "-E", "UTF8", "--no-instructions"])
        self.as_pg([os.path.join(self.pg_bin, "pg_ctl"), "-D", self.pg_data, "-w", "-l",
                    os.path.join(self.pg_data, "log"), "-o",
                    "-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300" % (self.pg_port, self.pg_data),
                    "start"])

    def as_pg(self, argv):
        subprocess.run(["runuser", "-u", "postgres", "--"] + argv, check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        if self.redis and self.redis.poll() is None:
            self.redis.terminate()
            try:
                self.redis.wait(10)
            except subprocess.TimeoutExpired:
                self.redis.kill()
        if self.pg_data and os.path.exists(os.path.join(self.pg_data, "postmaster.pid")):
            subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(self.pg_bin, "pg_ctl"), "-D", self.pg_data,
                            "-m", "immediate", "-w", "stop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def redis_cli(self, *args):
        out = subprocess.run(["redis-cli", "-p", str(self.redis_port)] + list(args), capture_output=True, text=True)
        return out.stdout.strip()

    def psql(self, sql, db="postgres"):
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "postgres", "-d", db,
                              "-X", "-q", "-t", "-A", "-c", sql], capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(out.stderr)
        return out.stdout.strip()

    def prepare(self, kind, setting):
        """A clean backend for one run; returns the spec keys its child needs."""
        if kind == "redis":
            self.redis_cli("FLUSHALL")
            self.redis_cli("CONFIG", "SET", "appendfsync", setting)
            assert self.redis_cli("CONFIG", "GET", "appendfsync").splitlines()[-1] == setting
            return {"redis_port": self.redis_port}
        if kind == "pg":
            self.runs += 1
            db = "run%d" % self.runs
            self.psql("CREATE DATABASE %s" % db)
            self.psql("ALTER DATABASE %s SET synchronous_commit = %s" % (db, setting))
            return {"pg_url": "postgresql://postgres@127.0.0.1:%d/%s" % (self.pg_port, db), "pg_db": db}
        return {}

    def release(self, keys):
        if "pg_db" in keys:
            self.psql("DROP DATABASE %s WITH (FORCE)" % keys["pg_db"])

    def server_pid(self, kind):
        if kind == "redis":
            return self.redis.pid
        if kind == "pg":
            with open(os.path.join(self.pg_data, "postmaster.pid")) as f:
                return int(f.readline())
        return None

    def versions(self):
        return {"redis": self.redis_cli("INFO", "server").split("redis_version:")[1].split()[0],
                "postgres": self.psql("SHOW server_version")}


# =========================================================================== measuring

def tree(pid):
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                todo += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return pids


def pss_mb(pid):
    """The process tree's memory: the sum of PSS (shared pages split among the processes that
    share them, so a PostgreSQL backend's shared buffers are not counted once per backend)."""
    total = 0
    for p in tree(pid):
        try:
            with open("/proc/%d/smaps_rollup" % p) as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total / 1024


def fsync_latency(folder, n=200):
    path = os.path.join(folder, "fsync.probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    times = []
    try:
        for i in range(n):
            os.write(fd, b"x" * 512)
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        os.remove(path)
    times.sort()
    return {"p50": times[n // 2], "p99": times[int(n * 0.99)], "mean": sum(times) / n}


def measure_once(services, folder, system, level, workload, size):
    lang, kind, runtime = SYSTEMS[system]
    setting = LEVELS[level][kind]
    run_dir = tempfile.mkdtemp(dir=folder)
    spec = dict(system=system, workload=workload, cap_s=size["cap_s"], path=os.path.join(run_dir, "q.db"))
    if kind == "sqlite":
        spec["sync"] = setting
    if workload == "drain1" or workload == "drain8":
        spec.update(workload="drain", n=size["drain"], c=1 if workload == "drain1" else 8)
    elif workload == "sleep":
        spec.update(n=size["sleep"], c=SLEEP_C, sleep=SLEEP_S, cap_s=max(size["cap_s"], 20))
        if system == "rq":
            spec.update(c=RQ_SLEEP_PROCS, n=size["sleep"] * RQ_SLEEP_PROCS // SLEEP_C)
    else:
        spec.update(n=size["lat"], gap_ms=size["gap_ms"])
    keys = services.prepare(kind, setting)
    spec.update(keys)
    if runtime == "node":
        argv = ["node", os.path.join(BENCH, "servers_node.js"), json.dumps(dict(spec, system=NODE_KEYS[system]))]
        env = dict(os.environ, NODE_PATH=os.path.join(NODE_DIR, "node_modules"), TINYQ_EXT=EXT)
    else:
        argv = [VENV_PY, os.path.abspath(__file__), "--child", json.dumps(spec)]
        env = dict(os.environ)
    server = services.server_pid(kind)
    peak = {"worker": 0.0, "server": 0.0}
    sampling = threading.Event()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=run_dir)
    lines = []

    def read():
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "working":
                sampling.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if sampling.is_set():
            peak["worker"] = max(peak["worker"], pss_mb(proc.pid))
            if server:
                peak["server"] = max(peak["server"], pss_mb(server))
        time.sleep(0.1)
    if proc.poll() is None:
        for p in reversed(tree(proc.pid)):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    proc.wait()
    reader.join(5)
    err = proc.stderr.read()
    try:
        services.release(keys)
    except RuntimeError as e:
        log("release: %s" % e)
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"error": child_error(err, proc.returncode)}
    result.update(worker_mb=peak["worker"], server_mb=peak["server"] if server else None)
    return result


# =========================================================================== setup

def setup():
    stamp = os.path.join(VENV, ".stamp")
    if not (os.path.exists(stamp) and open(stamp).read() == " ".join(PY_PACKAGES)):
        log("venv %s: %s" % (os.path.relpath(VENV, ROOT), " ".join(PY_PACKAGES)))
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", VENV], check=True)
        subprocess.run([VENV_PY, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + PY_PACKAGES, check=True)
        with open(stamp, "w") as f:
            f.write(" ".join(PY_PACKAGES))
    npm_install(NODE_DIR, NODE_PACKAGES, "tinyq-bench-systems")


def versions():
    out = {}
    for p in ("bullmq", "ioredis", "pg-boss", "graphile-worker", "pg"):
        try:
            with open(os.path.join(NODE_DIR, "node_modules", p, "package.json")) as f:
                out[p] = json.load(f)["version"]
        except OSError:
            out[p] = "?"
    code = ("import importlib.metadata as m; print(' '.join(m.version(p) for p in "
            "('rq', 'redis', 'procrastinate', 'psycopg', 'matplotlib')))")
    got = subprocess.run([VENV_PY, "-c", code], capture_output=True, text=True).stdout.split()
    out.update(zip(("rq", "redis-py", "procrastinate", "psycopg", "matplotlib"), got))
    with open(os.path.join(ROOT, "node", "package.json")) as f:
        out["tinyq"] = json.load(f)["version"]
    out["better-sqlite3"] = json.load(open(os.path.join(ROOT, "node", "node_modules", "better-sqlite3", "package.json")))["version"]
    out["node"] = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    out["sqlite"] = sqlite3.sqlite_version
    return out


# =========================================================================== report

WORKLOADS = [("drain1", "(a) drain, 1 worker / concurrency 1"), ("drain8", "(a) drain, concurrency 8"),
             ("sleep", "(b) 0.2 s sleep per job, concurrency %d (ideal %d jobs/s)" % (SLEEP_C, SLEEP_C / SLEEP_S))]


def rate(r):
    return r["jobs"] / r["seconds"] if r and "error" not in r and r["seconds"] > 0 else None


def fmt_rate(r):
    if r is None:
        return "n/a"
    if "error" in r:
        return "error: %s" % r["error"][:70].replace("|", "/")
    return "{:,.0f}{}".format(rate(r), "*" if r.get("capped") else "")


def fmt_ratio(x, base):
    return "" if x is None or base is None else " (%.2fx)" % (x / base)


def report(args, size, results, names, fsync, vers, load0, started):
    lines = []
    emit = lines.append
    mode = "quick" if args.quick else "full"
    emit("# tinyq beside server-backed queues (issue 45)")
    emit("")
    emit("Written by `bench/servers.py%s` (`make bench-systems`) on %s, %s run: %d round%s, best of "
         "them, all systems round-robin in the same run; %.0f minutes." % (
             " --quick" if args.quick else "", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), mode,
             size["repeats"], "s" if size["repeats"] > 1 else "", (time.monotonic() - started) / 60))
    emit("")
    emit("**Machine:** %s, %d cores, %s, %s; load average (1 min) %.1f at the start, %.1f at the end "
         "(other work runs on this machine: read the ratios, which come from the same run, more than "
         "the absolute numbers)." % (platform.machine(), os.cpu_count(), platform.platform(),
                                      "%.0f GiB" % (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
                                      load0, os.getloadavg()[0]))
    emit("")
    emit("**fsync on this disk, same run** (200 fsyncs of a 512-byte append in the bench's temporary "
         "folder, bench/work/): median **%.2f ms**, p99 %.2f ms, mean %.2f ms. A commit that waits for "
         "the disk costs at least this." % (fsync["p50"], fsync["p99"], fsync["mean"]))
    emit("")
    emit("**Versions:** tinyq %s (dist/tinyq.so, SQLite %s; Node helper over better-sqlite3 %s, Node %s; "
         "Python helper, Python %s). Redis %s, PostgreSQL %s (Debian packages). npm: BullMQ %s (ioredis %s), "
         "pg-boss %s, graphile-worker %s (pg %s). PyPI: RQ %s (redis-py %s), procrastinate %s (psycopg %s)." % (
             vers["tinyq"], vers["sqlite"], vers["better-sqlite3"], vers["node"], platform.python_version(),
             vers["redis"], vers["postgres"], vers["bullmq"], vers["ioredis"], vers["pg-boss"],
             vers["graphile-worker"], vers["pg"], vers.get("rq", "?"), vers.get("redis-py", "?"),
             vers.get("procrastinate", "?"), vers.get("psycopg", "?")))
    emit("")
    emit("**Durability, matched:**")
    emit("")
    emit("| level | tinyq (SQLite WAL) | Redis (BullMQ, RQ) | PostgreSQL (pg-boss, graphile-worker, procrastinate) | what a power cut can lose |")
    emit("|---|---|---|---|---|")
    emit("| strict | `synchronous=FULL` (the helpers' default) | `appendonly yes`, `appendfsync always` | "
         "`synchronous_commit=on` (default) | nothing acknowledged |")
    emit("| relaxed | `synchronous=NORMAL` | `appendonly yes`, `appendfsync everysec` | `synchronous_commit=off` | "
         "the last moments (SQLite: commits since the last checkpoint's sync; Redis: ~1 s; PostgreSQL: "
         "up to 3x wal_writer_delay, 0.6 s) |")
    emit("")
    emit("Servers: started by the bench on 127.0.0.1 (TCP), Redis with no RDB snapshots, PostgreSQL with its "
         "defaults (shared_buffers 128 MB, fsync on) but max_connections=300; a fresh database (PostgreSQL) "
         "or FLUSHALL (Redis) before each run. Every measurement is a fresh process (and a fresh SQLite file).")
    emit("")
    emit("## Throughput, jobs/s (best of %d), ratio to tinyq of the same language and level in the same run" % size["repeats"])
    emit("")
    emit("Prefilled queue (%s jobs for the drains, %s for the sleep workload; added before the clock "
         "starts), timed from the worker's start until the store holds every job as completed (polled every "
         "5 ms once the last handler ran; RQ: its finished registry, polled every 10 ms). `*`: the "
         "run stopped at its cap (%d s; %d s for the sleep workload) and the rate is the jobs done over that "
         "time. Ratios are to tinyq Node `work()` for Node and to tinyq `Queue.work` for Python." % (
             "{:,}".format(size["drain"]), "{:,}".format(size["sleep"]), size["cap_s"], max(size["cap_s"], 20)))
    for workload, title in WORKLOADS:
        emit("")
        emit("### %s" % title)
        emit("")
        emit("| system | strict | relaxed |")
        emit("|---|---|---|")
        for name in names:
            cells = []
            for level in LEVELS:
                r = results.get((name, level, workload))
                base = results.get((BASE[SYSTEMS[name][0]], level, workload))
                cell = fmt_rate(r)
                if name != BASE[SYSTEMS[name][0]]:
                    cell += fmt_ratio(rate(r), rate(base))
                cells.append(cell)
            emit("| %s%s | %s | %s |" % (LABELS[name], " (%d processes, %s jobs)" % (
                RQ_SLEEP_PROCS, "{:,}".format(size["sleep"] * RQ_SLEEP_PROCS // SLEEP_C))
                if name == "rq" and workload == "sleep" else "", cells[0], cells[1]))
    emit("")
    emit("## (c) add -> start latency at a trickle")
    emit("")
    emit("%d adds, each %d ms after the previous job started, each committed by its own call from another "
         "connection / client in the worker's process (RQ: its worker is another process), to a worker "
         "(concurrency 1) waiting idle. From just before the add call to the handler's start, ms, "
         "best of %d by median; `add` is the add call's own median (the commit)." % (
             size["lat"], size["gap_ms"], size["repeats"]))
    emit("")
    emit("| system | strict p50 | strict p99 | strict add | relaxed p50 | relaxed p99 | relaxed add |")
    emit("|---|---|---|---|---|---|---|")
    for name in names:
        cells = []
        for level in LEVELS:
            r = results.get((name, level, "latency"))
            if r is None:
                cells += ["n/a"] * 3
            elif "error" in r:
                cells += ["error: %s" % r["error"][:50].replace("|", "/"), "", ""]
            else:
                base = results.get((BASE[SYSTEMS[name][0]], level, "latency"))
                ratio = "" if name == BASE[SYSTEMS[name][0]] or not base or "error" in base else \
                    " (%.1fx)" % (r["p50_ms"] / base["p50_ms"])
                lost = " (%d never started)" % r["lost"] if r.get("lost") else ""
                if r.get("samples", spec_n(size)) < size["lat"]:
                    lost += " (%d adds)" % r["samples"]
                cells += ["%.2f%s%s" % (r["p50_ms"], ratio, lost), "%.2f" % r["p99_ms"], "%.2f" % r["add_ms"]]
        emit("| %s | %s |" % (LABELS[name], " | ".join(cells)))
    emit("")
    emit("## (d) peak memory, MB")
    emit("")
    emit("Sum of PSS over the process tree (a worker's forked children included; shared pages split "
         "among the processes sharing them, so PostgreSQL's shared buffers count once), sampled every "
         "0.1 s while the workload ran, in the best run; the worker process holds the prefill's client too. "
         "The server is the whole redis-server or PostgreSQL (postmaster and every backend); tinyq has none.")
    emit("")
    emit("| system | level | drain c=8: worker | server | sleep c=%d: worker | server |" % SLEEP_C)
    emit("|---|---|---|---|---|---|")
    for name in names:
        for level in LEVELS:
            cells = []
            for workload in ("drain8", "sleep"):
                r = results.get((name, level, workload))
                if not r or "error" in r:
                    cells += ["n/a", "n/a"]
                else:
                    cells += ["%.0f" % r["worker_mb"], "-" if r["server_mb"] is None else "%.0f" % r["server_mb"]]
            emit("| %s | %s | %s |" % (LABELS[name], level, " | ".join(cells)))
    return lines


def spec_n(size):
    return size["lat"]


def plots(results, names, folder, prefix):
    """Bar charts the way bench/peers.py draws them (matplotlib, Agg, one PNG per figure)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for lang in ("Node", "Python"):
        group = [n for n in names if SYSTEMS[n][0] == lang]
        if not group:
            continue
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
        for ax, (workload, title) in zip(axes, WORKLOADS):
            width = 0.4
            for k, level in enumerate(LEVELS):
                values = [rate(results.get((n, level, workload))) or 0 for n in group]
                xs = [i + (k - 0.5) * width for i in range(len(group))]
                bars = ax.bar(xs, values, width=width, label=level,
                              color=["#d62728" if n.startswith("tinyq") else "#1f77b4" for n in group],
                              alpha=1.0 if level == "strict" else 0.5)
                for bar, v in zip(bars, values):
                    ax.annotate("%.0f" % v if v else "n/a", (bar.get_x() + bar.get_width() / 2, v),
                                ha="center", va="bottom", fontsize=7)
            ax.set_xticks(list(range(len(group))))
            ax.set_xticklabels([LABELS[n].replace(" `", "\n`").replace(" (", "\n(") for n in group], fontsize=7)
            ax.set_title(title, fontsize=9)
            ax.set_ylabel("jobs/s (higher is better)")
        axes[0].legend(["strict (solid)", "relaxed (light)"], fontsize=8)
        fig.suptitle("%s: throughput at matched durability (strict: fsync per commit; relaxed: no fsync per commit)" % lang)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, "%s-throughput-%s.png" % (prefix, lang.lower())), dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(12, 4.8))
    ok = [(n, level) for n in names for level in LEVELS
          if results.get((n, level, "latency")) and "error" not in results[(n, level, "latency")]]
    xs = list(range(len(ok)))
    ax.bar([i - 0.2 for i in xs], [results[(n, l, "latency")]["p50_ms"] for n, l in ok], width=0.4, label="p50")
    ax.bar([i + 0.2 for i in xs], [min(results[(n, l, "latency")]["p99_ms"], 1e5) for n, l in ok], width=0.4, label="p99")
    ax.set_xticks(xs)
    ax.set_xticklabels(["%s\n%s" % (LABELS[n].split(" (")[0].replace("`", ""), l) for n, l in ok], fontsize=7, rotation=30)
    ax.set_yscale("log")
    ax.set_ylabel("add -> start, ms (lower is better)")
    ax.set_title("Latency at a trickle, worker idle in between")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "%s-latency.png" % prefix), dpi=110)
    plt.close(fig)


# =========================================================================== main

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, 1 run")
    parser.add_argument("--only", help="comma-separated systems (default: all): " + ",".join(SYSTEMS))
    parser.add_argument("--workloads", help="comma-separated: drain1,drain8,sleep,latency (default: all)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "systems.md"))
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if os.geteuid() != 0:
        sys.exit("bench/servers.py starts PostgreSQL as the postgres user (runuser): run it as root")
    if not os.path.exists(EXT + ".so"):
        sys.exit("%s.so is missing: run `make` first" % EXT)
    load0, started = os.getloadavg()[0], time.monotonic()
    os.makedirs(WORK, exist_ok=True)
    setup()
    size = SIZES["quick" if args.quick else "full"]
    names = [n for n in SYSTEMS if not args.only or n in args.only.split(",")]
    workloads = (args.workloads or "drain1,drain8,sleep,latency").split(",")
    folder = tempfile.mkdtemp(prefix="systems-", dir=WORK)
    services = Services(folder)

    def cleanup():
        services.stop()
        shutil.rmtree(folder, ignore_errors=True)
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        log("starting redis-server and PostgreSQL in %s" % os.path.relpath(folder, ROOT))
        services.start()
        fsync = fsync_latency(folder)
        log("fsync: median %.2f ms" % fsync["p50"])
        vers = versions()
        vers.update(services.versions())
        plan = [(n, level, w) for w in workloads for n in names for level in LEVELS]

        def measure(key, r):
            one = measure_once(services, folder, key[0], key[1], key[2], size)
            log("round %d/%d %s %s %s: %s" % (r + 1, size["repeats"], key[0], key[1], key[2],
                                              one.get("error") or (
                                                  "p50 %.2f ms" % one["p50_ms"] if "p50_ms" in one
                                                  else "%s jobs/s" % fmt_rate(one))))
            return one
        results = dict(zip(plan, best_of(plan, size["repeats"], measure)))
        lines = report(args, size, results, names, fsync, vers, load0, started)
    finally:
        cleanup()
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump({"|".join(k): v for k, v in results.items()}, f, indent=0)
    print(text)
    if not args.no_plots:
        subprocess.run([VENV_PY, "-c", "import sys, json; sys.path.insert(0, %r); import servers; "
                        "d = json.load(open(%r)); r = {tuple(k.split('|')): v for k, v in d.items()}; "
                        "servers.plots(r, %r, %r, %r)" % (
                            BENCH, os.path.splitext(args.out)[0] + ".json", names,
                            os.path.dirname(os.path.abspath(args.out)),
                            os.path.splitext(os.path.basename(args.out))[0])], check=True)
    log("wrote %s" % os.path.relpath(args.out, ROOT))


if __name__ == "__main__":
    main()
