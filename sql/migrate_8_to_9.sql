-- From store version 8 to 9. The result is what sql/store.sql creates
-- (tests/test_migrations.py compares the two, the order of the triggers included). Each
-- change of version 9 is a block of its own below, headed by what it is for.

-- ---- lean-triggers: batches nearer the floor (docs/design.md, "Batches near the floor")
-- No table changes. An add's counts become an upsert that makes a queue's counters row,
-- and tinyq_counts_added its tinyq_queues row (no INSERT OR IGNORE on every add); the
-- counts of a change no longer write `spill`, which a trigger of its own writes for a line
-- cut into buckets (tinyq_jobs_lined); tinyq_jobs_parked_added goes (tq_add marks the group,
-- src/jobs.rs); tinyq_jobs_grouped and tinyq_jobs_lined fire on `UPDATE OF grp`. Every
-- trigger of tinyq_jobs is created again, in the order of sql/store.sql: SQLite fires a
-- change's triggers newest first, and tinyq_jobs_lined reads the counts tinyq_jobs_changed
-- wrote. Every row is already as version 9 keeps it.

DROP TRIGGER tinyq_jobs_added;
DROP TRIGGER tinyq_jobs_changed;
DROP TRIGGER tinyq_jobs_parked_added;
DROP TRIGGER tinyq_jobs_grouped;
DROP TRIGGER tinyq_jobs_replaced;
DROP TRIGGER tinyq_jobs_progressed;
DROP TRIGGER tinyq_jobs_removed;
DROP TRIGGER tinyq_jobs_marked;
DROP TRIGGER tinyq_jobs_unlinked;

CREATE TRIGGER tinyq_jobs_added AFTER INSERT ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note);
  -- A job is added scheduled, waiting or blocked. The first job of a queue makes its
  -- counters row, and that its tinyq_queues row (tinyq_counts_added, schema 9).
  INSERT INTO tinyq_counts (queue, scheduled, queued, blocked)
  VALUES (NEW.queue, NEW.status = 'scheduled', NEW.status = 'queued', NEW.status = 'blocked')
  ON CONFLICT (queue) DO UPDATE SET scheduled = scheduled + excluded.scheduled,
    queued = queued + excluded.queued, blocked = blocked + excluded.blocked;
  -- A line cut into buckets (or just grown past 1024: `queued` is counted above) is told
  -- where the job joins it (spill: see tinyq_counts), in an UPDATE of its own, so that the
  -- counts above fire no trigger of tinyq_counts. `+ (spill IS NULL)` (0 where it is
  -- computed) keeps SQLite from computing the key once up front, as it does for an
  -- expression of NEW alone.
  UPDATE tinyq_counts SET
    spill = CASE WHEN spill IS NULL THEN '>'
                 WHEN (next_priority, NEW.run_at, NEW.seq) >= (NEW.priority, next_run_at, next_seq) THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                 WHEN front >= 1024 THEN '>' ELSE '' END,
    front = CASE WHEN spill IS NULL THEN NULL ELSE front + ((next_priority, NEW.run_at, NEW.seq) < (NEW.priority, next_run_at, next_seq)) END
  WHERE queue = NEW.queue AND NEW.status = 'queued' AND (spill IS NOT NULL OR queued > 1024);
END;

CREATE TRIGGER tinyq_jobs_lined AFTER UPDATE OF grp ON tinyq_jobs
WHEN OLD.status IS NOT NEW.status AND (OLD.status = 'queued' OR NEW.status = 'queued') BEGIN
  UPDATE tinyq_counts SET front = front + CASE WHEN NEW.status = 'queued' THEN 1 ELSE -1 END
  WHERE queue = NEW.queue AND spill IS NOT NULL
    AND CASE WHEN NEW.status = 'queued' THEN (next_priority, NEW.run_at, NEW.seq) < (NEW.priority, next_run_at, next_seq)
             ELSE (next_priority, OLD.run_at, OLD.seq) < (OLD.priority, next_run_at, next_seq) END;
  UPDATE tinyq_counts SET
    spill = CASE WHEN spill IS NULL THEN '>'
                 WHEN NEW.status = 'queued' THEN CASE WHEN (next_priority, NEW.run_at, NEW.seq) >= (NEW.priority, next_run_at, next_seq) THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                                                      ELSE '>' END
                 ELSE CASE WHEN (next_priority, OLD.run_at, OLD.seq) >= (OLD.priority, next_run_at, next_seq) THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq + (spill IS NULL))
                           ELSE '<' END END
  WHERE queue = NEW.queue
    AND CASE WHEN spill IS NULL THEN NEW.status = 'queued' AND queued > 1024
             WHEN NEW.status = 'queued' THEN (next_priority, NEW.run_at, NEW.seq) >= (NEW.priority, next_run_at, next_seq) OR front > 1024
             ELSE (next_priority, OLD.run_at, OLD.seq) >= (OLD.priority, next_run_at, next_seq) OR front < 1 END;
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
    blocked = blocked + (NEW.status = 'blocked') - (OLD.status = 'blocked')
  WHERE queue = NEW.queue AND OLD.status IS NOT NEW.status;
END;

CREATE TRIGGER tinyq_jobs_grouped AFTER UPDATE OF grp ON tinyq_jobs
WHEN NEW.grp IS NOT NULL AND OLD.status IS NOT NEW.status BEGIN
  INSERT INTO tinyq_groups (queue, grp, dirty) SELECT NEW.queue, NEW.grp, 1
  WHERE NEW.parked = 1 OR EXISTS (SELECT 1 FROM tinyq_groups WHERE queue = NEW.queue AND grp = NEW.grp)
  ON CONFLICT (queue, grp) DO UPDATE SET
    running = running + (NEW.status = 'running') - (OLD.status = 'running'),
    head = CASE WHEN head = OLD.seq THEN NULL ELSE head END,
    dirty = 1;
END;

CREATE TRIGGER tinyq_jobs_replaced AFTER UPDATE OF payload ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail, prev)
  SELECT NEW.id, NEW.queue, CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
         NEW.attempt, NEW.changed_at, NEW.note, OLD.last_event
  WHERE OLD.status IS NEW.status;
  UPDATE tinyq_counts SET spill = CASE WHEN (next_priority, NEW.run_at, NEW.seq) >= (NEW.priority, next_run_at, next_seq) THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq)
                                  WHEN (next_priority, OLD.run_at, OLD.seq) < (OLD.priority, next_run_at, next_seq) OR front < 1024 THEN '' ELSE '>' END,
    front = front + ((next_priority, NEW.run_at, NEW.seq) < (NEW.priority, next_run_at, next_seq) AND (next_priority, OLD.run_at, OLD.seq) >= (OLD.priority, next_run_at, next_seq))
  WHERE queue = NEW.queue AND spill IS NOT NULL AND OLD.status = 'queued' AND NEW.status = 'queued';
  UPDATE tinyq_counts SET spill = CASE WHEN (next_priority, OLD.run_at, OLD.seq) >= (OLD.priority, next_run_at, next_seq) THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq)
                                  WHEN front <= 1 THEN '<' ELSE '' END,
    front = front - ((next_priority, OLD.run_at, OLD.seq) < (OLD.priority, next_run_at, next_seq))
  WHERE queue = NEW.queue AND spill IS NOT NULL AND OLD.status = 'queued' AND NEW.status = 'queued'
    AND NOT ((next_priority, OLD.run_at, OLD.seq) < (OLD.priority, next_run_at, next_seq) AND (next_priority, NEW.run_at, NEW.seq) < (NEW.priority, next_run_at, next_seq));
  UPDATE tinyq_groups SET head = CASE WHEN head = OLD.seq THEN NULL ELSE head END, dirty = 1
  WHERE queue = OLD.queue AND grp = OLD.grp;
  INSERT INTO tinyq_groups (queue, grp, dirty) SELECT NEW.queue, NEW.grp, 1 WHERE NEW.parked = 1
  ON CONFLICT (queue, grp) DO UPDATE SET dirty = 1;
END;

CREATE TRIGGER tinyq_jobs_progressed AFTER UPDATE OF progress ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail, prev)
  VALUES (NEW.id, NEW.queue, 'progress', NEW.attempt, NEW.changed_at, NEW.progress, OLD.last_event);
END;

CREATE TRIGGER tinyq_jobs_removed AFTER DELETE ON tinyq_jobs BEGIN
  DELETE FROM tinyq_steps WHERE job = OLD.seq;
  -- A cancelled job was counted out when it was marked; done and failed ones go here.
  UPDATE tinyq_counts SET done = done - (OLD.status = 'done'), failed = failed - (OLD.status = 'failed'),
    scheduled = scheduled - (OLD.status = 'scheduled'), queued = queued - (OLD.status = 'queued'),
    running = running - (OLD.status = 'running'), blocked = blocked - (OLD.status = 'blocked'),
    spill = CASE WHEN spill IS NULL THEN NULL
                 WHEN OLD.status = 'queued' THEN CASE WHEN (next_priority, OLD.run_at, OLD.seq) >= (OLD.priority, next_run_at, next_seq) THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq + (spill IS NULL))
                                                      WHEN front <= 1 THEN '<' ELSE '' END ELSE '' END,
    front = CASE WHEN spill IS NULL THEN NULL ELSE front - (OLD.status = 'queued' AND (next_priority, OLD.run_at, OLD.seq) < (OLD.priority, next_run_at, next_seq)) END
  WHERE queue = OLD.queue AND OLD.status <> 'cancelled';
END;

CREATE TRIGGER tinyq_jobs_marked AFTER DELETE ON tinyq_jobs
WHEN OLD.slot IS NOT NULL AND OLD.attempt > 0 BEGIN
  INSERT INTO tinyq_marks (slot, attempt) VALUES (OLD.slot, OLD.attempt)
  ON CONFLICT (slot) DO UPDATE SET attempt = excluded.attempt WHERE excluded.attempt > attempt;
END;

CREATE TRIGGER tinyq_jobs_unlinked AFTER DELETE ON tinyq_jobs WHEN OLD.linked IS NOT NULL BEGIN
  DELETE FROM tinyq_deps WHERE job = OLD.seq;
  DELETE FROM tinyq_deps WHERE dep = OLD.seq;
END;

CREATE TRIGGER tinyq_counts_added AFTER INSERT ON tinyq_counts BEGIN
  INSERT OR IGNORE INTO tinyq_queues (name) VALUES (NEW.queue);
END;

-- ---- blocked jobs expire (EXP-01): a job blocked on jobs or a signal ends at its bound
-- tinyq_jobs_expiring holds blocked jobs with a bound too, so that the claim that ends
-- its queue's waiting jobs past their `expires` ends those as well, by the same seek.

DROP INDEX tinyq_jobs_expiring;
CREATE INDEX tinyq_jobs_expiring ON tinyq_jobs (queue, start_by)
  WHERE start_by IS NOT NULL AND (status = 'scheduled' OR status = 'queued' OR status = 'blocked');
