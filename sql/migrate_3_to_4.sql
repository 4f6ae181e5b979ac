-- From store version 3 to 4: the flat-cost store (COST-01; docs/design.md, "Cost").
-- The result is what sql/store.sql creates (tests/test_migrations.py compares the two).
--
-- 1. tinyq_jobs gets `parked`: 1 for a due job set aside until its group has room. ADD
--    COLUMN rewrites no row. The claim index leads with it, so a claim walks only the
--    jobs it may start; tinyq_jobs_parked orders the set-aside jobs per group.
-- 2. tinyq_counts (per queue: jobs per status, starts in the rate window) and tinyq_groups
--    (per group of a queue with group limits: running leases, starts, head), kept by the
--    triggers, which are created again here with their new bodies.
-- 3. tinyq_events gets `was` (the status a change left): the counters of (2) move with the
--    event log, folded into tinyq_counts every 4th event. Older events have no `was`
--    and count nothing: the counts below already hold them.
-- Every job starts unparked; the first claim on a queue with group limits sets its
-- groups aside and counts them (tinyq_counts.gedge is NULL until then). The counts below
-- are one pass over the jobs; the rate windows are counted by each queue's first claim.

ALTER TABLE tinyq_jobs ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tinyq_events ADD COLUMN was TEXT;

DROP INDEX tinyq_jobs_queued;
CREATE INDEX tinyq_jobs_queued ON tinyq_jobs (queue, parked, priority DESC, run_at, seq, grp)
  WHERE status = 'queued';
CREATE INDEX tinyq_jobs_parked ON tinyq_jobs (queue, grp, priority DESC, run_at, seq)
  WHERE status = 'queued' AND parked = 1;

CREATE TABLE tinyq_counts (
  queue     TEXT PRIMARY KEY,
  scheduled INTEGER NOT NULL DEFAULT 0,
  queued    INTEGER NOT NULL DEFAULT 0,
  running   INTEGER NOT NULL DEFAULT 0,
  done      INTEGER NOT NULL DEFAULT 0,
  failed    INTEGER NOT NULL DEFAULT 0,
  started   INTEGER NOT NULL DEFAULT 0,
  edge      INTEGER,
  gedge     INTEGER
) WITHOUT ROWID;

CREATE TABLE tinyq_groups (
  queue   TEXT NOT NULL,
  grp     TEXT NOT NULL,
  running INTEGER NOT NULL DEFAULT 0,
  started INTEGER NOT NULL DEFAULT 0,
  head    INTEGER,
  dirty   INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, grp)
) WITHOUT ROWID;
CREATE INDEX tinyq_groups_dirty ON tinyq_groups (queue, grp) WHERE dirty = 1;

INSERT INTO tinyq_counts (queue) SELECT name FROM tinyq_queues;
INSERT OR IGNORE INTO tinyq_counts (queue) SELECT DISTINCT queue FROM tinyq_jobs;
UPDATE tinyq_counts SET
  scheduled = (SELECT count(*) FROM tinyq_jobs WHERE queue = tinyq_counts.queue AND status = 'scheduled'),
  queued = (SELECT count(*) FROM tinyq_jobs WHERE queue = tinyq_counts.queue AND status = 'queued'),
  running = (SELECT count(*) FROM tinyq_jobs WHERE queue = tinyq_counts.queue AND status = 'running'),
  done = (SELECT count(*) FROM tinyq_jobs WHERE queue = tinyq_counts.queue AND status = 'done'),
  failed = (SELECT count(*) FROM tinyq_jobs WHERE queue = tinyq_counts.queue AND status = 'failed');

DROP TRIGGER tinyq_jobs_added;
DROP TRIGGER tinyq_jobs_changed;
DROP TRIGGER tinyq_jobs_removed;

CREATE TRIGGER tinyq_jobs_added AFTER INSERT ON tinyq_jobs BEGIN
  -- The queue's counters row first (tinyq_queues_added): the event may fold into it.
  INSERT OR IGNORE INTO tinyq_queues (name) VALUES (NEW.queue);
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail, was)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note, '');
END;

CREATE TRIGGER tinyq_queues_added AFTER INSERT ON tinyq_queues BEGIN
  INSERT OR IGNORE INTO tinyq_counts (queue) VALUES (NEW.name);
END;

CREATE TRIGGER tinyq_jobs_changed AFTER UPDATE OF status, attempt ON tinyq_jobs
WHEN OLD.status IS NOT NEW.status OR OLD.attempt IS NOT NEW.attempt BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail, was)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note,
          CASE WHEN OLD.status IS NOT NEW.status THEN OLD.status END);
END;

-- The counters move with the event log: each status change is counted by its event
-- (`was` -> `state`), and every 4th event folds the 4 events up to it into tinyq_counts.
-- A reader adds the events after the last fold (at most 3; counts.rs), so a commit
-- writes the counters' page once in 4 instead of every time.
CREATE TRIGGER tinyq_events_fold AFTER INSERT ON tinyq_events WHEN NEW.seq % 4 = 0 BEGIN
  UPDATE tinyq_counts SET (scheduled, queued, running, done, failed) = (
    SELECT scheduled + sum((e.state = 'scheduled') - (e.was = 'scheduled')),
           queued + sum((e.state = 'waiting') - (e.was = 'queued')),
           running + sum((e.state = 'running') - (e.was = 'running')),
           done + sum((e.state = 'done') - (e.was = 'done')),
           failed + sum((e.state = 'failed') - (e.was = 'failed'))
    FROM tinyq_events e WHERE e.seq > NEW.seq - 4 AND e.seq <= NEW.seq AND e.was IS NOT NULL AND e.queue = tinyq_counts.queue)
  WHERE queue IN (SELECT queue FROM tinyq_events WHERE seq > NEW.seq - 4 AND seq <= NEW.seq AND was IS NOT NULL);
END;

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

CREATE TRIGGER tinyq_jobs_removed AFTER DELETE ON tinyq_jobs BEGIN
  DELETE FROM tinyq_steps WHERE job = OLD.seq;
  -- A cancelled job was counted out when it was marked; done and failed ones go here.
  UPDATE tinyq_counts SET done = done - (OLD.status = 'done'), failed = failed - (OLD.status = 'failed'),
    scheduled = scheduled - (OLD.status = 'scheduled'), queued = queued - (OLD.status = 'queued'),
    running = running - (OLD.status = 'running')
  WHERE queue = OLD.queue AND OLD.status <> 'cancelled';
END;
