-- From store version 3 to 4: the flat-cost store (COST-01; docs/design.md, "Cost").
-- The result is what sql/store.sql creates (tests/test_migrations.py compares the two).
--
-- 1. tinyq_jobs gets `parked`: 1 for a due job set aside until its group has room. ADD
--    COLUMN rewrites no row. The claim index leads with it, so a claim walks only the
--    jobs it may start; tinyq_jobs_parked orders the set-aside jobs per group.
-- 2. tinyq_counts (per queue: jobs per status, starts in the rate window) and tinyq_groups
--    (per group of a queue with group limits: running leases, starts, head), kept by the
--    triggers, which are created again here with their new bodies.
-- Every job starts unparked; the first claim on a queue with group limits sets its
-- groups aside and counts them (tinyq_counts.gedge is NULL until then). The counts below
-- are one pass over the jobs; the rate windows are counted by each queue's first claim.

ALTER TABLE tinyq_jobs ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;

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
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note);
  INSERT OR IGNORE INTO tinyq_queues (name) VALUES (NEW.queue);
  -- A job is added scheduled or waiting; its queue's counters row exists (tinyq_queues_added).
  UPDATE tinyq_counts SET scheduled = scheduled + (NEW.status = 'scheduled'), queued = queued + (NEW.status = 'queued')
  WHERE queue = NEW.queue;
END;

CREATE TRIGGER tinyq_queues_added AFTER INSERT ON tinyq_queues BEGIN
  INSERT OR IGNORE INTO tinyq_counts (queue) VALUES (NEW.name);
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
    failed = failed + (NEW.status = 'failed') - (OLD.status = 'failed')
  WHERE queue = NEW.queue AND OLD.status IS NOT NEW.status;
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
