#!/usr/bin/python3
"""tinyq on a three-node dqlite cluster: `make test-cluster` runs this.

Starts three dqlite nodes (Debian's `dqlite-demo`, go-dqlite 1.11 over libdqlite) on
127.0.0.1 with tinyq on every connection they open (tests/cluster/tinyq_preload.c, an
LD_PRELOAD shim), and drives them with Debian's `dqlite` shell, which runs each SELECT
inside an explicit BEGIN ... COMMIT. It checks:

1. a job added through one node's address is claimed through another's and settled
   through a third, and all three nodes hold it;
2. workers claiming and settling through the cluster finish every job, while
3. the leader is killed with SIGKILL mid-work: the survivors elect a new leader and
   finish; no acknowledged add is lost; no job is settled by two attempts, and the
   attempt that settled it is its current one; every job's events count its attempts
   (one `running` event per attempt, in order, then `done`); no (id, attempt) is handed
   to two workers;
4. the killed node is restarted, catches up, and all three nodes' copies of every
   tinyq table are identical (read through dqlite's per-node `.dump`).

Every node it starts is stopped by its process id (SIGTERM, then SIGKILL), even when a
check fails. Exit status 0 means every check passed.

    /usr/bin/python3 tests/cluster/run_cluster.py [--jobs 60] [--workers 3] [--keep]
"""
import argparse
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXT = os.environ.get("TINYQ_EXT", os.path.join(ROOT, "dist", "tinyq.so"))
DB = "tq"          # the dqlite database name
QUEUE = "work"
LEASE = "3s"       # leases of attempts lost with the leader run out this fast


def log(*a):
    print("[%6.2fs]" % (time.monotonic() - T0), *a, flush=True)


T0 = time.monotonic()


# ---------------------------------------------------------------- dependencies

def ensure_deps():
    missing = []
    for tool, pkg in (("dqlite-demo", "go-dqlite"), ("dqlite", "go-dqlite"), ("gcc", "gcc")):
        if shutil.which(tool) is None and pkg not in missing:
            missing.append(pkg)
    if not os.path.exists("/usr/lib/x86_64-linux-gnu/libdqlite.so.0") and \
            subprocess.run(["dpkg", "-s", "libdqlite0"], capture_output=True).returncode != 0:
        missing.append("libdqlite0")
    if missing:
        log("installing:", " ".join(missing))
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq"] + missing, check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
                       stdout=subprocess.DEVNULL)
    if not os.path.exists(EXT):
        sys.exit("no extension at %s: run `make` first" % EXT)


def build_shim(work):
    out = os.path.join(work, "tinyq_preload.so")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", out,
                    os.path.join(HERE, "tinyq_preload.c"), "-ldl"], check=True)
    return out


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


# ---------------------------------------------------------------- the cluster

class Node:
    def __init__(self, i, work, shim, db_port, api_port, join):
        self.i = i
        self.addr = "127.0.0.1:%d" % db_port
        self.api = "127.0.0.1:%d" % api_port
        self.dir = os.path.join(work, "node%d" % i)
        self.logpath = os.path.join(work, "node%d.log" % i)
        self.shim = shim
        self.join = join
        self.proc = None
        os.makedirs(self.dir, exist_ok=True)

    def start(self):
        cmd = ["dqlite-demo", "-a", self.api, "-d", self.addr, "-D", self.dir]
        if self.join:
            cmd += ["-j", self.join]
        env = dict(os.environ, LD_PRELOAD=self.shim, TINYQ_EXT=EXT, GO_DQLITE_MULTITHREAD="1")
        logf = open(self.logpath, "ab")
        self.proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        logf.close()
        log("node%d started: pid %d, %s" % (self.i, self.proc.pid, self.addr))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        log("node%d: SIGKILL pid %d" % (self.i, self.proc.pid))
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if not self.alive():
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def shell(servers, sql, timeout=20):
    """Runs one statement through the dqlite shell. Returns (ok, rows, error text)."""
    try:
        p = subprocess.run(["dqlite", "-s", ",".join(servers), DB, sql],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, [], "timeout"
    if p.returncode != 0:
        return False, [], (p.stderr.strip().splitlines() or ["rc %d" % p.returncode])[0]
    rows = [line.split("|") for line in p.stdout.splitlines() if line != ""]
    return True, rows, ""


def until(what, fn, timeout):
    end = time.monotonic() + timeout
    while True:
        r = fn()
        if r:
            return r
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.2)


def voters(servers):
    ok, rows, _ = shell(servers, ".cluster", timeout=5)
    return ok and sum(1 for r in rows if r[-1] == "voter")


def leader(servers):
    ok, rows, _ = shell(servers, ".leader", timeout=5)
    return rows[0][0] if ok and rows else None


def dump(node, into, via):
    """This node's own copy of the database, as a plain SQLite file (dqlite's DUMP)."""
    os.makedirs(into, exist_ok=True)
    for f in os.listdir(into):
        os.unlink(os.path.join(into, f))
    p = subprocess.run(["dqlite", "-s", ",".join(via), DB, ".dump %s %s" % (node.addr, DB)],
                       cwd=into, capture_output=True, text=True, timeout=20)
    if p.returncode != 0 or "OK" not in p.stdout:
        raise AssertionError("dump of node%d failed: %s %s" % (node.i, p.stdout, p.stderr))
    return os.path.join(into, DB)


def tables(path):
    """Every tinyq_* table of a dumped copy (a scratch file), as sorted rows."""
    con = sqlite3.connect(path)
    out = {}
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'tinyq_%' ORDER BY name"):
        out[name] = sorted(con.execute('SELECT * FROM "%s"' % name).fetchall(), key=repr)
    con.close()
    return out


# ---------------------------------------------------------------- the checks

def check_cross_node(nodes, work):
    a, b, c = nodes
    ok, rows, err = shell([c.addr], "SELECT tq_add('%s', 'hello', '{\"id\": \"cross:1\"}')" % "cross")
    assert ok and rows == [["cross:1"]], (ok, rows, err)
    ok, rows, err = shell([a.addr], "SELECT id, attempt, payload FROM tq_claim('cross', 'far-worker', 5)")
    assert ok and rows == [["cross:1", "1", "hello"]], (ok, rows, err)
    ok, rows, err = shell([b.addr], "SELECT tq_settle('cross:1', 1, 'done', 'seen')")
    assert ok and rows == [["1"]], (ok, rows, err)
    for n in nodes:
        # A follower applies a commit once it hears the commit index: soon, not at once.
        def done_here():
            t = tables(dump(n, os.path.join(work, "cross%d" % n.i), [n.addr]))
            return [r for r in t.get("tinyq_jobs", []) if r[1] == "cross:1" and r[3] == "done"]
        until("node%d to hold the settled job" % n.i, done_here, 10)
    log("check 1 ok: added via node%d, claimed via node%d, settled via node%d, present on all three"
        % (c.i, a.i, b.i))


class Run:
    def __init__(self, nodes, n_jobs, n_workers):
        self.nodes = nodes
        self.n_jobs = n_jobs
        self.n_workers = n_workers
        self.lock = threading.Lock()
        self.added = set()        # ids whose add was acknowledged
        self.adds_done = threading.Event()
        self.claims = []          # (worker, id, attempt) acknowledged claims
        self.settles = []         # (worker, id, attempt, returned) acknowledged settles
        self.ambiguous = []       # settles that never got an answer
        self.errors = 0
        self.settled_ok = 0
        self.stop = threading.Event()

    def servers(self, k):
        addrs = [n.addr for n in self.nodes]
        return addrs[k % 3:] + addrs[:k % 3]

    def error(self, what, err):
        with self.lock:
            self.errors += 1
            n = self.errors
        if n <= 8 or n % 25 == 0:
            log("error #%d (%s): %s" % (n, what, err[:160]))

    def adder(self):
        for k in range(self.n_jobs):
            jid = "job:%03d" % k
            sql = "SELECT tq_add('%s', '%d', '{\"id\": \"%s\"}')" % (QUEUE, k, jid)
            while not self.stop.is_set():
                ok, rows, err = shell(self.servers(k), sql)
                if ok and rows == [[jid]]:
                    with self.lock:
                        self.added.add(jid)
                    break
                self.error("add " + jid, err or repr(rows))
                time.sleep(0.2)
            time.sleep(0.01)
        self.adds_done.set()

    def worker(self, w):
        name = "w%d" % w
        rnd = random.Random(w)
        idle = 0
        while not self.stop.is_set():
            ok, rows, err = shell(self.servers(w),
                                  "SELECT id, attempt FROM tq_claim('%s', '%s', 2, '{\"lease\": \"%s\"}')"
                                  % (QUEUE, name, LEASE))
            if not ok:
                self.error("claim " + name, err)
                time.sleep(0.2)
                continue
            if not rows:
                if self.adds_done.is_set():
                    idle += 1
                    if idle % 5 == 0 and self.all_done():
                        return
                time.sleep(0.1)
                continue
            idle = 0
            for jid, attempt in rows:
                with self.lock:
                    self.claims.append((name, jid, int(attempt)))
                time.sleep(rnd.uniform(0.02, 0.12))    # the work
                self.settle(name, jid, int(attempt))

    def settle(self, name, jid, attempt):
        sql = "SELECT tq_settle('%s', %d, 'done', '%s:%d')" % (jid, attempt, name, attempt)
        for _ in range(40):
            if self.stop.is_set():
                break
            ok, rows, err = shell(self.servers(attempt), sql)
            if ok:
                with self.lock:
                    self.settles.append((name, jid, attempt, rows[0][0]))
                    if rows[0][0] == "1":
                        self.settled_ok += 1
                return
            self.error("settle %s/%d" % (jid, attempt), err)
            time.sleep(0.2)
        with self.lock:
            self.ambiguous.append((name, jid, attempt))

    def all_done(self):
        ok, rows, _ = shell(self.servers(0),
                            "SELECT count(*) FROM tinyq_jobs WHERE queue = '%s' AND status = 'done'" % QUEUE)
        return ok and int(rows[0][0]) >= len(self.added)


def check_work(run, work, kill_after):
    threads = [threading.Thread(target=run.adder)] + \
              [threading.Thread(target=run.worker, args=(w,)) for w in range(run.n_workers)]
    t_start = time.monotonic()
    for t in threads:
        t.start()
    killed = None
    try:
        until("work to be under way", lambda: run.settled_ok >= kill_after, 40)
        addr = leader([n.addr for n in run.nodes])
        killed = next(n for n in run.nodes if n.addr == addr)
        log("leader is node%d; %d adds acknowledged, %d jobs settled so far"
            % (killed.i, len(run.added), run.settled_ok))
        t_kill = time.monotonic()
        killed.kill()
        survivors = [n.addr for n in run.nodes if n is not killed]
        new = until("a new leader", lambda: leader(survivors), 30)
        log("new leader %s after %.2fs" % (new, time.monotonic() - t_kill))
        for t in threads:
            t.join(timeout=max(1, 60 - (time.monotonic() - t_start)))
        if any(t.is_alive() for t in threads):
            raise AssertionError("workers did not finish within 60 s")
    finally:
        run.stop.set()
        for t in threads:
            t.join()
    log("work finished in %.2fs: %d adds, %d claims, %d settles (%d applied), %d client errors retried"
        % (time.monotonic() - t_start, len(run.added), len(run.claims), len(run.settles),
           run.settled_ok, run.errors))
    return killed


def check_final(run, killed, work):
    # The killed node comes back with its data directory and catches up.
    killed.start()
    addrs = [n.addr for n in run.nodes]
    until("three voters again", lambda: voters(addrs) == 3, 30)

    def same():
        try:
            copies = [tables(dump(n, os.path.join(work, "final%d" % n.i), addrs)) for n in run.nodes]
        except AssertionError:     # the restarted node does not answer yet
            return None
        return copies if copies[0] == copies[1] == copies[2] else None
    copies = until("identical copies on all three nodes", same, 30)
    log("check 4 ok: the three nodes' copies of %d tinyq tables are identical" % len(copies[0]))
    t = copies[0]

    jobs = {r[1]: r for r in t["tinyq_jobs"] if r[2] == QUEUE}
    cols = [c for c in ("seq id queue status grp priority run_at attempt tries budget lease_until "
                        "deadline started_at worker holder payload result error").split()]
    J = {jid: dict(zip(cols, r)) for jid, r in jobs.items()}

    # No acknowledged add lost; every job finished.
    lost = sorted(run.added - set(J))
    assert not lost, "acknowledged adds lost: %s" % lost
    assert len(J) == run.n_jobs, (len(J), run.n_jobs)
    not_done = sorted(j for j, r in J.items() if r["status"] != "done")
    assert not not_done, "jobs not done: %s" % [(j, J[j]["status"]) for j in not_done]

    # No (id, attempt) handed to two workers; no job settled twice.
    seen = {}
    for w, jid, a in run.claims:
        assert (jid, a) not in seen, "%s attempt %d claimed by %s and %s" % (jid, a, seen[(jid, a)], w)
        seen[(jid, a)] = w
    applied = {}
    for w, jid, a, r in run.settles:
        if r == "1":
            assert jid not in applied, "%s settled twice: %s and %s" % (jid, applied[jid], (w, a))
            applied[jid] = (w, a)

    # The attempt that settled a job is its current attempt, and it is the one that did it.
    for jid, r in J.items():
        result = r["result"].decode() if isinstance(r["result"], bytes) else str(r["result"])
        w, a = result.split(":")
        assert int(a) == r["attempt"], "%s done by attempt %s but its attempt is %d" % (jid, a, r["attempt"])
        assert w == r["worker"], (jid, w, r["worker"])
        if jid in applied:
            assert applied[jid] == (w, int(a)), (jid, applied[jid], result)
        else:
            # Its settle's answer was lost with the leader (or was a 0 after a retry).
            assert (w, jid, int(a)) in run.ambiguous or any(
                s[:3] == (w, jid, int(a)) for s in run.settles), (jid, result)
        if (jid, int(a)) in seen:
            assert seen[(jid, int(a))] == w, (jid, a, seen[(jid, int(a))], w)

    # On dqlite's VFS tinyq records no lease holder (DUR-02: leases simply run out).
    assert all(r["holder"] is None for r in J.values()), "a lease holder was recorded"
    assert not t.get("tinyq_holders"), t.get("tinyq_holders")

    # Events: one running event per attempt, in order, then done; nothing after done.
    ev = {}
    for seq, jid, queue, state, attempt, at, detail, *_ in t["tinyq_events"]:   # *_: prev (schema 7)
        if queue == QUEUE:
            ev.setdefault(jid, []).append((seq, state, attempt))
    reclaimed = 0
    for jid, r in J.items():
        e = sorted(ev.get(jid, []))
        runs = [a for _, s, a in e if s == "running"]
        assert runs == list(range(1, r["attempt"] + 1)), (jid, e)
        assert e[-1][1] == "done" and e[-1][2] == r["attempt"], (jid, e)
        assert sum(1 for _, s, _ in e if s == "done") == 1, (jid, e)
        assert r["tries"] == r["attempt"], (jid, r["tries"], r["attempt"])
        reclaimed += r["attempt"] > 1
    log("check 2/3 ok: %d jobs done, each once, by its current attempt; %d needed a second "
        "attempt (leases lost with the leader ran out); events agree" % (len(J), reclaimed))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--kill-after", type=int, default=15, help="settled jobs before the leader is killed")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    ensure_deps()
    work = tempfile.mkdtemp(prefix="tinyq-cluster-")
    nodes = []
    ok = False
    try:
        shim = build_shim(work)
        ports = free_ports(6)
        first = "127.0.0.1:%d" % ports[0]
        for i in range(3):
            nodes.append(Node(i + 1, work, shim, ports[i], ports[3 + i], None if i == 0 else first))
            nodes[-1].start()
            if i == 0:
                until("node1 to answer", lambda: voters([first]) >= 1, 20)
        addrs = [n.addr for n in nodes]
        until("three voters", lambda: voters(addrs) == 3, 30)
        log("cluster up: 3 voters")
        ok_, rows, err = shell(addrs, "SELECT tq_version()")
        assert ok_ and rows, "tinyq is not loaded on the leader: %s" % err

        check_cross_node(nodes, work)
        run = Run(nodes, args.jobs, args.workers)
        killed = check_work(run, work, args.kill_after)
        check_final(run, killed, work)
        ok = True
    finally:
        for n in nodes:
            n.stop()
        if not ok:
            for n in nodes:
                try:
                    tail = open(n.logpath, errors="replace").read()[-1500:]
                    print("---- node%d log tail ----\n%s" % (n.i, tail))
                except OSError:
                    pass
        if args.keep or not ok:
            log("work directory kept:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
