#!/usr/bin/python3
"""The soak: many real processes on one store for a long while, audited from tq_watch.

    /usr/bin/python3 tests/support/soak.py [--seconds 600]      (make soak)
    tests/test_soak.py runs it for 60 s inside make test.

On queue `soak` (lease 3s, concurrency 6, rate 60/1s, group_concurrency 2, backoff 50ms,
dedupe and keep of 20 s, so that the store must stay bounded by sweeping):
- producers: one Python (tinyq.Queue) and one Node process add jobs of every kind (ok,
  steps with progress, retry, snooze, error, fail) in 5 groups, some delayed, some with a
  priority, while the backlog is under 150, and cancel some recent ones;
- 8 workers (5 Python `Queue.work`, 3 Node `work`, 2 handlers each), one SIGKILLed at
  random every few seconds and started again, except one Python and one Node worker that
  live through the whole run (so their memory is watched for all of it);
- a schedule on the queue, `@every 2s` (where the build has schedules), removed at the end;
- this process: tails tq_watch (the audit's only source), reads each done job's result,
  `tq_retry`s every job that failed for good, sweeps, and samples every process's RSS and
  the file's size.
At the end producers stop, the backlog drains, workers get SIGTERM, and the audit checks:
every job added ends done or cancelled (nothing lost, nothing stuck); each event once, in
order; each done once; the schedule's jobs: about one per 2 s, none after its removal; no step's work done again by an attempt after the one whose answer was kept (no
double effect); at no point more running than concurrency (per queue and per group), nor
more starts in a second than the rate; every process's memory and the file stay bounded.
"""
import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # tests/, for helpers.py
from helpers import EXT, connect  # noqa: E402

QUEUE = "soak"
CONCURRENCY, RATE, GROUP_CONCURRENCY = 6, (60, 1000), 2
FINAL = ("done", "cancelled")
SCHEDULE = "tick"
MB = 1 << 20
PATIENCE = 180          # seconds a step of the run may take on a loaded machine before it fails


class Soak:
    """`settings`: the queue's (default: the soak's); `env`: added to every child's
    environment; `kill`: SIGKILL workers at random; `operator`: this process also retries
    failed jobs and sweeps (it runs on the real clock)."""

    def __init__(self, seconds, folder, seed=1, out=print, settings=None, env=None, kill=True,
                 operator=True):
        self.seconds, self.folder, self.out = seconds, folder, out
        self.env, self.kill, self.operator = env or {}, kill, operator
        self.expect_ticks = not env      # on a moved clock a schedule runs by that clock
        # Short enough that the store must stay bounded by sweeping, long enough that this
        # process, reading tq_watch on a loaded machine, is never that far behind.
        ret = "20s"
        self.settings = settings or {
            "lease": "3s", "concurrency": CONCURRENCY, "rate": f"{RATE[0]}/1s",
            "group_concurrency": GROUP_CONCURRENCY, "backoff": "50ms", "backoff_max": "1s",
            "dedupe": ret, "keep": ret}
        count, per = self.settings["rate"].split("/")
        self.rate = (int(count), {"1s": 1000, "1m": 60_000}[per])
        self.rnd = random.Random(seed)
        self.db = os.path.join(folder, "soak.db")
        self.stop_file = os.path.join(folder, "stop")
        self.procs = {}         # pid -> dict(popen, kind, role, log)
        self.events, self.since = [], 0
        self.results = {}       # id -> result of its done event
        self.retried = set()
        self.kills = 0
        self.rss = {}           # pid -> [(t, kB)]
        self.sizes = []         # (t, bytes of db + wal)
        self.spawned = 0
        self.bad_exits = []

    # ---- processes
    def spawn(self, kind, role):
        self.spawned += 1
        log = os.path.join(self.folder, f"{role}-{kind}-{self.spawned}.log")
        env = dict(os.environ, TINYQ_EXT=EXT, **self.env)
        seed = str(self.rnd.randrange(1 << 30))
        if kind == "py":
            args = ["/usr/bin/python3", os.path.join(HERE, "soak_worker.py"), role, self.db, log, seed]
        else:
            args = ["node", os.path.join(HERE, "soak_worker.js"), role, self.db, log, seed]
        if role == "producer":
            args.append(self.stop_file)
        err = open(log + ".err", "w")
        p = subprocess.Popen(args, env=env, stdout=err, stderr=err)
        err.close()
        self.procs[p.pid] = dict(popen=p, kind=kind, role=role, log=log)
        return p

    def live_workers(self, killable=False):
        return [i for i in self.procs.values() if i["role"] == "worker" and i["popen"].poll() is None
                and not (killable and i.get("spared"))]

    def reap(self):
        for info in self.procs.values():
            rc = info["popen"].poll()
            if rc not in (None, 0, -signal.SIGKILL) and not info.get("reported"):
                info["reported"] = True
                self.bad_exits.append((info["kind"], info["role"], rc, open(info["log"] + ".err").read()[-1500:]))

    def kill_one(self):
        victim = self.rnd.choice(self.live_workers(killable=True))
        victim["popen"].send_signal(signal.SIGKILL)
        victim["popen"].wait()
        victim["killed_at"] = time.monotonic()
        self.kills += 1
        self.spawn(victim["kind"], "worker")

    # ---- observing
    def tail(self, conn):
        while True:
            batch = conn.execute("SELECT seq, id, state, attempt, at, detail FROM tq_watch(?, ?)",
                                 (self.since, QUEUE)).fetchall()
            if not batch:
                return
            for seq, jid, state, attempt, at, detail in batch:
                self.events.append((seq, jid, state, attempt, at, detail))
                if state == "done":
                    job = conn.execute("SELECT tq_get(?)", (jid,)).fetchone()[0]
                    if job is not None:
                        self.results[jid] = json.loads(job)["result"]
                elif state == "failed" and jid not in self.retried and self.operator:
                    self.retried.add(jid)
                    conn.execute("SELECT tq_retry(?)", (jid,)).fetchone()
            self.since = batch[-1][0]

    def sample(self, t):
        for pid, info in self.procs.items():
            if info["popen"].poll() is None:
                try:
                    with open(f"/proc/{pid}/status") as f:
                        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                except (OSError, StopIteration):
                    continue
                self.rss.setdefault(pid, []).append((t, kb))
        size = sum(os.path.getsize(self.db + s) for s in ("", "-wal") if os.path.exists(self.db + s))
        self.sizes.append((t, size))
        live = [self.rss[p][-1][1] for p, i in self.procs.items() if i["popen"].poll() is None and p in self.rss]
        self.out(f"soak t={t:5.0f}s events={len(self.events):6d} kills={self.kills:3d} "
                 f"file={size / MB:5.1f} MB  RSS MB: " + " ".join(f"{kb / 1024:.0f}" for kb in live))

    # ---- the run
    def start(self):
        self.conn = connect(self.db, busy_ms=60_000)     # a starved machine's writers are slow
        self.conn.execute("SELECT tq_queue(?, ?)", (QUEUE, json.dumps(self.settings))).fetchone()
        # A schedule on the queue, where this build has schedules: a job every 2 s.
        self.ticks_at_unschedule = None
        self.schedule = self.conn.execute(
            "SELECT 1 FROM pragma_function_list WHERE name = 'tq_schedule'").fetchone() is not None
        if self.schedule:
            self.conn.execute("SELECT tq_schedule(?, ?, '@every 2s', ?, ?)",
                              (SCHEDULE, QUEUE, json.dumps({"k": "ok"}), json.dumps({"group": "g0"}))).fetchone()
        for kind in ("py", "js"):
            self.spawn(kind, "producer")
        for n, kind in enumerate(["py"] * 5 + ["js"] * 3):
            p = self.spawn(kind, "worker")
            if n in (0, 5):         # one Python and one Node worker live through the whole run
                self.procs[p.pid]["spared"] = True
        self.t0 = time.monotonic()

    def loop(self, seconds, tick=None):
        """Tail, kill, sweep and sample for `seconds`; `tick(t)` is called on every round, and
        the loop ends early once it returns true."""
        end = time.monotonic() + seconds
        next_kill = time.monotonic() + self.rnd.uniform(2, 5)
        next_sample = next_sweep = time.monotonic()
        while time.monotonic() < end:
            now = time.monotonic()
            if tick is not None and tick(now - self.t0):
                return
            self.tail(self.conn)
            self.reap()
            assert not self.bad_exits, f"a process failed: {self.bad_exits}"
            if self.kill and now >= next_kill:
                self.kill_one()
                next_kill = now + self.rnd.uniform(2, 5)
            if self.operator and now >= next_sweep:
                self.conn.execute("SELECT tq_sweep()").fetchone()
                next_sweep = now + 2
            if now >= next_sample:
                self.sample(now - self.t0)
                next_sample = now + (5 if self.seconds <= 120 else 30)
            time.sleep(0.2)

    def drain(self, timeout=PATIENCE):
        """Producers stop, the schedule is removed; wait until every job added is done or cancelled."""
        open(self.stop_file, "w").close()
        if self.schedule:
            self.conn.execute("SELECT tq_unschedule(?)", (SCHEDULE,)).fetchone()
            self.tail(self.conn)
            self.ticks_at_unschedule = len(self.ticks())
        for info in self.procs.values():
            if info["role"] == "producer":
                info["popen"].wait(timeout=PATIENCE)
        added = self.added()
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            self.tail(self.conn)
            if all(self.final_state(j) in FINAL for j in added):
                break
            time.sleep(0.3)
        self.sample(time.monotonic() - self.t0)

    def started(self, info):
        """Whether a process is past its start: its first log line is written once it can
        take a SIGTERM as a request to stop (a busy machine can take seconds to get there)."""
        try:
            with open(info["log"]) as f:
                return f.readline().endswith("\n")
        except FileNotFoundError:
            return False

    def shutdown(self):
        open(self.stop_file, "w").close()
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline and not all(self.started(i) for i in self.live_workers()):
            time.sleep(0.1)
        for info in self.live_workers():
            info["popen"].send_signal(signal.SIGTERM)
        for info in self.procs.values():
            try:
                info["popen"].wait(timeout=PATIENCE)
            except subprocess.TimeoutExpired:
                info["popen"].kill()
                info["popen"].wait()
        self.reap()
        if getattr(self, "conn", None) is not None:
            self.tail(self.conn)
            self.conn.close()
            self.conn = None

    def run(self, enough=lambda soak: True):
        """The whole soak: `seconds` of work, and then on until `enough(self)` holds (a busy
        machine does less in a second), for at most four times `seconds`."""
        try:
            self.start()
            self.loop(4 * self.seconds, lambda t: t >= self.seconds and enough(self))
            self.ran_s = round(time.monotonic() - self.t0)
            self.drain()
        finally:
            self.shutdown()
        return self.audit()

    # ---- the audit
    def records(self, role=None):
        for info in self.procs.values():
            if role is not None and info["role"] != role or not os.path.exists(info["log"]):
                continue        # (a process killed before it opened its log did nothing)
            with open(info["log"]) as f:
                for line in f:
                    if line.endswith("\n"):
                        yield json.loads(line)

    def added(self):
        """Every job added: by the producers (their logs), and by the schedule (its ids)."""
        jobs = {r["id"]: r for r in self.records("producer") if r["ev"] == "add"}
        jobs.update((j, {"id": j, "kind": "ok", "group": "g0"}) for j in self.ticks())
        return jobs

    def ticks(self):
        return sorted({e[1] for e in self.events if e[1].startswith(SCHEDULE + "@")})

    def final_state(self, jid):
        states = self._by_id().get(jid)
        return states[-1][2] if states else None

    def _by_id(self):
        if getattr(self, "_by_id_n", None) != len(self.events):
            by = {}
            for e in self.events:
                if e[2] != "progress":
                    by.setdefault(e[1], []).append(e)
            self._by_id_cache, self._by_id_n = by, len(self.events)
        return self._by_id_cache

    def audit(self):
        problems = []
        assert not self.bad_exits, f"a process failed: {self.bad_exits}"
        added = self.added()
        seqs = [e[0] for e in self.events]
        assert seqs == sorted(set(seqs)), "tq_watch gave an event twice or out of order"
        skipped = sum(b - a - 1 for a, b in zip(seqs, seqs[1:]))
        assert not skipped, f"{skipped} events were swept before they were read (this process fell `keep` behind)"
        unknown = {e[1] for e in self.events} - set(added)
        assert not unknown, f"events for ids no producer added: {sorted(unknown)[:5]}"
        not_final = {j: self.final_state(j) for j in added if self.final_state(j) not in FINAL}
        assert not not_final, f"{len(not_final)} jobs lost or stuck: {list(not_final.items())[:5]}"
        cancels = {r["id"] for r in self.records("producer") if r["ev"] == "cancel" and r["r"] == 1}
        cancelled = {j for j in added if self.final_state(j) == "cancelled"}
        assert cancelled == cancels, "cancelled jobs differ from the cancels that returned 1"
        done_twice = [j for j, evs in self._by_id().items() if sum(1 for e in evs if e[2] == "done") > 1]
        assert not done_twice, f"jobs done twice: {done_twice[:5]}"
        # limits, replayed in commit order
        running, starts, most, most_group, most_rate = {}, [], 0, 0, 0
        for seq, jid, state, attempt, at, _ in self.events:
            if state == "progress":
                continue
            running.pop(jid, None)
            if state == "running":
                group = added[jid]["group"]
                running[jid] = group
                starts.append(at)
                most = max(most, len(running))
                most_group = max(most_group, sum(1 for g in running.values() if g == group))
                in_window = sum(1 for t in starts[-self.rate[0] - 5:] if at - self.rate[1] < t <= at)
                most_rate = max(most_rate, in_window)
        assert most <= self.settings["concurrency"], f"{most} running at once"
        assert most_group <= self.settings["group_concurrency"], f"{most_group} running in one group"
        assert most_rate <= self.rate[0], f"{most_rate} starts within {self.rate[1]} ms"
        # steps: no attempt after the one whose answer was kept did the work again
        effects = {}
        for r in self.records("worker"):
            if r["ev"] == "effect":
                effects.setdefault((r["id"], r["step"]), []).append(r["attempt"])
        step_jobs = [j for j, r in added.items() if r["kind"] == "steps" and self.final_state(j) == "done"]
        redone = earlier = unread = reused = 0
        for j in step_jobs:
            res = self.results.get(j)
            if res is None:
                unread += 1
                continue
            res = json.loads(res) if isinstance(res, str) else res
            for step in ("a", "b"):
                kept_attempt = int(res[step].split(":")[0])
                done_at = effects.get((j, step), [])
                assert kept_attempt in done_at, f"{j} step {step}: kept answer from an attempt that never did it"
                redone += sum(1 for a in done_at if a > kept_attempt)
                reused += self._by_id()[j][-1][3] > kept_attempt     # a later attempt got it back
                earlier += sum(1 for a in done_at if a < kept_attempt)
        assert redone == 0, f"{redone} steps done again after their answer was kept"
        assert unread <= max(2, len(step_jobs) // 50), f"{unread} step jobs' results not read in time"
        # memory and size
        for pid, series in self.rss.items():
            kbs = [kb for _, kb in series]
            assert max(kbs) < 400 * 1024, f"process {pid} reached {max(kbs) / 1024:.0f} MB"
            if len(kbs) >= 4:
                base = kbs[len(kbs) // 3]
                assert kbs[-1] <= base * 1.5 + 30 * 1024, f"process {pid} grew: {kbs}"
        sizes = [s for _, s in self.sizes]
        assert max(sizes) < 100 * MB, f"the file reached {max(sizes) / MB:.0f} MB"
        if len(sizes) >= 4:
            base = max(sizes[len(sizes) // 3], 1)
            assert sizes[-1] <= 2 * base + 8 * MB, f"the file kept growing: {sizes}"
        # the schedule: one job per due time, each done once (above); none after its removal
        ticks = self.ticks()
        if self.schedule:
            assert len(ticks) == self.ticks_at_unschedule, "the schedule added jobs after tq_unschedule"
            if self.expect_ticks:
                assert len(ticks) >= 0.8 * self.seconds / 2, f"only {len(ticks)} jobs from a 2 s schedule"
        # handlers really running at once (the workers' monotonic clocks); a SIGKILL ends its
        # process's runs when it lands
        opened, edges = {}, []
        for r in self.records("worker"):
            key = (r["pid"], r.get("id"), r.get("attempt"))
            if r["ev"] == "run":
                opened[key] = r["t"]
            elif r["ev"] == "ran" and key in opened:
                edges += [(opened.pop(key), 1), (r["t"], -1)]
        for (pid, _, _), t in opened.items():
            edges += [(t, 1), (self.procs[pid].get("killed_at", float("inf")), -1)]
        edges.sort()
        overlap = most_overlap = 0
        for _, d in edges:
            overlap += d
            most_overlap = max(most_overlap, overlap)
        whole_run = {f"{i['role']}-{i['kind']}" + ("-spared" if i.get("spared") else ""):
                     [round(self.rss[pid][k][1] / 1024) for k in (0, len(self.rss[pid]) // 3, -1)]
                     for pid, i in self.procs.items() if (i["role"] == "producer" or i.get("spared"))
                     and pid in self.rss}
        starts_by_lang = {}
        for e in self.events:
            if e[2] == "running":
                pid = int(str(e[5]).rsplit(":", 1)[-1]) if e[5] else None
                lang = self.procs[pid]["kind"] if pid in self.procs else "?"
                starts_by_lang[lang] = starts_by_lang.get(lang, 0) + 1
        kinds = {}
        for r in added.values():
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        by_lang = {k: sum(1 for r in self.records("producer") if r["ev"] == "add" and
                          self.procs[r["pid"]]["kind"] == k) for k in ("py", "js")}
        return dict(seconds=self.seconds, ran_s=getattr(self, "ran_s", None), added=len(added), by_lang=by_lang, kinds=kinds,
                    done=sum(1 for j in added if self.final_state(j) == "done"), cancelled=len(cancelled),
                    retried=len(self.retried), kills=self.kills, processes=self.spawned,
                    schedule_jobs=len(ticks) if self.schedule else "no schedules in this build",
                    events=len(self.events), starts_by_worker_lang=starts_by_lang, most_running=most, most_handlers_at_once=most_overlap, most_in_group=most_group,
                    most_starts_per_s=most_rate, step_jobs=len(step_jobs), steps_redone=redone,
                    steps_by_killed_attempts=earlier, steps_given_back_to_later_attempts=reused,
                    rss_mb_first_third_last=whole_run, max_rss_mb=round(max(kb for s in self.rss.values() for _, kb in s) / 1024),
                    max_file_mb=round(max(sizes) / MB, 1), final_file_mb=round(sizes[-1] / MB, 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the folder (logs, store)")
    a = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="tinyq-soak-")
    try:
        report = Soak(a.seconds, folder, a.seed, out=lambda s: print(s, flush=True)).run()
        print("soak passed: " + json.dumps(report))
    finally:
        if a.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
