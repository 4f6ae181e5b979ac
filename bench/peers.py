#!/usr/bin/python3
"""tinyq against its peers: the same workloads, the same SQLite file settings.

    /usr/bin/python3 bench/peers.py            # full run (a few minutes)
    /usr/bin/python3 bench/peers.py --quick    # smaller sizes (about half a minute)

Systems (bench/systems.py): the minimal hand-written SQL queue of bench/lifecycle.py
("baseline"), tinyq, honker (crate honker-extension, a SQLite loadable extension loaded
into the same driver), litequeue, persist-queue (SQLiteAckQueue) and huey (SqliteHuey).
Every store is a fresh file under bench/work/ in WAL mode with synchronous=NORMAL.

Workloads (bench/workloads.py has the details): one job per call, batches of 100,
claim cost vs backlog, 4 worker processes draining a queue (with duplicate and lost
job counts), tinyq with limits on vs off, and add -> start latency with a worker
waiting in another process. Each measurement runs in a process of its own, whose peak
memory (ru_maxrss) is reported next to it. Results go to bench/results/peers.md and
bench/results/peers-*.png.

The first run sets up what the peers need, under bench/work/ (gitignored):
  venv/         Debian's python3 with --system-site-packages: persist-queue, huey,
                matplotlib; the benchmark re-runs itself in it
  venv-py3.12/  litequeue 0.14 needs Python >= 3.12: a Python 3.12 found on the machine
                (pyenv's, linked to the same libsqlite3) gets a venv of its own; without
                one, litequeue's last 3.11 release (0.9) goes into venv/ instead
  peers/libhonker_ext.so
                honker-extension from crates.io, built with cargo (about 30 s once)
"""
import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
WORK = os.path.join(BENCH, "work")
RUNS = os.path.join(WORK, "peers")
RESULTS = os.path.join(BENCH, "results")
VENV = os.path.join(WORK, "venv")
VENV_PY = os.path.join(VENV, "bin", "python3")
VENV312 = os.path.join(WORK, "venv-py3.12")
VENV312_PY = os.path.join(VENV312, "bin", "python3")
PACKAGES = ["persist-queue==1.1.0", "huey==3.5.4", "matplotlib"]
LITEQUEUE = "litequeue==0.14"
LITEQUEUE_PY311 = "litequeue==0.9"  # the last release that installs on Python 3.11
HONKER_CRATE, HONKER_VERSION = "honker-extension", "0.5.0"
HONKER_SO = os.path.join(RUNS, "libhonker_ext.so")
TINYQ_SO = os.path.join(ROOT, "dist", "tinyq.so")
MALLOC = "glibc.malloc.trim_threshold=1073741824"  # as bench/lifecycle.py: less noise

ORDER = ["baseline", "tinyq", "honker", "litequeue", "persist-queue", "huey"]

SIZES = {
    "quick": dict(one=1_000, batch=5_000, repeats=2, backlogs=[1_000, 100_000], claims=300,
                  rounds=2, budget_s=0.5, drain=5_000, drain_repeats=1, latency=20, max_prefill_s=15,
                  timeout_s=120),
    "full": dict(one=10_000, batch=50_000, repeats=3, backlogs=[1_000, 100_000, 1_000_000],
                 claims=1_000, rounds=3, budget_s=10, drain=20_000, drain_repeats=2, latency=300,
                 max_prefill_s=240, timeout_s=900),
}


def log(msg, started=[time.monotonic()]):
    print("  .. %s (%.0fs)" % (msg, time.monotonic() - started[0]), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- setup

def sh(cmd, cwd=None):
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def stamped(directory, content):
    """True when directory/.peers-stamp holds `content` (the setup is up to date)."""
    try:
        with open(os.path.join(directory, ".peers-stamp")) as f:
            return f.read() == content
    except OSError:
        return False


def stamp(directory, content):
    with open(os.path.join(directory, ".peers-stamp"), "w") as f:
        f.write(content)


def python312():
    """A Python >= 3.12 on this machine that uses the same SQLite library, or None."""
    import sqlite3
    candidates = [shutil.which(n) for n in ("python3.12", "python3.13")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
    for exe in filter(None, candidates):
        try:
            out = subprocess.run([exe, "-c", "import sys, sqlite3; print(sys.version_info >= (3, 12),"
                                  " sqlite3.sqlite_version)"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.split() == ["True", sqlite3.sqlite_version]:
            return exe
    return None


def setup_venv():
    """The venv this benchmark runs in (created by Debian's python3, which can load
    extensions). Returns its python."""
    want = " ".join(PACKAGES)
    if not stamped(VENV, want):
        log("setting up %s: %s" % (os.path.relpath(VENV, ROOT), want))
        sh(["/usr/bin/python3", "-m", "venv", "--system-site-packages", VENV])
        sh([VENV_PY, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + PACKAGES)
        stamp(VENV, want)
    return VENV_PY


def setup_litequeue():
    """The python that runs litequeue: a 3.12 venv with 0.14, else venv/ with 0.9."""
    if stamped(VENV312, LITEQUEUE):
        return VENV312_PY
    if stamped(VENV, " ".join(PACKAGES) + " " + LITEQUEUE_PY311):
        return VENV_PY
    exe = python312()
    if exe:
        log("setting up %s with %s (%s)" % (os.path.relpath(VENV312, ROOT), LITEQUEUE, exe))
        sh([exe, "-m", "venv", VENV312])
        sh([VENV312_PY, "-m", "pip", "install", "-q", "--disable-pip-version-check", LITEQUEUE])
        stamp(VENV312, LITEQUEUE)
        return VENV312_PY
    log("no Python >= 3.12 here: installing %s into venv/" % LITEQUEUE_PY311)
    sh([VENV_PY, "-m", "pip", "install", "-q", "--disable-pip-version-check", LITEQUEUE_PY311])
    stamp(VENV, " ".join(PACKAGES) + " " + LITEQUEUE_PY311)
    return VENV_PY


def setup_honker():
    """Build honker-extension from its crates.io source (cargo fetch, then build)."""
    if os.path.exists(HONKER_SO):
        return
    log("building %s %s with cargo" % (HONKER_CRATE, HONKER_VERSION))
    scratch = os.path.join(WORK, "honker-fetch")
    os.makedirs(os.path.join(scratch, "src"), exist_ok=True)
    with open(os.path.join(scratch, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "honker-fetch"\nversion = "0.0.0"\nedition = "2021"\n'
                'publish = false\n\n[dependencies]\n%s = "=%s"\n' % (HONKER_CRATE, HONKER_VERSION))
    open(os.path.join(scratch, "src", "lib.rs"), "w").close()
    sh(["cargo", "fetch", "--quiet"], cwd=scratch)
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--quiet"],
                                     cwd=scratch, check=True, capture_output=True).stdout)
    manifest = next(p["manifest_path"] for p in meta["packages"] if p["name"] == HONKER_CRATE)
    src = os.path.join(WORK, "honker-src")
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(os.path.dirname(manifest), src)
    sh(["cargo", "build", "--release", "--locked", "--quiet"], cwd=src)
    os.makedirs(RUNS, exist_ok=True)
    shutil.copyfile(os.path.join(src, "target", "release", "libhonker_ext.so"), HONKER_SO)


# --------------------------------------------------------------------------- running

class Runner:
    """Runs one measurement per process and collects its result and peak memory."""

    def __init__(self, pythons, exts, timeout_s):
        self.pythons = pythons  # system -> interpreter
        self.exts = exts        # system -> extension path (without .so) or None
        self.timeout_s = timeout_s
        self.count = 0

    def run(self, workload, system, **spec):
        self.count += 1
        path = os.path.join(RUNS, "%s-%s-%d.db" % (system, workload, self.count))
        remove_store(path)
        spec.update(workload=workload, system=system, path=path, ext=self.exts.get(system))
        spec_path, out_path = path + ".spec.json", path + ".result.json"
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        env = dict(os.environ, GLIBC_TUNABLES=MALLOC)
        argv = [self.pythons[system], os.path.join(BENCH, "workloads.py"), spec_path, out_path]
        pid = os.posix_spawn(argv[0], argv, env)
        deadline = time.monotonic() + self.timeout_s
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
            time.sleep(0.01)
        result = {"error": "exit status %d" % os.waitstatus_to_exitcode(status)}
        if os.path.exists(out_path):
            with open(out_path) as f:
                result = json.load(f)
            os.remove(out_path)
        result["rss_mb"] = usage.ru_maxrss / 1024
        os.remove(spec_path)
        remove_store(path)
        return result


def remove_store(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    for suffix in ("", "-wal", "-shm"):
        if os.path.isfile(path + suffix):
            os.remove(path + suffix)


def best_of(results, key, lowest=True):
    """The best of several results of one measurement (errors lose); peak memory is the
    largest seen, CPU the least."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return results[0]
    best = dict(min(ok, key=lambda r: r[key]) if lowest else max(ok, key=lambda r: r[key]))
    best["rss_mb"] = max(r["rss_mb"] for r in results)
    if "cpu" in best:
        best["cpu"] = min(r["cpu"] for r in ok)
    return best


def measure(runner, names, classes, size):
    """Every measurement, systems alternating where there are repeats."""
    started = time.monotonic()
    load_before = os.getloadavg()

    # 1. one job per call, 2. batches of 100: best of `repeats`, systems alternating
    one, bat = {n: [] for n in names}, {n: [] for n in names}
    for r in range(size["repeats"]):
        log("one job per call / batches of 100, round %d of %d" % (r + 1, size["repeats"]))
        for n in names:
            one[n].append(runner.run("one", n, n=size["one"]))
            if classes[n].BATCH:
                bat[n].append(runner.run("batch", n, n=size["batch"]))
    one = {n: best_of(v, "wall") for n, v in one.items()}
    bat = {n: best_of(v, "wall") if v else None for n, v in bat.items()}

    # 3. claim cost vs backlog; a backlog whose prefill would take too long is skipped
    cost = {n: {} for n in names}
    for backlog in size["backlogs"]:
        for n in names:
            smaller = [b for b in cost[n] if "error" not in cost[n][b]]
            if smaller:
                rate = smaller[-1] / max(cost[n][smaller[-1]]["prefill_s"], 1e-6)
                if backlog / rate > size["max_prefill_s"]:
                    log("skip backlog %d for %s: prefill would take ~%.0fs" % (backlog, n, backlog / rate))
                    continue
            log("claim cost: %s, backlog %d" % (n, backlog))
            cost[n][backlog] = runner.run("backlog", n, backlog=backlog, claims=size["claims"],
                                          rounds=size["rounds"], budget_s=size["budget_s"])

    # 4. four worker processes draining; 5. tinyq with limits on
    drain, limited = {n: [] for n in names}, []
    for r in range(size["drain_repeats"]):
        for n in names:
            if drain[n] and drain[n][0].get("wall", 0) > 20:
                continue  # a slow system is not repeated: its best of 1 stands
            log("4 workers draining %d: %s" % (size["drain"], n))
            drain[n].append(runner.run("drain", n, n=size["drain"], workers=4))
        if "tinyq" in names:
            log("4 workers draining %d: tinyq with limits" % size["drain"])
            limited.append(runner.run("drain", "tinyq", n=size["drain"], workers=4, limits=True))
    worst = {n: {k: max(r.get(k, 0) for r in v) for k in ("duplicates", "lost", "busy_retries")}
             for n, v in drain.items()}
    drain = {n: best_of(v, "wall") for n, v in drain.items()}
    limited_worst = {k: max(r.get(k, 0) for r in limited) for k in ("duplicates", "lost", "group_overlaps")} if limited else {}
    limited = best_of(limited, "wall") if limited else None

    # 6. add -> start latency
    lat = {}
    for n in names:
        log("add -> start latency: %s" % n)
        lat[n] = runner.run("latency", n, samples=size["latency"])

    total = time.monotonic() - started
    return dict(one=one, bat=bat, cost=cost, drain=drain, worst=worst, limited=limited,
                limited_worst=limited_worst, lat=lat, total=total, load_before=load_before)


# --------------------------------------------------------------------------- report

def fmt_rate(r):
    if r is None:
        return "n/a"
    if "error" in r:
        return "error"
    return "%.0f" % (r["jobs"] / r["wall"])


def fmt_ratio(r, base):
    if r is None or base is None or "error" in r or "error" in base:
        return "n/a"
    return "%.2f" % ((r["jobs"] / r["wall"]) / (base["jobs"] / base["wall"]))


def fmt_mb(r):
    return "n/a" if r is None else "%.0f" % r["rss_mb"]


def report(results, names, classes, size, mode, lq_py, exts):
    """The markdown report, as a list of lines."""
    import sqlite3
    one, bat, cost, drain, worst, limited, limited_worst, lat = (results[k] for k in (
        "one", "bat", "cost", "drain", "worst", "limited", "limited_worst", "lat"))

    # ------------------------------------------------------------------ versions, machine
    versions = {}
    for n in names:
        cls = classes[n]
        if n == "tinyq":
            versions[n] = cls.version(exts["tinyq"])
        elif n == "litequeue":
            versions[n] = subprocess.run(
                [lq_py, "-c", "import sys; sys.path.insert(0, %r); import systems; print(systems.Litequeue.version())"
                 % BENCH], capture_output=True, text=True).stdout.strip()
        else:
            versions[n] = cls.version()
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break

    out = []

    def emit(line=""):
        out.append(line)

    base = lambda table: table.get("baseline")  # noqa: E731
    emit("# tinyq and its peers (%s run)" % mode)
    emit()
    emit("- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
    emit("- machine: %d cores (%s), %s; load average %s before, %s after" % (
        len(os.sched_getaffinity(0)), cpu, platform.platform(),
        " ".join("%.2f" % x for x in results["load_before"]), " ".join("%.2f" % x for x in os.getloadavg())))
    emit("- SQLite %s for every system, through Python's sqlite3 module: Python %s (Debian's)%s"
         % (sqlite3.sqlite_version, platform.python_version(),
            "; litequeue under Python %s (same libsqlite3)" % subprocess.run(
                [lq_py, "-c", "import platform; print(platform.python_version())"],
                capture_output=True, text=True).stdout.strip() if lq_py != VENV_PY else ""))
    emit("- versions: " + "; ".join(versions[n] for n in names))
    emit("- file settings: WAL, synchronous=NORMAL, a fresh file per measurement; "
         "each measurement in a process of its own (peak memory = its ru_maxrss)")
    emit("- malloc: %s (as bench/lifecycle.py)" % MALLOC)
    emit()

    emit("## 1. Full lifecycle, one job per call (%d jobs, best of %d)" % (size["one"], size["repeats"]))
    emit()
    emit("add; claim 1; settle (done/ack) -- each its own call and transaction.")
    emit()
    emit("| system | jobs/s | vs baseline | add µs | claim µs | settle µs | CPU µs/job | peak MB |")
    emit("|---|---|---|---|---|---|---|---|")
    for n in names:
        r = one[n]
        if "error" in r:
            emit("| %s | error | | | | | | %s |" % (n, fmt_mb(r)))
            continue
        emit("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %s |" % (
            n, fmt_rate(r), fmt_ratio(r, base(one)), r["us"]["add"], r["us"]["claim"],
            r["us"]["settle"], r["cpu"] / r["jobs"] * 1e6, fmt_mb(r)))
    emit()

    emit("## 2. Batches of 100 (%d jobs, best of %d)" % (size["batch"], size["repeats"]))
    emit()
    emit("add 100 in one transaction; claim 100; settle 100 in one transaction. "
         "litequeue is partial: its pop() claims one message per transaction.")
    emit()
    emit("| system | batch API | jobs/s | vs baseline | add µs/job | claim µs/job | settle µs/job | peak MB |")
    emit("|---|---|---|---|---|---|---|---|")
    for n in names:
        r = bat[n]
        if r is None:
            emit("| %s | none | n/a | n/a | | | | |" % n)
        elif "error" in r:
            emit("| %s | %s | error | | | | | %s |" % (n, classes[n].BATCH, fmt_mb(r)))
        else:
            emit("| %s | %s | %s | %s | %.1f | %.1f | %.1f | %s |" % (
                n, classes[n].BATCH, fmt_rate(r), fmt_ratio(r, base(bat)), r["us"]["add"],
                r["us"]["claim"], r["us"]["settle"], fmt_mb(r)))
    emit()

    emit("## 3. Claim cost vs backlog: claim 1 + settle, µs (mean of %d, best of %d rounds)"
         % (size["claims"], size["rounds"]))
    emit()
    emit("One job is added (untimed) before each claim, so the backlog stays constant. "
         "Backlogs are prefilled in large transactions (honker, litequeue, persist-queue, "
         "huey: the rows their add inserts, inserted directly, as setup). A backlog whose "
         "prefill would take over %d s is skipped; * marks a cost measured on fewer claims: "
         "a round stops after %s s, and is then the last." % (size["max_prefill_s"], size["budget_s"]))
    emit()
    heads = ["%d waiting" % b for b in size["backlogs"]]
    emit("| system | " + " | ".join(heads) + " | largest/smallest | peak MB (largest) |")
    emit("|---|" + "---|" * (len(heads) + 2))
    for n in names:
        cells, ok = [], []
        for b in size["backlogs"]:
            r = cost[n].get(b)
            if r is None:
                cells.append("skipped")
            elif "error" in r:
                cells.append("error")
            else:
                short = r["claims"] < size["claims"] * size["rounds"]
                cells.append("%.1f%s" % (r["us"], "*" if short else ""))
                ok.append(b)
        ratio = "%.2f" % (cost[n][ok[-1]]["us"] / cost[n][ok[0]]["us"]) if len(ok) > 1 else "-"
        emit("| %s | %s | %s | %s |" % (n, " | ".join(cells), ratio,
                                       fmt_mb(cost[n][ok[-1]]) if ok else "-"))
    emit()

    emit("## 4. Four worker processes draining %d jobs (best of %d)" % (size["drain"], size["drain_repeats"]))
    emit()
    emit("Prefilled queue; 4 processes, each with its own connection, claim 1 + settle until "
         "the queue is empty. Every execution is logged by job number: duplicates = "
         "executions beyond one per job, lost = jobs never executed (worst over the runs). "
         "A system whose first run took over 20 s is not run again.")
    emit()
    emit("| system | jobs/s | vs baseline | duplicates | lost | busy retries | peak MB (largest process) |")
    emit("|---|---|---|---|---|---|---|")
    for n in names:
        r = drain[n]
        emit("| %s | %s | %s | %s | %s | %s | %s |" % (
            n, fmt_rate(r), fmt_ratio(r, base(drain)), worst[n]["duplicates"], worst[n]["lost"],
            worst[n]["busy_retries"], fmt_mb(r)))
    emit()

    emit("## 5. Limits on vs off: 4 workers draining %d jobs" % size["drain"])
    emit()
    emit("tinyq with limits: queue concurrency 8, jobs spread over 100 groups with "
         "group_concurrency 1; group overlaps = pairs of runs of one group that overlapped "
         "in time (must be 0). Limits off is section 4's run. The peers have no claim-time "
         "concurrency or group limits.")
    emit()
    emit("| system | limits off jobs/s | limits on jobs/s | on/off | duplicates | lost | group overlaps |")
    emit("|---|---|---|---|---|---|---|")
    for n in names:
        if n == "tinyq" and limited:
            emit("| tinyq | %s | %s | %s | %d | %d | %d |" % (
                fmt_rate(drain[n]), fmt_rate(limited), fmt_ratio(limited, drain[n]),
                limited_worst["duplicates"], limited_worst["lost"], limited_worst["group_overlaps"]))
        else:
            emit("| %s | %s | n/a | n/a | n/a | n/a | n/a |" % (n, fmt_rate(drain[n])))
    emit()

    emit("## 6. add -> start latency, worker waiting in another process (%d jobs)" % size["latency"])
    emit()
    emit("One job at a time, each added 2-10 ms after the previous one started (so the worker "
         "is back to waiting); latency = from the add call to the worker holding the job. "
         "Worker CPU = its CPU time over the test's wall time (100% = one core busy).")
    emit()
    emit("| system | how the worker waits | median ms | p99 ms | worker CPU while waiting | peak MB |")
    emit("|---|---|---|---|---|---|")
    for n in names:
        r = lat[n]
        if "error" in r:
            emit("| %s | %s | error | error | | %s |" % (n, classes[n].WAKE, fmt_mb(r)))
        else:
            emit("| %s | %s | %.2f | %.2f | %.0f%% | %s |" % (
                n, classes[n].WAKE, r["median_ms"], r["p99_ms"], r["worker_cpu"] * 100, fmt_mb(r)))
    emit()

    if "tinyq" in names:
        emit("## Where tinyq is behind")
        emit()
        emit("Generated: every measurement where a system beat tinyq by more than 10% "
             "(smaller differences are within this machine's noise). Why, what was fixed and "
             "what remains: bench/README.md, \"Why tinyq is behind where it is\".")
        emit()
        behind = []
        ahead = lambda theirs, ours: theirs > ours * 1.1  # noqa: E731
        rate = lambda r: r["jobs"] / r["wall"] if r and "error" not in r else None  # noqa: E731
        for label, table in (("one job per call", one), ("batches of 100", bat), ("4 workers draining", drain)):
            t = rate(table["tinyq"])
            for n in names:
                if n != "tinyq" and t and rate(table.get(n)) and ahead(rate(table[n]), t):
                    behind.append("- %s: %s %.0f jobs/s vs tinyq %.0f (tinyq at %.2fx)"
                                  % (label, n, rate(table[n]), t, t / rate(table[n])))
        for b in size["backlogs"]:
            t = cost["tinyq"].get(b)
            for n in names:
                r = cost[n].get(b)
                if n != "tinyq" and t and r and "error" not in t and "error" not in r and ahead(t["us"], r["us"]):
                    behind.append("- claim cost at %d waiting: %s %.1f µs vs tinyq %.1f µs" % (b, n, r["us"], t["us"]))
        t = lat.get("tinyq")
        for n in names:
            r = lat[n]
            if n != "tinyq" and t and "error" not in t and "error" not in r and ahead(t["median_ms"], r["median_ms"]):
                behind.append("- latency: %s median %.2f ms vs tinyq %.2f ms" % (n, r["median_ms"], t["median_ms"]))
        t = one.get("tinyq")
        for n in names:
            if n != "tinyq" and t and ahead(t["rss_mb"], one[n]["rss_mb"]) and t["rss_mb"] - one[n]["rss_mb"] > 2:
                behind.append("- peak memory, one job per call: %s %.0f MB vs tinyq %.0f MB" % (n, one[n]["rss_mb"], t["rss_mb"]))
        emit("\n".join(behind) if behind else "- nowhere in this run")
        emit()

    emit("Total benchmark time: %.0f s" % results["total"])
    return out


# --------------------------------------------------------------------------- plots

def plots(names, results, folder):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    one, bat, drain, worst, cost, lat = (results[k] for k in ("one", "bat", "drain", "worst", "cost", "lat"))

    def rate(r):
        return r["jobs"] / r["wall"] if r and "error" not in r else 0

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, (title, table) in zip(axes, (("one job per call", one), ("batches of 100", bat),
                                         ("4 worker processes draining", drain))):
        values = [rate(table.get(n)) for n in names]
        bars = ax.bar(names, values, color=["#888" if n == "baseline" else "#d62728" if n == "tinyq"
                                            else "#1f77b4" for n in names])
        for n, bar, v in zip(names, bars, values):
            label = "%.0f" % v if v else "n/a"
            if table is drain and worst[n]["duplicates"]:
                label += "\n%d duplicates" % worst[n]["duplicates"]
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, v),
                        ha="center", va="bottom", fontsize=8)
        ax.set_title(title)
        ax.set_ylabel("jobs/s (higher is better)")
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle("Throughput, same SQLite file settings (WAL, synchronous=NORMAL)")
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "peers-throughput.png"), dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n in names:
        points = sorted((b, r["us"]) for b, r in cost[n].items() if "error" not in r)
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=n,
                    linewidth=3 if n == "tinyq" else 1.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("waiting jobs (backlog)")
    ax.set_ylabel("claim 1 + settle, µs (lower is better)")
    ax.set_title("Claim cost vs backlog")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "peers-backlog.png"), dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ok = [n for n in names if "error" not in lat[n]]
    x = range(len(ok))
    ax.bar([i - 0.2 for i in x], [lat[n]["median_ms"] for n in ok], width=0.4, label="median")
    ax.bar([i + 0.2 for i in x], [lat[n]["p99_ms"] for n in ok], width=0.4, label="p99")
    ax.set_xticks(list(x))
    ax.set_xticklabels(ok, rotation=30)
    ax.set_yscale("log")
    ax.set_ylabel("add -> start, ms (lower is better)")
    ax.set_title("Latency with a worker waiting in another process")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "peers-latency.png"), dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about half a minute)")
    parser.add_argument("--only", help="comma-separated systems to run (default: all)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "peers.md"), help="markdown results")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args()

    os.makedirs(RUNS, exist_ok=True)
    venv_py = setup_venv()
    if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        os.execv(venv_py, [venv_py, os.path.abspath(__file__)] + sys.argv[1:])
    lq_py = setup_litequeue()
    setup_honker()
    if not os.path.exists(TINYQ_SO):
        sys.exit("%s is missing: run `make` first" % TINYQ_SO)
    # a private copy, so that a rebuild of dist/tinyq.so during the run changes nothing
    shutil.copyfile(TINYQ_SO, os.path.join(RUNS, "tinyq.so"))

    sys.path.insert(0, BENCH)
    import systems

    mode = "quick" if args.quick else "full"
    size = SIZES[mode]
    names = [n for n in ORDER if not args.only or n in args.only.split(",")]
    pythons = {n: venv_py for n in names}
    pythons["litequeue"] = lq_py
    exts = {"tinyq": os.path.join(RUNS, "tinyq"), "honker": HONKER_SO[:-3]}
    runner = Runner(pythons, exts, size["timeout_s"])
    classes = {n: systems.SYSTEMS[n] for n in names}
    results = measure(runner, names, classes, size)
    lines = report(results, names, classes, size, mode, lq_py, exts)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not args.no_plots:
        plots(names, results, os.path.dirname(os.path.abspath(args.out)))
    print("\nwrote %s" % os.path.relpath(args.out), file=sys.stderr)



if __name__ == "__main__":
    main()
