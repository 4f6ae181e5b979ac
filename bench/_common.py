"""What bench/servers.py and bench/workers.py share: their progress log, the npm packages
they install under bench/work/, a failed child's error line, and keeping the best of
several rounds of measurements."""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg, started=[time.monotonic()]):
    print("  .. %s (%.0fs)" % (msg, time.monotonic() - started[0]), file=sys.stderr, flush=True)


def npm_install(folder, packages, name):
    """`packages` npm-installed into `folder` (a package.json called `name`), again only when
    the list differs from the last install's (folder/.stamp)."""
    stamp = os.path.join(folder, ".stamp")
    want = " ".join(packages)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    log("npm install %s into %s" % (want, os.path.relpath(folder, ROOT)))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "package.json"), "w") as f:
        json.dump({"name": name, "private": True}, f)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"] + packages,
                   cwd=folder, check=True, stdout=subprocess.DEVNULL)
    with open(stamp, "w") as f:
        f.write(want)


def child_error(stderr, returncode):
    """What a measuring process that failed said: its first line naming an error, else its
    first line, else its exit status."""
    lines = stderr.strip().splitlines()
    return ([line for line in lines if "rror" in line] or lines or ["exit %s" % returncode])[0].strip()[:160]


def better(a, b):
    """The better of two results of one measurement: a result beats an error (or none); a
    latency (p50_ms or median_ms) by the lower median, a drain by the higher rate, jobs done
    over seconds (a run stopped at its cap did fewer jobs)."""
    if a is None or "error" in a:
        return b
    if "error" in b:
        return a
    for median in ("p50_ms", "median_ms"):
        if median in a:
            return a if a[median] <= b[median] else b
    return a if a["jobs"] / a["seconds"] >= b["jobs"] / b["seconds"] else b


def best_of(plan, repeats, measure):
    """measure(item, round) for every item of `plan`, `repeats` rounds, round-robin so that the
    machine's noise falls on all of them alike; the best result of each item, in plan order."""
    best = [None] * len(plan)
    for r in range(repeats):
        for i, item in enumerate(plan):
            best[i] = better(best[i], measure(item, r))
    return best
