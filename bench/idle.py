#!/usr/bin/python3
"""What idle workers cost, and how soon an add wakes them: 1, 20 and 100 idle queues in
one process (Python threads, asyncio, Node), with the helpers' default settings, served
two ways: "separate", one `work()` call per queue (`Queue.work`, `AsyncQueue.work`, Node
`Queue.work`), and "one work()", one call for all of them (`tinyq.Worker`,
`tinyq.AsyncWorker`, Node `Worker`; not in builds before it existed).

    /usr/bin/python3 bench/idle.py                   # full run (about four minutes)
    /usr/bin/python3 bench/idle.py --quick
    /usr/bin/python3 bench/idle.py --before main     # also the extension and helpers of that commit
    /usr/bin/python3 bench/idle.py --kinds node --counts 20    # only those

CPU: the worker process's CPU time (all its threads, getrusage / process.cpuUsage) over
a fixed window once every work() is idle, as a share of one core. Latency: from just
before an add by another process (this script) to the handler's start, over adds spread
at random over the queues, 20-40 ms apart; median and p99. `--before REV` builds the
extension of that commit (git archive, cargo, under bench/work/) and measures it, with
the helpers of that commit, in the same run.
Results: bench/results/idle.md.
"""
import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
WORK = os.path.join(BENCH, "work")
RESULTS = os.path.join(BENCH, "results")
PY = "/usr/bin/python3"

SIZES = {
    "quick": dict(window=2.0, adds=40, counts=(1, 20, 100)),
    "full": dict(window=5.0, adds=200, counts=(1, 20, 100)),
}
KINDS = ("threads", "asyncio", "node")
MODES = ("separate", "one work()")


def log(msg, started=[time.monotonic()]):
    print("  .. %s (%.0fs)" % (msg, time.monotonic() - started[0]), file=sys.stderr, flush=True)


def build_before(rev):
    """The extension and helpers as of `rev`: its sources (git archive) built in
    bench/work/before-ext-COMMIT/ (a target dir of their own)."""
    commit = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    src = os.path.join(WORK, "before-ext-" + commit)
    so = os.path.join(src, "tinyq.so")
    if not os.path.exists(so):
        log("building the extension of %s" % rev)
        os.makedirs(src, exist_ok=True)
        archive = subprocess.run(["git", "archive", rev, "src", "sql", "Cargo.toml", "Cargo.lock", "build.rs",
                                  "python/tinyq", ":(glob)node/*.js"], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        target = os.path.join(WORK, "target-before")
        subprocess.run(["nice", "cargo", "build", "--release", "--lib", "--target-dir", target], cwd=src, check=True)
        shutil.copy(os.path.join(target, "release", "libtinyq.so"), so)
    return dict(ext=so, python=os.path.join(src, "python"), node=os.path.join(src, "node"))


# --------------------------------------------------------------------------- the worker process

def child(spec):
    """Starts spec.n idle work() calls, prints the CPU line, then one line with the
    latencies once spec.adds jobs have started."""
    sys.path.insert(0, spec["python"])
    import resource
    import threading
    import tinyq
    queues = ["q%d" % i for i in range(spec["n"])]
    lat, lock, done = [], threading.Lock(), threading.Event()

    def started(payload):
        with lock:
            lat.append(time.time() * 1000 - payload["t"])
            if len(lat) == spec["adds"]:
                done.set()

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def measure():
        time.sleep(1.0)   # every work() has found its queue empty and sleeps
        c0, t0 = cpu(), time.monotonic()
        time.sleep(spec["window"])
        print(json.dumps({"cpu": (cpu() - c0) / (time.monotonic() - t0)}), flush=True)

    if spec["kind"] == "threads" and spec["mode"] == "one":
        worker = tinyq.Worker(spec["path"], {name: lambda p, run: started(p) for name in queues})
        thread = threading.Thread(target=worker.work)
        thread.start()
        measure()
        done.wait()
        worker.stop()
        thread.join()
    elif spec["kind"] == "threads":
        qs = [tinyq.Queue(spec["path"], name) for name in queues]
        threads = [threading.Thread(target=q.work, args=(lambda p, run: started(p),)) for q in qs]
        for t in threads:
            t.start()
        measure()
        done.wait()
        for q in qs:
            q.stop()
        for t in threads:
            t.join()
    else:
        import asyncio

        async def main():
            qs = [tinyq.AsyncQueue(spec["path"], name) for name in queues]

            async def handler(payload, run):
                started(payload)

            if spec["mode"] == "one":
                qs = [tinyq.AsyncWorker(spec["path"], {name: handler for name in queues})]
            works = [asyncio.ensure_future(q.work()) if spec["mode"] == "one" else
                     asyncio.ensure_future(q.work(handler)) for q in qs]
            await asyncio.get_running_loop().run_in_executor(None, measure)
            await asyncio.get_running_loop().run_in_executor(None, done.wait)
            for q in qs:
                q.stop()
            await asyncio.gather(*works)

        asyncio.run(main())
    print(json.dumps({"lat": lat}), flush=True)


# --------------------------------------------------------------------------- one measurement

def measure(build, kind, n, sizes, mode):
    """(CPU share of one core, latencies in ms) for n idle work() calls of `kind` with
    `build`'s extension and helpers."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "idle.db")
        private = os.path.join(tmp, "tinyq.so")   # a rebuild during the run changes nothing
        shutil.copy(build["ext"], private)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.enable_load_extension(True)
        conn.load_extension(private[:-3])
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("SELECT tq_add('other', '{}')")   # the store exists before the workers start
        spec = dict(kind=kind, n=n, mode=mode, path=path, window=sizes["window"], adds=sizes["adds"],
                    python=build["python"], node=build["node"])
        env = dict(os.environ, TINYQ_EXT=private[:-3])
        if kind == "node":
            cmd = ["node", os.path.join(BENCH, "idle_node.js"), json.dumps(spec)]
            env["NODE_PATH"] = os.path.join(ROOT, "node", "node_modules")
        else:
            cmd = [PY, os.path.abspath(__file__), "--child", json.dumps(spec)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
        try:
            cpu = json.loads(proc.stdout.readline())["cpu"]
            rnd = random.Random(n)
            for i in range(sizes["adds"]):
                time.sleep(rnd.uniform(0.02, 0.04))
                conn.execute("SELECT tq_add(?, ?)", ("q%d" % rnd.randrange(n), json.dumps({"t": time.time() * 1000})))
            lat = json.loads(proc.stdout.readline())["lat"]
        finally:
            proc.wait(timeout=120)
            conn.close()
    return cpu, lat


def command_line(argv):
    """The run's options as the results say them: all but --out (where they went)."""
    shown, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--out"):
            skip = arg == "--out"
            continue
        shown.append(" " + arg)
    return "".join(shown)


def p99(xs):
    return statistics.quantiles(xs, n=100, method="inclusive")[98]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--before", help="also measure the extension and helpers of this commit")
    parser.add_argument("--out", default=os.path.join(RESULTS, "idle.md"))
    parser.add_argument("--child")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which helpers (comma-separated)")
    parser.add_argument("--counts", help="how many idle queues (comma-separated; default 1,20,100)")
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))
    sizes = SIZES["quick" if args.quick else "full"]
    builds = [("now", dict(ext=os.path.join(ROOT, "dist", "tinyq.so"), python=os.path.join(ROOT, "python"),
                           node=os.path.join(ROOT, "node")))]
    if args.before:
        builds.insert(0, ("%s (before)" % args.before, build_before(args.before)))
    rows = []
    load_before = os.getloadavg()[0]
    counts = [int(c) for c in args.counts.split(",")] if args.counts else sizes["counts"]
    for kind in args.kinds.split(","):
        for n in counts:
            for name, build in builds:
                for mode in MODES if name == "now" else MODES[:1]:
                    log("%s, %d idle queues, %s, %s" % (kind, n, name, mode))
                    cpu, lat = measure(build, kind, n, sizes, mode)
                    rows.append((kind, n, name, mode, cpu, statistics.median(lat), p99(lat)))
    lines = ["# Idle workers: CPU and wake-up latency", "",
             "`/usr/bin/python3 bench/idle.py%s` on %s, %d cores, %s, load average %.1f at the start and %.1f at the end (other work "
             "on the machine inflates the latencies). CPU over %.0f s once idle; latency over %d adds "
             "from another process (add to handler start)." % (
                 command_line(sys.argv[1:]),
                 platform.platform(), os.cpu_count(), time.strftime("%Y-%m-%d"), load_before, os.getloadavg()[0],
                 sizes["window"], sizes["adds"]),
             "", "| helper | idle queues | build | work() calls | CPU (% of a core) | latency median (ms) | p99 (ms) |",
             "|---|---:|---|---|---:|---:|---:|"]
    lines += ["| %s | %d | %s | %s | %.1f | %.2f | %.2f |" % (row[:4] + (100 * row[4], row[5], row[6]))
              for row in rows]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
