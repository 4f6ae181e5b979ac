"""The queues bench/peers.py compares, each behind the same small interface.

Every class opens its own connection(s) to one store in its constructor (creating the
store when it does not exist yet) and offers:

    add(n, group=None)      add the job numbered n (its payload carries n)
    claim()                 one job (an opaque handle) or None
    settle(job)             mark that job done
    number(job)             the n the job was added with
    add_many(ns), claim_many(k), settle_many(jobs)
                            batches; BATCH says "yes", "partial" (some steps are one by
                            one) or None (no batch API: the workload is n/a)
    prefill(ns)             add a backlog as fast as the system allows (setup, untimed)
    wait(seconds)           block until a job may be there (see WAKE)
    pending()               jobs not finished yet (only tinyq needs it, for its limits)
    close()

WAKE says how a worker that found the queue empty waits for the next job; systems
without a cross-process wake-up primitive poll, as their documentation suggests.

The file settings are the same for all: WAL and synchronous=NORMAL, set through the
system's own option when it has one, else on its connection.

This module runs under Debian's Python 3.11 and, for litequeue 0.14 (which needs
3.12), under a Python 3.12 that links the same libsqlite3. Imports of the peers happen
inside the classes, so each interpreter only needs the packages of what it runs.
"""
import json
import os
import sqlite3
import time

import lifecycle

QUEUE = "bench"
PAYLOAD = '{"to": "user@example.com", "n": %d}'


def payload_number(payload):
    return json.loads(payload)["n"]


class System:
    name = "?"
    BATCH = None          # "yes", "partial" or None
    LIMITS = False        # claim-time concurrency and group limits
    WAKE = "poll every 1 ms"
    POLL_S = 0.001

    def add_many(self, ns):
        raise NotImplementedError

    def claim_many(self, k):
        raise NotImplementedError

    def settle_many(self, jobs):
        raise NotImplementedError

    def prefill(self, ns, chunk=10_000):
        """ns is a range; added `chunk` per batch (one by one without batches)."""
        for i in range(0, len(ns), chunk):
            if self.BATCH:
                self.add_many(ns[i:i + chunk])
            else:
                for n in ns[i:i + chunk]:
                    self.add(n)

    def wait(self, seconds):
        time.sleep(self.POLL_S)

    def pending(self):
        return 0

    def close(self):
        self.conn.close()


# ----------------------------------------------------------------- SQL-function queues

class Baseline(System):
    """The minimal hand-written SQL queue of bench/lifecycle.py."""
    name = "baseline"
    BATCH = "yes"

    def __init__(self, path, ext=None):
        self.q = lifecycle.Baseline(path)
        self.conn = self.q.conn
        self.worker = "w%d" % os.getpid()

    @staticmethod
    def version():
        return "hand-written SQL (bench/lifecycle.py)"

    def add(self, n, group=None):
        self.q.add(QUEUE, PAYLOAD % n)

    def claim(self):
        rows = self.q.claim(QUEUE, self.worker, 1)
        return rows[0] if rows else None

    def settle(self, job):
        assert self.q.settle(job[0], job[1]) == 1

    def number(self, job):
        return payload_number(job[2])

    def add_many(self, ns):
        self.conn.execute("BEGIN IMMEDIATE")
        for n in ns:
            self.q.add(QUEUE, PAYLOAD % n)
        self.conn.execute("COMMIT")

    def claim_many(self, k):
        return self.q.claim(QUEUE, self.worker, k)

    def settle_many(self, jobs):
        self.conn.execute("BEGIN IMMEDIATE")
        for job in jobs:
            assert self.q.settle(job[0], job[1]) == 1
        self.conn.execute("COMMIT")


class Tinyq(Baseline):
    """tinyq through the same driver: tq_add, tq_claim, tq_settle, tq_wait."""
    name = "tinyq"
    LIMITS = True
    WAKE = "tq_wait (lock-free, wakes on another connection's commit)"

    def __init__(self, path, ext):
        self.q = lifecycle.Tinyq(path, ext)
        self.conn = self.q.conn
        self.worker = "w%d" % os.getpid()

    @staticmethod
    def version(ext):
        conn = lifecycle.connect(":memory:", ext)
        v = conn.execute("SELECT tq_debug()").fetchone()[0]   # version and commit
        conn.close()
        return v.split(" sqlite ")[0]

    def add(self, n, group=None):
        if group is None:
            self.q.add(QUEUE, PAYLOAD % n)
        else:
            self.conn.execute("SELECT tq_add(?, ?, json_object('group', ?))",
                              (QUEUE, PAYLOAD % n, group)).fetchone()

    def add_many(self, ns, groups=None):
        self.conn.execute("BEGIN IMMEDIATE")
        for n in ns:
            self.add(n, groups(n) if groups else None)
        self.conn.execute("COMMIT")

    def set_limits(self, concurrency, group_concurrency):
        self.conn.execute("SELECT tq_queue(?, json_object('concurrency', ?, 'group_concurrency', ?))",
                          (QUEUE, concurrency, group_concurrency)).fetchone()

    def wait(self, seconds):
        self.conn.execute("SELECT tq_wait(?, ?)", (QUEUE, int(seconds * 1000))).fetchone()

    def pending(self):
        row = self.conn.execute("SELECT scheduled + waiting + running FROM tq_stats(?)",
                                (QUEUE,)).fetchone()
        return row[0] if row else 0


class Honker(System):
    """honker-extension: a Rust SQLite loadable extension with honker_* functions.

    Called as its bindings call it (honker-go, -node, -python): every honker_* call
    runs in its own BEGIN IMMEDIATE transaction, claims as honker_claim_batch (a JSON
    array), acks with honker_ack / honker_ack_batch. Waiting uses its SQL watcher,
    honker_update_watcher_open/_wait (PRAGMA data_version polled every 1 ms).
    """
    name = "honker"
    BATCH = "yes"
    WAKE = "honker_update_watcher_wait (data_version watcher, 1 ms)"
    VISIBILITY_S = 300
    MAX_ATTEMPTS = 3

    def __init__(self, path, ext):
        self.path = path
        self.conn = lifecycle.connect(path, ext)
        self.conn.execute("SELECT honker_bootstrap()").fetchone()
        self.watcher = None
        self.worker = "w%d" % os.getpid()

    @staticmethod
    def version():
        return "honker-extension 0.5.0"

    def _call(self, sql, args):
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            value = self.conn.execute(sql, args).fetchone()[0]
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return value

    def _enqueue(self, n):
        return self.conn.execute("SELECT honker_enqueue(?, ?, NULL, NULL, 0, ?, NULL)",
                                 (QUEUE, PAYLOAD % n, self.MAX_ATTEMPTS)).fetchone()[0]

    def add(self, n, group=None):
        self.conn.execute("BEGIN IMMEDIATE")
        self._enqueue(n)
        self.conn.execute("COMMIT")

    def add_many(self, ns):
        self.conn.execute("BEGIN IMMEDIATE")
        for n in ns:
            self._enqueue(n)
        self.conn.execute("COMMIT")

    def prefill(self, ns):
        """Setup only: plain INSERTs into _honker_live, which honker documents as a way
        to enqueue (its extension's doc comment), in one transaction."""
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany("INSERT INTO _honker_live (queue, payload, max_attempts) VALUES (?, ?, ?)",
                                  ((QUEUE, PAYLOAD % n, self.MAX_ATTEMPTS) for n in ns))

    def claim_many(self, k):
        return json.loads(self._call("SELECT honker_claim_batch(?, ?, ?, ?)",
                                     (QUEUE, self.worker, k, self.VISIBILITY_S)))

    def claim(self):
        jobs = self.claim_many(1)
        return jobs[0] if jobs else None

    def settle(self, job):
        assert self._call("SELECT honker_ack(?, ?)", (job["id"], job["worker_id"])) == 1

    def settle_many(self, jobs):
        ids = json.dumps([job["id"] for job in jobs])
        assert self._call("SELECT honker_ack_batch(?, ?)", (ids, self.worker)) == len(jobs)

    def number(self, job):
        return payload_number(job["payload"])

    def wait(self, seconds):
        if self.watcher is None:
            self.watcher = self.conn.execute("SELECT honker_update_watcher_open(?, NULL)",
                                             (self.path,)).fetchone()[0]
        self.conn.execute("SELECT honker_update_watcher_wait(?, ?)",
                          (self.watcher, int(seconds * 1000))).fetchone()

    def close(self):
        if self.watcher is not None:
            self.conn.execute("SELECT honker_update_watcher_close(?)", (self.watcher,)).fetchone()
        self.conn.close()


# ----------------------------------------------------------------- Python libraries

class Litequeue(System):
    """litequeue: put / pop / done(message_id, claim_id) (0.14; 0.9 has no claim_id).

    Batches are partial: puts and dones go in one queue.transaction(); pop() runs its
    own IMMEDIATE transaction, so claims stay one by one. No blocking pop: poll.
    It sets WAL and synchronous=NORMAL itself.
    """
    name = "litequeue"
    BATCH = "partial"

    def __init__(self, path, ext=None):
        import litequeue
        self.mod = litequeue
        self.q = litequeue.LiteQueue(path, timeout=5)
        self.conn = self.q.conn
        self.fenced = "claim_id" in litequeue.Message.__dataclass_fields__

    @staticmethod
    def version():
        import importlib.metadata
        return "litequeue " + importlib.metadata.version("litequeue")

    def add(self, n, group=None):
        self.q.put(PAYLOAD % n)

    def add_many(self, ns):
        with self.q.transaction("IMMEDIATE"):
            for n in ns:
                self.q.put(PAYLOAD % n)

    def claim(self):
        return self.q.pop()

    def claim_many(self, k):
        jobs = []
        for _ in range(k):
            job = self.q.pop()
            if job is None:
                break
            jobs.append(job)
        return jobs

    def settle(self, job):
        if self.fenced:
            assert self.q.done(job.message_id, claim_id=job.claim_id)
        else:
            self.q.done(job.message_id)

    def settle_many(self, jobs):
        with self.q.transaction("IMMEDIATE"):
            for job in jobs:
                self.settle(job)

    def number(self, job):
        return payload_number(job.data)

    def prefill(self, ns):
        """Setup only: the rows put() inserts (ready, uuid7 id), in one executemany."""
        rows = ((PAYLOAD % n, str(self.mod.uuid7()), time.time_ns()) for n in ns)
        with self.q.transaction("IMMEDIATE"):
            self.conn.executemany('INSERT INTO "Queue" (data, message_id, status, in_time)'
                                  " VALUES (?, ?, 0, ?)", rows)

    def close(self):
        self.q.close()


class PersistQueue(System):
    """persist-queue SQLiteAckQueue: put / get(block=False, raw=True) / ack(id=...).

    The store is a directory holding data.db. The queue has no synchronous option, so
    synchronous=NORMAL is set on its connection (`_conn`, its only one here). Its
    blocking get() waits on an in-process event, so a worker in another process would
    see a new job only at its 10 s re-check: the worker polls get() instead. No batches.
    """
    name = "persist-queue"

    def __init__(self, path, ext=None):
        import persistqueue
        self.mod = persistqueue
        self.q = persistqueue.SQLiteAckQueue(path)
        self.q._conn.execute("PRAGMA synchronous=NORMAL")

    @staticmethod
    def version():
        import importlib.metadata
        return "persist-queue " + importlib.metadata.version("persist-queue")

    def add(self, n, group=None):
        self.q.put(PAYLOAD % n)

    def claim(self):
        try:
            return self.q.get(block=False, raw=True)
        except self.mod.Empty:
            return None

    def settle(self, job):
        assert self.q.ack(id=job["pqid"]) is not None

    def number(self, job):
        return payload_number(job["data"])

    def prefill(self, ns):
        """Setup only: insert the rows put() would insert, in one transaction."""
        q = self.q
        rows = ((q._serializer.dumps(PAYLOAD % n), time.time()) for n in ns)
        with q._conn:
            q._conn.executemany(q._sql_insert, rows)
        q.total = q._count()

    def close(self):
        self.q.close()


class Huey(System):
    """huey SqliteHuey: calling a @huey.task() enqueues; huey.dequeue() takes the next
    task (deleting its row: there is no ack or lease) and huey.execute(task) runs it,
    which is what huey_consumer's workers do. Waiting copies the consumer's defaults:
    sleep 0.1 s when the queue is empty, times 1.15 while it stays empty, at most 10 s.
    synchronous=NORMAL through a storage subclass (its fsync option only knows on/off).
    """
    name = "huey"
    WAKE = "poll like huey_consumer: 0.1 s, x1.15 while empty, max 10 s"

    def __init__(self, path, ext=None):
        from huey import SqliteHuey
        from huey.storage import SqliteStorage

        class Storage(SqliteStorage):
            def _create_connection(self):
                conn = super()._create_connection()
                conn.execute("PRAGMA synchronous=NORMAL")
                return conn

        self.huey = SqliteHuey("bench", filename=path, storage_class=Storage)

        @self.huey.task()
        def job(payload):
            pass   # the harness notes which job ran (workloads.py)

        self.job = job
        self.delay = 0.1

    @staticmethod
    def version():
        import importlib.metadata
        return "huey " + importlib.metadata.version("huey")

    def add(self, n, group=None):
        self.job(PAYLOAD % n)

    def claim(self):
        task = self.huey.dequeue()
        if task is not None:
            self.delay = 0.1
        return task

    def settle(self, task):
        self.huey.execute(task)

    def number(self, task):
        return payload_number(task.args[0])

    def prefill(self, ns):
        """Setup only: insert the rows enqueue() would insert, in one transaction."""
        storage = self.huey.storage
        rows = ((storage.name, storage.to_blob(self.huey.serialize_task(self.job.s(PAYLOAD % n))), 0)
                for n in ns)
        with storage.db(commit=True) as curs:
            curs.executemany("insert into task (queue, data, priority) values (?, ?, ?)", rows)

    def wait(self, seconds):
        time.sleep(min(self.delay, seconds))
        self.delay = min(self.delay * 1.15, 10.0)

    def close(self):
        self.huey.storage.close()


SYSTEMS = {cls.name: cls for cls in (Baseline, Tinyq, Honker, Litequeue, PersistQueue, Huey)}
