"""DUR-01 under power cuts, simulated: what survives the machine losing power.

A mixed workload runs through apsw on a VFS (tests/support/cutvfs.py) that keeps, for the main
database, its -wal and its -journal, only what was synced. During the run the test takes
*cut images*: the files as a power cut at that instant would leave them,
- at every sync of every file, just before it (nothing pending is durable) and just after;
- at every return of a call;
- at random writes, keeping a random half of the writes not yet synced (a disk that wrote
  part of its cache, in any order).

The workload: adds (with ids, delays, priorities, groups), adds from a user trigger,
batches in BEGIN IMMEDIATE ... COMMIT, a rolled-back batch, claims, steps, progress,
settles of every outcome (also stale ones), cancels, retries, queue settings, sweeps,
explicit checkpoints of each kind, and tinyq's own checkpoints (wal_autocheckpoint 40).
After every call returns, the state seen through tinyq's functions is recorded: its
*fingerprint* (tq_jobs, every tq_watch event, the steps, the queues' settings and the
trigger's table).

Each cut image is then opened with the default VFS (as after a reboot) and must have:
`PRAGMA integrity_check` ok; the store's invariants (tests/test_fuzz.py's
`check_invariants`); and a fingerprint equal to the state after some call k, where
- synchronous=FULL: k is the last call that returned before the cut, or the one running
  (nothing that returned is lost);
- synchronous=NORMAL: k is any call up to that one (a suffix of what returned may be
  lost, never a hole: the store is exactly as it was after call k).
A sample of the images is then drained by a worker (clock moved 2 h on): every job ends
done or failed, none is stuck.
"""
import hashlib
import json
import os
import random
import sqlite3
import time

import pytest

from helpers import EXT, SO

apsw = pytest.importorskip("apsw", reason="python3-apsw is needed (make deps)")

from support.cutvfs import CutVFS, Disk, remove, scratch_dir  # noqa: E402
from test_fuzz import check_invariants  # noqa: E402

QUEUES = ("q", "lim", "mail", "short")
STEPS = ("a", "b")
HOUR = 3_600_000


# --------------------------------------------------------------------------- workload
class Workload:
    """One store, three apsw connections on the cut VFS: a producer, a worker, a reader."""

    def __init__(self, folder, vfs, sync, seed, journal="WAL"):
        self.path = os.path.join(folder, "store.db")
        self.rnd = random.Random(seed)
        self.sync, self.journal = sync, journal
        self.prod = self.open(vfs)
        self.work = self.open(vfs)
        self.reader = self.open(vfs)
        self.t_far = int(time.time() * 1000) + 2 * HOUR   # the clock fingerprints read at
        self.one(self.reader, "SELECT tq_clock(?)", self.t_far)
        self.held = []            # (id, attempt) claimed and not settled by us
        self.known = []           # every id we added (cancel / retry targets)
        self.ever_added = set()
        self.calls = 0            # calls that returned
        self.prints = [self.fingerprint()]   # prints[k]: the state after call k
        self.names = ["start"]

    def open(self, vfs):
        c = apsw.Connection(self.path, vfs=vfs)
        c.enableloadextension(True)
        c.loadextension(SO)
        c.enableloadextension(False)
        c.setbusytimeout(5000)
        c.execute(f"PRAGMA journal_mode={self.journal}").fetchall()
        c.execute(f"PRAGMA synchronous={self.sync}").fetchall()
        c.execute("PRAGMA wal_autocheckpoint=40").fetchall()
        return c

    @staticmethod
    def rows(conn, sql, *args):
        return conn.execute(sql, args).fetchall()

    def one(self, conn, sql, *args):
        r = self.rows(conn, sql, *args)
        return r[0][0] if r else None

    def fingerprint(self):
        return fingerprint_of(lambda sql, *a: self.rows(self.reader, sql, *a))

    def returned(self, name):
        self.calls += 1
        self.names.append(name)
        self.prints.append(self.fingerprint())

    # ---- the calls
    def add(self, conn=None):
        r = self.rnd
        queue = r.choice(("q", "q", "lim", "short"))
        opts = {}
        if r.random() < 0.3:
            opts["id"] = f"{queue}:{r.randrange(40)}"        # chosen ids: some dedupe
        if r.random() < 0.2:
            opts["delay"] = r.choice(("1h", 0, "10ms"))
        if r.random() < 0.3:
            opts["priority"] = r.randint(-2, 2)
        if queue == "lim" or r.random() < 0.2:
            opts["group"] = r.choice(("g1", "g2", "g3"))
        payload = json.dumps({"n": r.randrange(10**6)})
        jid = self.one(conn or self.prod, "SELECT tq_add(?, ?, ?)", queue, payload, json.dumps(opts))
        self.known.append(jid)
        self.ever_added.add(jid)

    def trigger_add(self):
        oid = f"o{len(self.ever_added)}-{self.rnd.randrange(10**6)}"
        self.prod.execute("INSERT INTO orders VALUES (?, ?)", (oid, self.rnd.randrange(100)))
        self.known.append("mail:" + oid)
        self.ever_added.add("mail:" + oid)

    def batch(self):
        self.prod.execute("BEGIN IMMEDIATE")
        for _ in range(self.rnd.randint(2, 4)):
            self.add()
        self.trigger_add()
        self.prod.execute("COMMIT")

    def rolled_back(self):
        self.prod.execute("BEGIN IMMEDIATE")
        jid = self.one(self.prod, "SELECT tq_add('q', '{}', '{\"id\": \"never\"}')")
        self.ever_added.add(jid)
        self.prod.execute("ROLLBACK")

    def claim(self):
        queue = self.rnd.choice(QUEUES)
        got = self.rows(self.work, "SELECT id, attempt FROM tq_claim(?, 'w', ?, '{\"lease\": \"1h\"}')",
                        queue, self.rnd.randint(1, 3))
        self.held.extend(got)

    def pick_held(self):
        return self.rnd.choice(self.held) if self.held else None

    def step(self):
        h = self.pick_held()
        if h is None:
            return self.claim()
        name = self.rnd.choice(STEPS)
        if self.one(self.work, "SELECT tq_step_get(?, ?)", h[0], name) is None:
            self.one(self.work, "SELECT tq_step_put(?, ?, ?, ?)", h[0], h[1], name, f"{name}@{h[1]}")

    def progress(self):
        h = self.pick_held()
        if h is None:
            return self.claim()
        self.one(self.work, "SELECT tq_progress(?, ?, ?)", h[0], h[1], json.dumps({"pct": self.rnd.randrange(100)}))

    def settle(self):
        h = self.pick_held()
        if h is None:
            return self.claim()
        outcome, value = self.rnd.choice([("done", '{"ok": 1}'), ("done", None), ("error", "boom"),
                                          ("retry", "0ms"), ("snooze", 0), ("fail", "bad")])
        args = h + (outcome,) + (() if value is None else (value,))
        self.one(self.work, f"SELECT tq_settle({', '.join('?' * len(args))})", *args)
        if self.rnd.random() < 0.9:     # sometimes keep it: a later settle of it is stale
            self.held.remove(h)

    def cancel(self):
        if self.known:
            jid = self.rnd.choice(self.known)
            self.one(self.prod, "SELECT tq_cancel(?)", jid)

    def retry(self):
        if self.known:
            self.one(self.prod, "SELECT tq_retry(?)", self.rnd.choice(self.known))

    def sweep(self):
        self.one(self.prod, "SELECT tq_sweep()")

    def checkpoint(self):
        mode = self.rnd.choice(("PASSIVE", "FULL", "RESTART", "TRUNCATE"))
        self.rows(self.prod, f"PRAGMA wal_checkpoint({mode})")

    def settings(self):
        self.one(self.prod, "SELECT tq_queue('lim', ?)",
                 json.dumps({"concurrency": self.rnd.randint(2, 4), "rate": "1000/1s",
                             "group_concurrency": self.rnd.randint(1, 2)}))

    MIX = [("add", 14), ("trigger_add", 5), ("batch", 4), ("rolled_back", 1), ("claim", 14),
           ("step", 8), ("progress", 5), ("settle", 14), ("cancel", 3), ("retry", 2),
           ("sweep", 3), ("checkpoint", 3), ("settings", 1)]

    def setup(self):
        self.prod.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, n INT)")
        self.returned("create table")
        self.prod.execute("CREATE TRIGGER orders_job AFTER INSERT ON orders BEGIN "
                          "SELECT tq_add('mail', json_object('order', NEW.id), "
                          "json_object('id', 'mail:' || NEW.id)); END")
        self.returned("create trigger")
        for queue, opts in (("q", {"backoff": "0ms"}), ("mail", {"lease": "1h"}),
                            ("short", {"dedupe": "1ms", "keep": "1ms", "backoff": "0ms"}),
                            ("lim", {"concurrency": 3, "rate": "1000/1s", "group_concurrency": 1})):
            self.one(self.prod, "SELECT tq_queue(?, ?)", queue, json.dumps(opts))
            self.returned(f"queue {queue}")

    def run(self, ncalls):
        self.setup()
        names = [n for n, _ in self.MIX]
        weights = [w for _, w in self.MIX]
        for _ in range(ncalls):
            name = self.rnd.choices(names, weights)[0]
            getattr(self, name)()
            self.returned(name)

    closed = False

    def close(self):
        for c in (self.prod, self.work, self.reader):
            c.close()
        self.closed = True


def fingerprint_of(rows):
    """What tinyq's functions show of the store, as a digest. `rows(sql, *args)` runs a query
    on a connection whose clock is pinned (so derived states do not move with time)."""
    if not rows("SELECT 1 FROM sqlite_master WHERE name = 'orders'"):
        orders = None
    else:
        orders = rows("SELECT * FROM orders ORDER BY id")
    jobs = rows("SELECT id, queue, state, group_key, priority, attempt, run_at, lease_until, worker, "
                "payload, result, error, progress, created_at, settled_at FROM tq_jobs ORDER BY id")
    events, since = [], 0
    while True:
        batch = rows("SELECT seq, id, queue, state, attempt, at, detail FROM tq_watch(?)", since)
        if not batch:
            break
        events.extend(batch)
        since = batch[-1][0]
    steps = [(j[0], s, rows("SELECT tq_step_get(?, ?)", j[0], s)[0][0]) for j in jobs for s in STEPS]
    queues = [rows("SELECT tq_queue(?)", q)[0][0] for q in QUEUES]
    text = repr((orders, [tuple(j) for j in jobs], [tuple(e) for e in events], steps, queues))
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- cuts
class Cuts:
    """Takes cut images during a run: at every sync (before and after), at every return of
    a call, and at a random share of the writes (with a random half of what is pending)."""

    def __init__(self, disk, folder, rnd, p_write):
        self.disk, self.folder, self.rnd, self.p_write = disk, folder, rnd, p_write
        self.wl = None
        self.images = {}     # image key -> folder
        self.cuts = []       # (image key, calls returned at the cut, what the cut was at)
        self.last_synced = None

    def take(self, at, partial):
        calls = self.wl.calls if self.wl is not None else 0
        if partial:
            key = f"p{len(self.images)}"
        else:
            key = f"v{self.disk.version}"     # the durable content changes only at syncs
        if key not in self.images:
            folder = os.path.join(self.folder, key)
            self.disk.image(folder, partial=self.rnd if partial else None)
            self.images[key] = folder
        self.cuts.append((key, calls, at))

    def on_event(self, kind, path):
        name = os.path.basename(path)
        if kind in ("presync", "postsync"):
            self.take(f"{kind} {name}", partial=False)
        elif kind == "write" and self.rnd.random() < self.p_write:
            self.take(f"write {name}", partial=True)

    def on_return(self):
        self.take("return", partial=False)


def recovered(folder, t_far):
    """Open a cut image the way a restarted worker would (default VFS), clock pinned."""
    conn = sqlite3.connect(os.path.join(folder, "store.db"), isolation_level=None, timeout=5)
    conn.enable_load_extension(True)
    conn.load_extension(EXT)
    conn.enable_load_extension(False)
    conn.execute("SELECT tq_clock(?)", (t_far,)).fetchall()
    return conn


def drain(conn, t_far):
    """A worker, 2 h later, claims and finishes everything: nothing may stay stuck. (Each
    round is an hour later: an attempt past its timeout ends as an error with a backoff.)"""
    for n in range(200):
        conn.execute("SELECT tq_clock(?)", (t_far + n * HOUR,)).fetchall()
        got = 0
        for q in QUEUES:
            for jid, att in conn.execute("SELECT id, attempt FROM tq_claim(?, 'after', 100)", (q,)).fetchall():
                assert conn.execute("SELECT tq_settle(?, ?, 'done')", (jid, att)).fetchone()[0] == 1
                got += 1
        if not got and n > 0:
            break
    stuck = conn.execute("SELECT id, state FROM tq_jobs WHERE state NOT IN ('done', 'failed')").fetchall()
    assert stuck == [], f"jobs left behind after a drain: {stuck[:5]}"


def run_and_cut(tmp, sync, seed, ncalls, p_write, journal="WAL"):
    vfs_name = f"cut-{journal}-{sync}-{seed}"
    disk = Disk()
    vfs = CutVFS(vfs_name, disk)
    work_dir = os.path.join(tmp, "live")
    os.makedirs(work_dir)
    cuts = Cuts(disk, os.path.join(tmp, "cuts"), random.Random(seed), p_write)
    disk.on_event = cuts.on_event
    wl = Workload(work_dir, vfs_name, sync, seed, journal)
    cuts.wl = wl
    real_returned = wl.returned

    def returned(name):
        real_returned(name)
        cuts.on_return()
    wl.returned = returned
    try:
        wl.run(ncalls)
    finally:
        disk.on_event = None
        wl.close()
        vfs.unregister()
    return wl, cuts


def check_cuts(wl, cuts, sync, drain_every=10):
    """Every image: integrity, invariants, a fingerprint of a state after some call, within
    what `sync` allows at each of its cuts. Returns counts for the report."""
    at_call = {}
    for k, fp in enumerate(wl.prints):
        at_call.setdefault(fp, []).append(k)
    found = {}
    for n, (key, folder) in enumerate(sorted(cuts.images.items())):
        conn = recovered(folder, wl.t_far)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok", f"cut image {key}: integrity"
            check_invariants(conn, wl.ever_added, {}, wl.t_far)
            fp = fingerprint_of(lambda sql, *a: conn.execute(sql, a).fetchall())
            assert fp in at_call, f"cut image {key}: the store is in no state any call left it in"
            found[key] = at_call[fp]
            if n % drain_every == 0:
                drain(conn, wl.t_far)
        finally:
            conn.close()
    lost = []
    for key, calls, at in cuts.cuts:
        ks = found[key]
        # the call running at the cut (calls + 1) may or may not have committed
        assert min(ks) <= calls + 1, f"cut {key} at {at}: state of call {min(ks)} after {calls} returned"
        best = max(k for k in ks if k <= calls + 1)
        if sync == "FULL":
            assert best >= calls, (f"cut {key} at {at} after call {calls} ({wl.names[calls]}): "
                                   f"the store is as after call {best}: a call that returned was lost")
        lost.append(calls - min(best, calls))
    return {"images": len(cuts.images), "cuts": len(cuts.cuts), "calls": wl.calls,
            "at_syncs": sum(1 for c in cuts.cuts if c[2].startswith("presync")),
            "at_writes": sum(1 for c in cuts.cuts if c[2].startswith("write")),
            "max_lost": max(lost), "cuts_losing": sum(1 for x in lost if x)}


@pytest.fixture
def cut_tmp():
    folder = scratch_dir("tinyq-cut-")
    yield folder
    remove(folder)


def report(sync, seed, counts, journal="WAL"):
    print(f"\npower cuts, journal_mode={journal}, synchronous={sync}, seed {seed}: {counts['calls']} calls, {counts['cuts']} cuts ({counts['at_syncs']} syncs, "
          f"{counts['at_writes']} at writes with half the pending writes kept), "
          f"{counts['images']} distinct images checked; cuts that lost returned calls: "
          f"{counts['cuts_losing']}, most calls lost at one cut: {counts['max_lost']}")


def test_DUR_01_power_cut_at_every_sync_full_keeps_every_call_that_returned(cut_tmp):
    wl, cuts = run_and_cut(cut_tmp, "FULL", seed=1, ncalls=250, p_write=0.15)
    counts = check_cuts(wl, cuts, "FULL")
    report("FULL", 1, counts)
    assert counts["cuts_losing"] == 0 and counts["images"] >= 500


def test_DUR_01_power_cut_normal_loses_only_a_suffix_never_a_hole(cut_tmp):
    wl, cuts = run_and_cut(cut_tmp, "NORMAL", seed=2, ncalls=300, p_write=0.25)
    counts = check_cuts(wl, cuts, "NORMAL")
    report("NORMAL", 2, counts)
    # NORMAL does lose the latest calls at some cuts (else this test could not tell).
    assert counts["cuts_losing"] > 0 and counts["images"] >= 500


def test_DUR_01_power_cut_rollback_journal_full_keeps_every_call_that_returned(cut_tmp):
    """The same in journal_mode=DELETE (a store not switched to WAL): the -journal's turn."""
    wl, cuts = run_and_cut(cut_tmp, "FULL", seed=3, ncalls=120, p_write=0.1, journal="DELETE")
    counts = check_cuts(wl, cuts, "FULL")
    report("FULL", 3, counts, journal="DELETE")
    assert counts["cuts_losing"] == 0 and counts["images"] >= 250


def test_power_cut_check_can_fail():
    """The FULL check on a NORMAL run must find the calls NORMAL loses (the check is real)."""
    tmp = scratch_dir("tinyq-cut-")
    try:
        wl, cuts = run_and_cut(tmp, "NORMAL", seed=4, ncalls=80, p_write=0.0)
        with pytest.raises(AssertionError, match="a call that returned was lost"):
            check_cuts(wl, cuts, "FULL", drain_every=1000)
    finally:
        remove(tmp)
