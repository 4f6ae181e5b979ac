#!/usr/bin/python3
"""The worker layer, the way users run it: tinyq's Python `Queue.work` (threads),
`AsyncQueue.work` (asyncio) and Node's `work`, beside huey's consumer and the npm queues
liteque and plainjob, on one machine in one run.

    /usr/bin/python3 bench/workers.py                 # full run (about two minutes)
    /usr/bin/python3 bench/workers.py --quick         # smaller sizes
    /usr/bin/python3 bench/workers.py --before ad2d89d   # also tinyq's helpers as of that commit
    /usr/bin/python3 bench/workers.py --only steps    # only the kept-step workload
    /usr/bin/python3 bench/workers.py --before ad2d89d --before-ext old/tinyq.so   # its extension too

Every figure is a prefilled queue drained by one process with a no-op handler (asyncio:
handlers that each await 0.2 s), timed from the start of the worker to the last job's
end, best of the repeats; idle wake-up is the median time from an add on another
connection to the handler's start, with the worker idle in between. Each measurement
runs in a process of its own. `--before REV` exports python/tinyq and node/*.js of
that commit (git archive) into bench/work/before-REV/ and measures them too, so "before"
and "after" come from the same run. Results: bench/results/workers.md.

Setup (first run, under bench/work/): huey comes from bench/peers.py's venv; liteque
0.8.0, plainjob 0.0.14 and better-sqlite3 12 are npm-installed into bench/work/node/.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from _common import best_of, child_error, log, npm_install

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
WORK = os.path.join(BENCH, "work")
RESULTS = os.path.join(BENCH, "results")
NODE_DIR = os.path.join(WORK, "node")
NODE_PACKAGES = ["liteque@0.8.0", "plainjob@0.0.14", "better-sqlite3@12"]
EXT = os.path.join(ROOT, "dist", "tinyq")
PY = "/usr/bin/python3"

SIZES = {
    "quick": dict(threads=2_000, asyncio=5_000, node=3_000, wakes=20, steps=4_000, repeats=1),
    "full": dict(threads=10_000, asyncio=20_000, node=10_000, wakes=60, steps=4_000, repeats=3),
}
STEP_SLEEP = 0.2       # the kept-step workload: a model call of 0.2 s whose answer is a step
STEP_C = 1000          # ... at concurrency 1,000 (asyncio, Node; huey's consumer: 1,000 threads)
STEP_THREADS = 200     # ... and 200 threads for Queue.work


# --------------------------------------------------------------------------- setup

def setup_huey():
    sys.path.insert(0, BENCH)
    import peers
    return peers.setup_venv()


def export_before(rev):
    """python/tinyq and node/*.js (index.js, its worker loop and wake-up thread) as of `rev`,
    in bench/work/before-REV/."""
    out = os.path.join(WORK, "before-" + rev)
    if not os.path.exists(os.path.join(out, "node", "waiter.js")):
        os.makedirs(out, exist_ok=True)
        archive = subprocess.run(["git", "archive", rev, "python/tinyq", ":(glob)node/*.js"],
                                 cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", out], input=archive, check=True)
    return out


# --------------------------------------------------------------------------- children

def prefill(path, queue, n):
    """n jobs added in one transaction (setup, not timed), through tq_add."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import sqlite3
    conn = sqlite3.connect(path, isolation_level=None)
    conn.enable_load_extension(True)
    conn.load_extension(EXT)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("BEGIN")
    for i in range(n):
        conn.execute("SELECT tq_add(?, ?)", (queue, '{"n": %d}' % i))
    conn.execute("COMMIT")
    conn.close()


def child_threads(spec):
    sys.path.insert(0, spec["python"])
    os.environ["TINYQ_EXT"] = EXT
    import threading
    import tinyq
    prefill(spec["path"], "q", spec["n"])
    q = tinyq.Queue(spec["path"], "q")
    left = [spec["n"]]
    lock = threading.Lock()

    def model():
        time.sleep(spec["sleep"])
        return {"text": "an answer"}

    def handler(payload, run):
        if spec.get("step"):      # a model call, its answer kept: one synced write per job
            run.step("answer", model)
        elif spec.get("sleep"):
            model()
        with lock:
            left[0] -= 1
            if left[0] == 0:
                ended.append((time.perf_counter(), time.process_time()))
                q.stop()

    ended = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    q.work(handler, concurrency=spec["c"], poll=0.05, **({"prefetch": spec["prefetch"]} if "prefetch" in spec else {}))
    return timed(t0, cpu0, ended[0], spec["n"])


def timed(t0, cpu0, ended, jobs):
    """A run timed from the worker's start to the last handler's end (as the Node and huey
    rows are), with how much later work() returned (its drain and stop) beside it."""
    return {"seconds": ended[0] - t0, "cpu": ended[1] - cpu0, "jobs": jobs,
            "returned_ms": (time.perf_counter() - ended[0]) * 1000}


def child_asyncio(spec):
    sys.path.insert(0, spec["python"])
    os.environ["TINYQ_EXT"] = EXT
    import asyncio
    import tinyq
    prefill(spec["path"], "q", spec["n"])

    async def main():
        q = tinyq.AsyncQueue(spec["path"], "q")
        left = [spec["n"]]

        async def model():
            await asyncio.sleep(spec["sleep"])
            return {"text": "an answer"}

        async def handler(payload, run):
            if spec.get("step"):   # the model call's answer kept: one synced write per job
                await run.step("answer", model)
            else:
                await model()
            left[0] -= 1
            if left[0] == 0:
                ended.append((time.perf_counter(), time.process_time()))
                q.stop()

        ended = []
        t0, cpu0 = time.perf_counter(), time.process_time()
        await q.work(handler, concurrency=spec["c"], poll=0.05)
        result = timed(t0, cpu0, ended[0], spec["n"])
        await q.close()
        return result

    return asyncio.run(main())


def child_huey(spec):
    """huey's own consumer (Consumer: thread workers, polling delays 1 ms, no periodic
    scheduler) over SqliteHuey in WAL with spec["sync"] as its synchronous setting."""
    import threading
    from huey import SqliteHuey
    from huey.storage import SqliteStorage

    class Storage(SqliteStorage):
        def _create_connection(self):
            conn = super()._create_connection()
            conn.execute("PRAGMA synchronous=%s" % spec["sync"])
            return conn

    huey = SqliteHuey("bench", filename=spec["path"], storage_class=Storage)
    if spec.get("sleep"):   # the result's write ends the task: count them as they land
        from huey.signals import SIGNAL_COMPLETE

        @huey.signal(SIGNAL_COMPLETE)
        def completed(signal, task):
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    finished.set()
    left = [spec["n"]]
    lock = threading.Lock()
    finished = threading.Event()

    @huey.task()
    def job(payload):
        if spec.get("sleep"):
            time.sleep(spec["sleep"])
            return {"text": "an answer"}    # huey keeps a task's result: one write, as a step
        with lock:
            left[0] -= 1
            if left[0] == 0:
                finished.set()

    storage = huey.storage
    rows = ((storage.name, storage.to_blob(huey.serialize_task(job.s('{"n": %d}' % i))), 0)
            for i in range(spec["n"]))
    with storage.db(commit=True) as curs:
        curs.executemany("insert into task (queue, data, priority) values (?, ?, ?)", rows)
    delay = spec.get("delay", 0.001)
    consumer = huey.create_consumer(workers=spec["c"], worker_type="thread", periodic=False,
                                    initial_delay=delay, max_delay=delay, backoff=1.0,
                                    check_worker_health=False)
    t0, cpu0 = time.perf_counter(), time.process_time()
    consumer.start()
    finished.wait()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    consumer.stop(graceful=True)
    return {"seconds": seconds, "cpu": cpu, "jobs": spec["n"]}


CHILDREN = {"threads": child_threads, "asyncio": child_asyncio, "huey": child_huey}


# --------------------------------------------------------------------------- running

def measure_once(python, spec):
    """One run of one measurement, in a fresh process and store."""
    with tempfile.TemporaryDirectory(dir=WORK) as folder:
        spec = dict(spec, path=os.path.join(folder, "bench.db"))
        if spec["kind"].startswith("node"):
            argv = ["node", os.path.join(BENCH, "workers_node.js"), json.dumps(spec)]
            env = dict(os.environ, NODE_PATH=os.path.join(NODE_DIR, "node_modules"), TINYQ_EXT=spec.get("ext", EXT))
        else:
            argv = [python, os.path.abspath(__file__), "--child", json.dumps(spec)]
            env = dict(os.environ)
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        if out.returncode != 0:
            return {"error": child_error(out.stderr, out.returncode)}
        return json.loads(out.stdout.strip().splitlines()[-1])


def measure_all(plan, repeats):
    """Every measurement of `plan` [(python, spec, label)], the best of `repeats` rounds."""
    def measure(item, r):
        python, spec, label = item
        log("%s (round %d/%d)" % (label, r + 1, repeats))
        return measure_once(python, spec)
    return best_of(plan, repeats, measure)


def rate(result):
    if result is None or "error" in result:
        return "n/a (%s)" % result["error"][:90] if result else "n/a"
    if "median_ms" in result:
        return "%.2f ms" % result["median_ms"]
    cpu = "" if "cpu" not in result else " (%.0f µs CPU/job)" % (result["cpu"] / result["jobs"] * 1e6)
    returned = "" if "returned_ms" not in result else "; work() returned %.0f ms later" % result["returned_ms"]
    return "{:,.0f} jobs/s{}{}".format(result["jobs"] / result["seconds"], cpu, returned)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--before", help="also measure tinyq's helpers as of this commit")
    parser.add_argument("--out", default=os.path.join(RESULTS, "workers.md"))
    parser.add_argument("--before-ext", help="the extension (.so) of the --before rows (default: this build's)")
    parser.add_argument("--only", help="measure only these columns (comma-separated: 1, 8, asyncio, steps, wake)")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        global EXT
        spec = json.loads(args.child)
        EXT = spec.get("ext", EXT)
        print(json.dumps(CHILDREN[spec["kind"]](spec)))
        return
    args.load_at_start = os.getloadavg()[0]
    size = SIZES["quick" if args.quick else "full"]
    os.makedirs(WORK, exist_ok=True)
    venv_py = setup_huey()
    npm_install(NODE_DIR, NODE_PACKAGES, "tinyq-bench-node-peers")
    current = {"python": os.path.join(ROOT, "python"), "node": os.path.join(ROOT, "node", "index.js")}
    versions = [("tinyq", current)]
    if args.before:
        before = export_before(args.before)
        versions.insert(0, ("tinyq %s (before)" % args.before,
                            {"python": os.path.join(before, "python"),
                             "node": os.path.join(before, "node", "index.js")}))
    n, repeats = size["threads"], size["repeats"]
    table, plan = [], []   # table: (worker, column, index in plan)

    def add(worker, column, python, spec):
        if args.before_ext and args.before and args.before in worker:
            spec = dict(spec, ext=os.path.abspath(args.before_ext)[:-3] if args.before_ext.endswith(".so") else args.before_ext)
        table.append((worker, column, len(plan)))
        plan.append((python, spec, "%s, %s" % (worker, column)))

    for label, where in versions:
        for c in (1, 8):
            add("%s Python `Queue.work` (threads)" % label, c, PY,
                dict(kind="threads", python=where["python"], c=c, n=n))
    for c in (1, 8):
        add("tinyq Python `Queue.work(prefetch=0)` (threads, never claiming ahead)", c, PY,
            dict(kind="threads", python=current["python"], c=c, n=n, prefetch=0))
    # huey as it ships (SqliteHuey leaves synchronous at SQLite's default, FULL: the same
    # durability as tinyq's helpers), and with synchronous=NORMAL (what a power cut may undo).
    for sync in ("FULL", "NORMAL"):
        for c in (1, 8):
            add("huey 3.5.4 consumer (SqliteHuey, WAL, synchronous=%s, thread workers, delays 1 ms)" % sync, c,
                venv_py, dict(kind="huey", c=c, n=n, sync=sync))
    for label, where in versions:
        for c in (1, 8):
            add("%s Node `work`" % label, c, PY, dict(kind="node-tinyq", module=where["node"], c=c, n=size["node"]))
    for c in (1, 8):
        add("tinyq Node `work({ prefetch: 0 })` (never claiming ahead)", c, PY,
            dict(kind="node-tinyq", module=current["node"], c=c, n=size["node"], prefetch=0))
    for peer in ("liteque", "plainjob"):
        for c in (1, 8):
            add(peer, c, PY, dict(kind="node-" + peer, c=c, n=size["node"]))
    # The kept-step workload (issue 25's seed): each handler keeps a 0.2 s model call's answer
    # as a step, the helpers at their default durability (synchronous=FULL); huey's consumer
    # runs the same call as a task whose result it keeps (SqliteHuey, synchronous=FULL).
    step = dict(sleep=STEP_SLEEP, step=True, n=size["steps"])
    for label, where in versions:
        add("%s `AsyncQueue.work` (asyncio, c=%d)" % (label, STEP_C), "steps", PY,
            dict(step, kind="asyncio", python=where["python"], c=STEP_C))
    for label, where in versions:
        add("%s Node `work` (c=%d)" % (label, STEP_C), "steps", PY,
            dict(step, kind="node-tinyq", module=where["node"], c=STEP_C))
    for label, where in versions:
        add("%s `Queue.work` (%d threads)" % (label, STEP_THREADS), "steps", PY,
            dict(step, kind="threads", python=where["python"], c=STEP_THREADS))
    add("huey 3.5.4 consumer (SqliteHuey, WAL, synchronous=FULL, %d thread workers, delays 10 ms)" % STEP_C,
        "steps", venv_py, dict(kind="huey", c=STEP_C, n=size["steps"], sync="FULL", sleep=STEP_SLEEP, delay=0.01))
    for label, where in versions:
        add(label, "asyncio", PY, dict(kind="asyncio", python=where["python"], c=1000, sleep=0.2, n=size["asyncio"]))
        add(label, "wake", PY, dict(kind="node-wake", module=where["node"], n=size["wakes"]))
    if args.only:
        columns = set(args.only.split(","))
        keep = [i for i, (_, column, _) in enumerate(table) if str(column) in columns]
        plan = [plan[i] for i in keep]
        table = [(w, c, keep.index(i)) for w, c, i in table if i in keep]
    results = measure_all(plan, repeats)
    rows = [(worker, column, results[i]) for worker, column, i in table]
    report(args, [r for r in rows if r[1] in (1, 8)], [(w, r) for w, c, r in rows if c == "asyncio"],
           [(w, r) for w, c, r in rows if c == "wake"], [(w, r) for w, c, r in rows if c == "steps"])


def command_line():
    """This run's arguments, without --out and its value."""
    argv, out = sys.argv[1:], []
    for i, a in enumerate(argv):
        if not (a.startswith("--out") or (i > 0 and argv[i - 1] == "--out")):
            out.append(a)
    return out


def report(args, rows, asyncio_runs, wakes, steps):
    lines = ["# Workers: tinyq's helpers beside huey, liteque and plainjob", "",
             "Written by `bench/workers.py%s` on %s (%s, %d cores, Python %s, SQLite via Debian's "
             "python3). One process, prefilled queue, no-op handler; best of %d rounds, run round-robin. "
             "Load average (1 min) %.1f at the start, %.1f at the end; CPU time per job is the whole "
             "process's (every thread), from the worker's start to the last job's end." % (
                 "".join(" " + a for a in command_line()),
                 time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), platform.machine(),
                 os.cpu_count(), platform.python_version(), SIZES["quick" if args.quick else "full"]["repeats"],
                 args.load_at_start, os.getloadavg()[0]), "",
             "| worker | 1 thread / c=1 | 8 threads / c=8 |", "|---|---|---|"]
    names = []
    for name, _, _ in rows:
        if name not in names:
            names.append(name)
    for name in names:
        by_c = {c: r for w, c, r in rows if w == name}
        lines.append("| %s | %s | %s |" % (name, rate(by_c.get(1)), rate(by_c.get(8))))
    lines += ["", "asyncio: `AsyncQueue.work`, handlers that each `await asyncio.sleep(0.2)`, "
              "concurrency 1,000, one process (the ideal is 5,000 jobs/s):", ""]
    for label, result in asyncio_runs:
        lines.append("- %s: %s" % (label, rate(result)))
    lines += ["", "Kept steps (issue 25): %s jobs, each handler keeps a %.1f s model call's answer as a "
              "step (`run.step`), the helpers at their default durability (synchronous=FULL: a kept step "
              "is on disk before the handler goes on); huey runs the same call as a task whose result it "
              "keeps. The ideal at concurrency 1,000 is 5,000 jobs/s (200 threads: 1,000 jobs/s):" % (
                  "{:,}".format(SIZES["quick" if args.quick else "full"]["steps"]), STEP_SLEEP), ""]
    for label, result in steps:
        lines.append("- %s: %s" % (label, rate(result)))
    lines += ["", "Node idle wake-up: median from `tq_add` on another connection to the handler's "
              "start, the worker idle in between:", ""]
    for label, result in wakes:
        extra = "" if not result or "error" in result else " (p90 %.2f ms, max event-loop stall %.1f ms)" % (
            result["p90_ms"], result["stall_ms"])
        lines.append("- %s: %s%s" % (label, rate(result), extra))
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
