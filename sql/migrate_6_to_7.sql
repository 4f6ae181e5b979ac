-- From store version 6 to 7. The result is what sql/store.sql creates
-- (tests/test_migrations.py compares the two). Each change of version 7 is a block of its
-- own below, in this order: the workflows block rebuilds tinyq_jobs, which drops the
-- table's indexes and triggers and creates them again, so the timeline block, which adds a
-- column to the rebuilt table and changes three of those triggers, runs after it.

-- ---- Workflows (DEP-01, SIG-01): the `blocked` state, dependencies, signals ------------
-- A job may now be `blocked`, which the CHECK on status must allow: SQLite changes a
-- constraint only by rebuilding the table (new table, copy, drop, rename, as it documents),
-- so this block is the one pass over the jobs of this upgrade. Its indexes and triggers go
-- with the old table and are created again here; tinyq_buckets_split, which reads
-- tinyq_jobs, is dropped first so that the rename finds no trigger naming a missing table.
-- tinyq_jobs gets the workflow columns, tinyq_counts its `blocked` counter, and the
-- workflow tables and indexes are new.

DROP TRIGGER tinyq_buckets_split;

ALTER TABLE tinyq_counts ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;

CREATE TABLE tinyq_jobs_v7 (
  seq          INTEGER PRIMARY KEY,                -- add order
  id           TEXT NOT NULL UNIQUE,
  queue        TEXT NOT NULL,
  status       TEXT NOT NULL CHECK (status = 'scheduled' OR status = 'queued' OR status = 'running'
                                    OR status = 'done' OR status = 'failed' OR status = 'cancelled'
                                    OR status = 'blocked'),
  grp          TEXT,
  priority     INTEGER NOT NULL DEFAULT 0,
  run_at       INTEGER NOT NULL,             -- blocked: its own time (after) or the wait's timeout (signal)
  attempt      INTEGER NOT NULL DEFAULT 0,   -- number of the latest lease; the fence
  tries        INTEGER NOT NULL DEFAULT 0,   -- attempts charged against the budget
  budget       INTEGER,                      -- this job's own attempts; NULL = the queue's
  lease_until  INTEGER,                      -- set while an attempt holds or held an unsettled lease
  deadline     INTEGER,                      -- the attempt's timeout
  started_at   INTEGER,
  worker       TEXT,
  holder       INTEGER,                      -- tinyq_holders.id of the leasing process
  payload      BLOB,
  result       BLOB,
  error        TEXT,
  progress     BLOB,
  created_at   INTEGER NOT NULL,
  settled_at   INTEGER,
  expires_at   INTEGER,                      -- done/failed only: when the id is freed; NULL while dependents hold it
  changed_at   INTEGER NOT NULL,             -- time of the latest state change (for its event)
  note         BLOB,                         -- detail of the latest state change (for its event)
  meta         BLOB,                         -- a JSON object kept beside the payload (schema 3)
  parked       INTEGER NOT NULL DEFAULT 0,   -- 1: due, set aside until its group has room (schema 4)
  start_by     INTEGER,                      -- tq_add's `expires`: no attempt starts from then (schema 6)
  slot         INTEGER,                      -- the id's row in tinyq_marks; NULL for a generated id (schema 6)
  -- Workflows (schema 7, DEP-01, SIG-01; docs/design.md "Workflows"):
  waits        INTEGER,                      -- blocked on jobs: how many of them have not finished
  signal       TEXT,                         -- blocked on a signal: its name
  after_failed TEXT,                         -- 'run' or 'cancel'; NULL: 'fail'
  held         INTEGER,                      -- dependents not finished yet (they keep this job)
  linked       INTEGER                       -- 1 once the job is on either side of a tinyq_deps row
);

INSERT INTO tinyq_jobs_v7 (seq, id, queue, status, grp, priority, run_at, attempt, tries, budget, lease_until, deadline, started_at, worker, holder, payload, result, error, progress, created_at, settled_at, expires_at, changed_at, note, meta, parked, start_by, slot)
SELECT seq, id, queue, status, grp, priority, run_at, attempt, tries, budget, lease_until, deadline, started_at, worker, holder, payload, result, error, progress, created_at, settled_at, expires_at, changed_at, note, meta, parked, start_by, slot
FROM tinyq_jobs;

DROP TABLE tinyq_jobs;
ALTER TABLE tinyq_jobs_v7 RENAME TO tinyq_jobs;

-- Claim order (JOB-01) over due jobs. A claim walks only the jobs it may start
-- (parked = 0): ungrouped jobs and the head of each group that has room (docs/design.md).
CREATE INDEX tinyq_jobs_queued ON tinyq_jobs (queue, parked, priority DESC, run_at, seq, grp)
  WHERE status = 'queued';

-- The jobs set aside, per group in claim order: the next head of a group is the first here.
CREATE INDEX tinyq_jobs_parked ON tinyq_jobs (queue, grp, priority DESC, run_at, seq)
  WHERE status = 'queued' AND parked = 1;

-- Jobs waiting for their time.
CREATE INDEX tinyq_jobs_scheduled ON tinyq_jobs (queue, run_at) WHERE status = 'scheduled';

-- Jobs that must start by a time (tq_add's `expires`, EXP-01; schema 6), while they wait:
-- a claim's probe for jobs past it is one seek, empty while nothing expires.
CREATE INDEX tinyq_jobs_expiring ON tinyq_jobs (queue, start_by)
  WHERE start_by IS NOT NULL AND (status = 'scheduled' OR status = 'queued');

-- Jobs that hold or held a lease: running ones by lease (expires_at NULL), with the group
-- for per-group counts and the holder for DUR-02; done and failed ones by expiry (RET-01).
CREATE INDEX tinyq_jobs_held ON tinyq_jobs (queue, status, expires_at, lease_until, grp, holder)
  WHERE status = 'running' OR status = 'done' OR status = 'failed';

-- Events: every state change is logged by these triggers, so no code path can forget one.
-- The same triggers keep the counters (tinyq_counts, tinyq_groups) in step with the jobs, in
-- the statement that changes them, so a claim or tq_stats reads a count instead of counting.
CREATE TRIGGER tinyq_jobs_added AFTER INSERT ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note);
  INSERT OR IGNORE INTO tinyq_queues (name) VALUES (NEW.queue);
  -- A job is added scheduled, waiting or blocked; its queue's counters row exists (tinyq_queues_added).
  -- spill: see tinyq_counts. The job's key is computed only for a line cut into buckets:
  -- `+ (spill IS NULL)` (0 where it is computed) keeps SQLite from computing it once up front,
  -- as it does for an expression of NEW alone.
  UPDATE tinyq_counts SET scheduled = scheduled + (NEW.status = 'scheduled'), queued = queued + (NEW.status = 'queued'),
    blocked = blocked + (NEW.status = 'blocked'),
    spill = CASE WHEN NEW.status IS NOT 'queued' THEN CASE WHEN spill IS NULL THEN NULL ELSE '' END
                 WHEN spill IS NOT NULL THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                 WHEN queued >= 1024 THEN '*' END
  WHERE queue = NEW.queue;
END;

CREATE TRIGGER tinyq_jobs_changed AFTER UPDATE OF status, attempt ON tinyq_jobs
WHEN OLD.status IS NOT NEW.status OR OLD.attempt IS NOT NEW.attempt BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note);
  UPDATE tinyq_counts SET
    scheduled = scheduled + (NEW.status = 'scheduled') - (OLD.status = 'scheduled'),
    queued = queued + (NEW.status = 'queued') - (OLD.status = 'queued'),
    running = running + (NEW.status = 'running') - (OLD.status = 'running'),
    done = done + (NEW.status = 'done') - (OLD.status = 'done'),
    failed = failed + (NEW.status = 'failed') - (OLD.status = 'failed'),
    blocked = blocked + (NEW.status = 'blocked') - (OLD.status = 'blocked'),
    spill = CASE WHEN spill IS NULL THEN CASE WHEN NEW.status = 'queued' AND queued >= 1024 THEN '*' END
                 WHEN NEW.status = 'queued' THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                 WHEN OLD.status = 'queued' THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq + (spill IS NULL)) ELSE '' END
  WHERE queue = NEW.queue AND OLD.status IS NOT NEW.status;
END;

-- A group of a queue with group limits has a row: its running leases, its head, and
-- `dirty` when its room or its due jobs changed (the next claim promotes its next head).
-- Triggers of their own, with a WHEN: ungrouped jobs skip them at the cost of one test.
CREATE TRIGGER tinyq_jobs_parked_added AFTER INSERT ON tinyq_jobs WHEN NEW.parked = 1 BEGIN
  INSERT INTO tinyq_groups (queue, grp, dirty) VALUES (NEW.queue, NEW.grp, 1)
  ON CONFLICT (queue, grp) DO UPDATE SET dirty = 1;
END;

CREATE TRIGGER tinyq_jobs_grouped AFTER UPDATE OF status ON tinyq_jobs
WHEN NEW.grp IS NOT NULL AND OLD.status IS NOT NEW.status BEGIN
  INSERT INTO tinyq_groups (queue, grp, dirty) SELECT NEW.queue, NEW.grp, 1
  WHERE NEW.parked = 1 OR EXISTS (SELECT 1 FROM tinyq_groups WHERE queue = NEW.queue AND grp = NEW.grp)
  ON CONFLICT (queue, grp) DO UPDATE SET
    running = running + (NEW.status = 'running') - (OLD.status = 'running'),
    head = CASE WHEN head = OLD.seq THEN NULL ELSE head END,
    dirty = 1;
END;

-- A replace (tq_add's on_conflict 'replace' or 'debounce', KEY-01; schema 6) is the one
-- write of a job's payload after its insert: a job that has not started takes a new
-- payload, time, priority and group. A change of status is logged and counted by
-- tinyq_jobs_changed; without one, the event is logged here (detail {"replaced":true}), and
-- a job that stays in a line cut into buckets joins its new place's bucket, then leaves its
-- old one's (in that order, so that no bucket is dropped while the line is still long).
-- The groups it leaves and joins are marked dirty (its old group's head cleared if it was
-- that head), so the next claim promotes their heads (limits/groups.rs).
CREATE TRIGGER tinyq_jobs_replaced AFTER UPDATE OF payload ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  SELECT NEW.id, NEW.queue, CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
         NEW.attempt, NEW.changed_at, NEW.note
  WHERE OLD.status IS NEW.status;
  UPDATE tinyq_counts SET spill = '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq)
  WHERE queue = NEW.queue AND spill IS NOT NULL AND OLD.status = 'queued' AND NEW.status = 'queued';
  UPDATE tinyq_counts SET spill = '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq)
  WHERE queue = NEW.queue AND spill IS NOT NULL AND OLD.status = 'queued' AND NEW.status = 'queued';
  UPDATE tinyq_groups SET head = CASE WHEN head = OLD.seq THEN NULL ELSE head END, dirty = 1
  WHERE queue = OLD.queue AND grp = OLD.grp;
  INSERT INTO tinyq_groups (queue, grp, dirty) SELECT NEW.queue, NEW.grp, 1 WHERE NEW.parked = 1
  ON CONFLICT (queue, grp) DO UPDATE SET dirty = 1;
END;

CREATE TRIGGER tinyq_jobs_progressed AFTER UPDATE OF progress ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue, 'progress', NEW.attempt, NEW.changed_at, NEW.progress);
END;

CREATE TRIGGER tinyq_jobs_removed AFTER DELETE ON tinyq_jobs BEGIN
  DELETE FROM tinyq_steps WHERE job = OLD.seq;
  -- A cancelled job was counted out when it was marked; done and failed ones go here.
  UPDATE tinyq_counts SET done = done - (OLD.status = 'done'), failed = failed - (OLD.status = 'failed'),
    scheduled = scheduled - (OLD.status = 'scheduled'), queued = queued - (OLD.status = 'queued'),
    running = running - (OLD.status = 'running'), blocked = blocked - (OLD.status = 'blocked'),
    spill = CASE WHEN spill IS NULL THEN NULL WHEN OLD.status = 'queued' THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq + (spill IS NULL)) ELSE '' END
  WHERE queue = OLD.queue AND OLD.status <> 'cancelled';
END;

CREATE TRIGGER tinyq_jobs_marked AFTER DELETE ON tinyq_jobs
WHEN OLD.slot IS NOT NULL AND OLD.attempt > 0 BEGIN
  INSERT INTO tinyq_marks (slot, attempt) VALUES (OLD.slot, OLD.attempt)
  ON CONFLICT (slot) DO UPDATE SET attempt = excluded.attempt WHERE excluded.attempt > attempt;
END;

-- A bucket over 1024 jobs is cut at its 512th in line (the two ranges of the claim index,
-- parked or not, merged in claim order): once per 512 jobs added to it.
CREATE TRIGGER tinyq_buckets_split AFTER UPDATE OF n ON tinyq_buckets WHEN NEW.n > 1024 BEGIN
  INSERT OR IGNORE INTO tinyq_buckets (queue, key, n, priority, run_at, seq)
  SELECT NEW.queue, printf('%08x%d%016x%016x', 2147483647 - priority, run_at >= 0, run_at, seq), NEW.n - 512,
         priority, run_at, seq
  FROM (SELECT priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued' AND queue = NEW.queue AND parked = 0
          AND priority = NEW.priority AND run_at = NEW.run_at AND seq >= NEW.seq
        UNION ALL SELECT priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued' AND queue = NEW.queue
          AND parked = 0 AND priority = NEW.priority AND run_at > NEW.run_at
        UNION ALL SELECT priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued' AND queue = NEW.queue
          AND parked = 0 AND priority < ifnull(NEW.priority, 9223372036854775807)
        UNION ALL SELECT priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued' AND queue = NEW.queue AND parked = 1
          AND priority = NEW.priority AND run_at = NEW.run_at AND seq >= NEW.seq
        UNION ALL SELECT priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued' AND queue = NEW.queue
          AND parked = 1 AND priority = NEW.priority AND run_at > NEW.run_at
        UNION ALL SELECT priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued' AND queue = NEW.queue
          AND parked = 1 AND priority < ifnull(NEW.priority, 9223372036854775807)
        ORDER BY 1 DESC, 2, 3 LIMIT 1 OFFSET 512);
  UPDATE tinyq_buckets SET n = 512 WHERE queue = NEW.queue AND key = NEW.key;
END;

-- A blocked job is in none of the indexes above (each names the statuses it holds), so
-- claims, limits and `ahead` never see it. It waits for jobs (`waits` of them unfinished,
-- the rows of tinyq_deps) or for a signal (`signal`, with the wait's timeout as run_at).

-- Dependencies: `job` waits or waited for `dep` (both tinyq_jobs.seq). By `dep`, the settle
-- that finishes a job finds its dependents; by `job`, tq_deps lists a job's dependencies.
-- `resolved` is 1 once `dep` finished and `job` took it into account (each edge once, even
-- if `dep` is retried and finishes again), 2 once `job` finished too and let `dep` go.
CREATE TABLE tinyq_deps (
  dep      INTEGER NOT NULL,
  job      INTEGER NOT NULL,
  resolved INTEGER,
  PRIMARY KEY (dep, job)
) WITHOUT ROWID;
CREATE INDEX tinyq_deps_job ON tinyq_deps (job, dep);

-- The jobs that wait for a signal, by name (tq_signal wakes them), and by timeout (a claim
-- makes the ones past it due, as it does scheduled jobs). `signal` is set only while a job
-- is blocked on it, so the condition names that column alone: the UPDATEs of claims and
-- settles, which never write it, leave both indexes alone.
CREATE INDEX tinyq_jobs_signal ON tinyq_jobs (signal) WHERE signal IS NOT NULL;
CREATE INDEX tinyq_jobs_timeout ON tinyq_jobs (queue, run_at) WHERE signal IS NOT NULL;

-- Signals sent (tq_signal), each kept until `keep_until` so that a wait that begins later
-- returns at once; the first payload sent for a name is the one kept.
CREATE TABLE tinyq_signals (
  name       TEXT PRIMARY KEY,
  payload    BLOB,
  sent_at    INTEGER NOT NULL,
  keep_until INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX tinyq_signals_kept ON tinyq_signals (keep_until);

-- A job that goes takes its edges with it, both ways (a trigger with a WHEN: a job never
-- in a workflow pays one test).
CREATE TRIGGER tinyq_jobs_unlinked AFTER DELETE ON tinyq_jobs WHEN OLD.linked IS NOT NULL BEGIN
  DELETE FROM tinyq_deps WHERE job = OLD.seq;
  DELETE FROM tinyq_deps WHERE dep = OLD.seq;
END;

-- ---- end of the workflows block -----------------------------------------------------------

-- ---- A job's timeline without a scan (perf-store; docs/design.md, "A job's timeline") ----
-- tinyq_jobs.last_event (the seq of the job's latest event) and tinyq_events.prev (the seq
-- of the same job's event before it) chain each job's events, newest first, so tq_watch's
-- `job` filter reads the job's own events and no others. ADD COLUMN rewrites no row; then
-- one pass over the log links the events kept (by id, in seq order: a window, one sort) and
-- one gives each job its latest, and the three triggers that log an event after a job's
-- insert are created again with their line for the chain (the workflows block's versions,
-- with `prev`; tinyq_jobs_added logs a job's first event, which has none).

ALTER TABLE tinyq_jobs ADD COLUMN last_event INTEGER;
ALTER TABLE tinyq_events ADD COLUMN prev INTEGER;

UPDATE tinyq_events SET prev = linked.prev
FROM (SELECT seq, lag(seq) OVER (PARTITION BY id ORDER BY seq) AS prev FROM tinyq_events) AS linked
WHERE linked.seq = tinyq_events.seq AND linked.prev IS NOT NULL;

UPDATE tinyq_jobs SET last_event = latest.seq
FROM (SELECT id, max(seq) AS seq FROM tinyq_events GROUP BY id) AS latest
WHERE latest.id = tinyq_jobs.id;

DROP TRIGGER tinyq_jobs_changed;
DROP TRIGGER tinyq_jobs_replaced;
DROP TRIGGER tinyq_jobs_progressed;

CREATE TRIGGER tinyq_jobs_changed AFTER UPDATE OF status, attempt ON tinyq_jobs
WHEN OLD.status IS NOT NEW.status OR OLD.attempt IS NOT NEW.attempt BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail, prev)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note, OLD.last_event);
  UPDATE tinyq_counts SET
    scheduled = scheduled + (NEW.status = 'scheduled') - (OLD.status = 'scheduled'),
    queued = queued + (NEW.status = 'queued') - (OLD.status = 'queued'),
    running = running + (NEW.status = 'running') - (OLD.status = 'running'),
    done = done + (NEW.status = 'done') - (OLD.status = 'done'),
    failed = failed + (NEW.status = 'failed') - (OLD.status = 'failed'),
    blocked = blocked + (NEW.status = 'blocked') - (OLD.status = 'blocked'),
    spill = CASE WHEN spill IS NULL THEN CASE WHEN NEW.status = 'queued' AND queued >= 1024 THEN '*' END
                 WHEN NEW.status = 'queued' THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                 WHEN OLD.status = 'queued' THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq + (spill IS NULL)) ELSE '' END
  WHERE queue = NEW.queue AND OLD.status IS NOT NEW.status;
END;

CREATE TRIGGER tinyq_jobs_replaced AFTER UPDATE OF payload ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail, prev)
  SELECT NEW.id, NEW.queue, CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
         NEW.attempt, NEW.changed_at, NEW.note, OLD.last_event
  WHERE OLD.status IS NEW.status;
  UPDATE tinyq_counts SET spill = '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq)
  WHERE queue = NEW.queue AND spill IS NOT NULL AND OLD.status = 'queued' AND NEW.status = 'queued';
  UPDATE tinyq_counts SET spill = '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq)
  WHERE queue = NEW.queue AND spill IS NOT NULL AND OLD.status = 'queued' AND NEW.status = 'queued';
  UPDATE tinyq_groups SET head = CASE WHEN head = OLD.seq THEN NULL ELSE head END, dirty = 1
  WHERE queue = OLD.queue AND grp = OLD.grp;
  INSERT INTO tinyq_groups (queue, grp, dirty) SELECT NEW.queue, NEW.grp, 1 WHERE NEW.parked = 1
  ON CONFLICT (queue, grp) DO UPDATE SET dirty = 1;
END;

CREATE TRIGGER tinyq_jobs_progressed AFTER UPDATE OF progress ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail, prev)
  VALUES (NEW.id, NEW.queue, 'progress', NEW.attempt, NEW.changed_at, NEW.progress, OLD.last_event);
END;

-- ---- end of the timeline block -----------------------------------------------------------
