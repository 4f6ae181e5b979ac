"""One measurement of bench/peers.py, run in a fresh process of its own.

    python bench/workloads.py SPEC.json RESULT.json

SPEC names the workload, the system, the store path and the sizes; the result is a
JSON object. peers.py starts one process per measurement and reads its peak memory
(ru_maxrss) from wait4, so each number comes with the memory of the process that
produced it (for multi-process workloads: the largest of its processes).

Workloads:
  one        add; claim 1; settle -- each its own call (autocommit where the system
             allows), n jobs
  batch      add 100 in one transaction; claim 100; settle 100 in one transaction
  backlog    claim 1 + settle with a constant backlog of waiting jobs (one job is
             added, untimed, before each claim); best of `rounds` means
  drain      `workers` processes drain n prefilled jobs, claim 1 + settle each; every
             execution is logged, so duplicates and lost jobs are counted; with
             `limits`, tinyq runs with concurrency 8 and jobs spread over 100 groups
             with group_concurrency 1, and overlapping runs in a group are counted
  latency    one worker process waits (the system's WAKE) while this process adds one
             job at a time; add -> start latency per job, and the share of one CPU the
             worker used meanwhile (what its way of waiting costs)
"""
import json
import multiprocessing
import os
import random
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import systems  # noqa: E402

GROUPS = 100
BUSY = ("locked", "busy")


def open_system(spec):
    return systems.SYSTEMS[spec["system"]](spec["path"], spec.get("ext"))


def retry_busy(fn, *args):
    """Run fn, retrying on SQLITE_BUSY / 'database is locked'. Returns (value, retries)."""
    retries = 0
    while True:
        try:
            return fn(*args), retries
        except sqlite3.OperationalError as exc:
            if not any(word in str(exc).lower() for word in BUSY) or retries > 1000:
                raise
            retries += 1
            time.sleep(0.001)


# --------------------------------------------------------------------- single process

def one(spec):
    q = open_system(spec)
    n = spec["n"]
    t_add = t_claim = t_settle = 0.0
    clock = time.perf_counter
    cpu = time.process_time()
    start = clock()
    for i in range(n):
        t0 = clock()
        q.add(i)
        t1 = clock()
        job = q.claim()
        t2 = clock()
        assert job is not None and q.number(job) == i, job
        q.settle(job)
        t3 = clock()
        t_add += t1 - t0
        t_claim += t2 - t1
        t_settle += t3 - t2
    wall = clock() - start
    cpu = time.process_time() - cpu
    q.close()
    return {"wall": wall, "cpu": cpu, "jobs": n,
            "us": {"add": t_add / n * 1e6, "claim": t_claim / n * 1e6, "settle": t_settle / n * 1e6}}


def batch(spec, size=100):
    q = open_system(spec)
    batches = spec["n"] // size
    t_add = t_claim = t_settle = 0.0
    clock = time.perf_counter
    cpu = time.process_time()
    start = clock()
    for b in range(batches):
        t0 = clock()
        q.add_many(range(b * size, (b + 1) * size))
        t1 = clock()
        jobs = q.claim_many(size)
        t2 = clock()
        assert len(jobs) == size, len(jobs)
        q.settle_many(jobs)
        t3 = clock()
        t_add += t1 - t0
        t_claim += t2 - t1
        t_settle += t3 - t2
    wall = clock() - start
    cpu = time.process_time() - cpu
    q.close()
    n = batches * size
    return {"wall": wall, "cpu": cpu, "jobs": n,
            "us": {"add": t_add / n * 1e6, "claim": t_claim / n * 1e6, "settle": t_settle / n * 1e6}}


def checkpoint(spec):
    """Fold the WAL back into the file after a prefill, as bench/lifecycle.py does."""
    path = spec["path"]
    conn = sqlite3.connect(os.path.join(path, "data.db") if os.path.isdir(path) else path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def backlog(spec):
    """Rounds of `claims` claims; a round also ends once it has taken `budget_s`, and
    then it is the last (a system whose claims slow down with the backlog would take
    hours)."""
    q = open_system(spec)
    size = spec["backlog"]
    start = time.perf_counter()
    q.prefill(range(size))
    checkpoint(spec)
    prefill_s = time.perf_counter() - start
    clock = time.perf_counter
    best, claims = float("inf"), 0
    extra = size
    for _ in range(spec["rounds"]):
        spent, done = 0.0, 0
        while done < spec["claims"] and spent < spec["budget_s"]:
            q.add(extra)
            extra += 1
            t0 = clock()
            job = q.claim()
            assert job is not None
            q.settle(job)
            spent += clock() - t0
            done += 1
        best = min(best, spent / done * 1e6)
        claims += done
        if spent >= spec["budget_s"]:
            break
    q.close()
    return {"us": best, "prefill_s": prefill_s, "claims": claims}


# --------------------------------------------------------------------- several processes

def drain_worker(spec, barrier, out_path):
    """Claim 1 + settle until nothing is left; log (n, start, end) per execution."""
    q = open_system(spec)
    barrier.wait()
    log, retries = [], 0
    while True:
        job, r = retry_busy(q.claim)
        retries += r
        if job is None:
            left, r = retry_busy(q.pending)
            retries += r
            if not left:
                break
            q.wait(0.1)   # limits: the rest belongs to busy groups
            continue
        # The "work": note which job ran, and when. The span is taken after the claim
        # returned and before the settle is called, so it lies inside the lease.
        t0 = time.monotonic()
        n = q.number(job)
        t1 = time.monotonic()
        _, r = retry_busy(q.settle, job)
        retries += r
        log.append((n, t0, t1))
    q.close()
    with open(out_path, "w") as f:
        json.dump({"log": log, "retries": retries}, f)


def drain(spec):
    n, workers, limits = spec["n"], spec["workers"], spec.get("limits", False)
    q = open_system(spec)
    if limits:
        q.set_limits(concurrency=8, group_concurrency=1)
        for i in range(0, n, 10_000):
            q.add_many(range(i, min(n, i + 10_000)), groups=lambda k: "g%d" % (k % GROUPS))
    else:
        q.prefill(range(n))
    q.close()
    checkpoint(spec)

    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(workers + 1)
    outs = ["%s.worker%d.json" % (spec["path"], w) for w in range(workers)]
    procs = [ctx.Process(target=drain_worker, args=(spec, barrier, out)) for out in outs]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.monotonic()
    for p in procs:
        p.join()
    wall = time.monotonic() - start

    runs, retries, failed = [], 0, sum(1 for p in procs if p.exitcode != 0)
    for out in outs:
        if os.path.exists(out):
            with open(out) as f:
                data = json.load(f)
            runs += data["log"]
            retries += data["retries"]
            os.remove(out)
    counts = {}
    for job_n, _, _ in runs:
        counts[job_n] = counts.get(job_n, 0) + 1
    result = {"wall": wall, "jobs": n, "executions": len(runs), "distinct": len(counts),
              "duplicates": len(runs) - len(counts), "lost": n - len(counts),
              "busy_retries": retries, "failed_workers": failed}
    if limits:
        result["group_overlaps"] = group_overlaps(runs)
    return result


def group_overlaps(runs):
    """Pairs of executions of one group that ran at the same time (must be 0)."""
    by_group = {}
    for n, t0, t1 in runs:
        by_group.setdefault(n % GROUPS, []).append((t0, t1))
    overlaps = 0
    for spans in by_group.values():
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            overlaps += b0 < a1
    return overlaps


def latency_worker(spec, ready, conn):
    q = open_system(spec)
    ready.set()
    cpu, wall = time.process_time(), time.monotonic()
    while True:
        job = q.claim()
        if job is None:
            q.wait(1.0)
            continue
        started = time.monotonic()
        n = q.number(job)
        q.settle(job)
        conn.send((n, started))
        if n < 0:
            break
    conn.send((time.process_time() - cpu, time.monotonic() - wall))
    q.close()


def latency(spec):
    samples = spec["samples"]
    q = open_system(spec)
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    here, there = ctx.Pipe()
    worker = ctx.Process(target=latency_worker, args=(spec, ready, there))
    worker.start()
    ready.wait(30)
    rng = random.Random(1)
    times, lost = [], 0
    for i in range(samples + 1):
        time.sleep(rng.uniform(0.002, 0.010))   # let the worker go back to waiting
        n = i if i < samples else -1
        t_add = time.monotonic()
        q.add(n)
        if not here.poll(30):
            lost += 1
            break
        got, started = here.recv()
        assert got == n, (got, n)
        if n >= 0:
            times.append((started - t_add) * 1000)
    cpu_s, wall_s = here.recv() if here.poll(30) else (0, 1)
    worker.join(10)
    if worker.is_alive():
        worker.kill()
    q.close()
    times.sort()
    return {"ms": times, "median_ms": times[len(times) // 2],
            "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))], "lost": lost,
            "worker_cpu": cpu_s / wall_s}


WORKLOADS = {"one": one, "batch": batch, "backlog": backlog, "drain": drain, "latency": latency}


def main():
    spec_path, out_path = sys.argv[1:3]
    with open(spec_path) as f:
        spec = json.load(f)
    result = WORKLOADS[spec["workload"]](spec)
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
