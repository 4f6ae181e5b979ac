-- From store version 6 to 7. The result is what sql/store.sql creates
-- (tests/test_migrations.py compares the two). Each change of version 7 is a block of its
-- own below.

-- ---- A job's timeline without a scan (perf-store; docs/design.md, "A job's timeline") ----
-- tinyq_jobs.last_event (the seq of the job's latest event) and tinyq_events.prev (the seq
-- of the same job's event before it) chain each job's events, newest first, so tq_watch's
-- `job` filter reads the job's own events and no others. ADD COLUMN rewrites no row; then
-- one pass over the log links the events kept (by id, in seq order: a window, one sort) and
-- one gives each job its latest, and the four triggers that log events are created again
-- with their lines for the chain.

ALTER TABLE tinyq_jobs ADD COLUMN last_event INTEGER;
ALTER TABLE tinyq_events ADD COLUMN prev INTEGER;

UPDATE tinyq_events SET prev = linked.prev
FROM (SELECT seq, lag(seq) OVER (PARTITION BY id ORDER BY seq) AS prev FROM tinyq_events) AS linked
WHERE linked.seq = tinyq_events.seq AND linked.prev IS NOT NULL;

UPDATE tinyq_jobs SET last_event = latest.seq
FROM (SELECT id, max(seq) AS seq FROM tinyq_events GROUP BY id) AS latest
WHERE latest.id = tinyq_jobs.id;

DROP TRIGGER tinyq_jobs_added;
DROP TRIGGER tinyq_jobs_changed;
DROP TRIGGER tinyq_jobs_replaced;
DROP TRIGGER tinyq_jobs_progressed;

CREATE TRIGGER tinyq_jobs_added AFTER INSERT ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note);
  INSERT OR IGNORE INTO tinyq_queues (name) VALUES (NEW.queue);
  -- A job is added scheduled or waiting; its queue's counters row exists (tinyq_queues_added).
  -- spill: see tinyq_counts. The job's key is computed only for a line cut into buckets:
  -- `+ (spill IS NULL)` (0 where it is computed) keeps SQLite from computing it once up front,
  -- as it does for an expression of NEW alone.
  UPDATE tinyq_counts SET scheduled = scheduled + (NEW.status = 'scheduled'), queued = queued + (NEW.status = 'queued'),
    spill = CASE WHEN NEW.status IS NOT 'queued' THEN CASE WHEN spill IS NULL THEN NULL ELSE '' END
                 WHEN spill IS NOT NULL THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                 WHEN queued >= 1024 THEN '*' END
  WHERE queue = NEW.queue;
END;

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
