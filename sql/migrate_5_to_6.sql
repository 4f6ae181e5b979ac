-- From store version 5 to 6. The result is what sql/store.sql creates
-- (tests/test_migrations.py compares the two). Each change of version 6 is a block of its
-- own below; a block adds only what is new, so the upgrade does not grow with the store (but
-- for the one pass over the jobs that follows JOB-05's block, below).

-- ---- tq_add's `expires` and `on_conflict` (EXP-01, KEY-01) ----------------------------
-- tinyq_jobs gets `start_by` (ADD COLUMN rewrites no row; no job of an older store has a
-- bound), the index claims find expired jobs by, and the trigger of a replace.

ALTER TABLE tinyq_jobs ADD COLUMN start_by INTEGER;

-- Jobs that must start by a time (tq_add's `expires`, EXP-01; schema 6), while they wait:
-- a claim's probe for jobs past it is one seek, empty while nothing expires.
CREATE INDEX tinyq_jobs_expiring ON tinyq_jobs (queue, start_by)
  WHERE start_by IS NOT NULL AND (status = 'scheduled' OR status = 'queued');

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

-- ---- end of the `expires` and `on_conflict` block ----------------------------------------

-- ---- JOB-05: attempts across the jobs of one id ---------------------------------------
-- A job added again under the id of a job that is gone numbers its attempts after every
-- attempt the id had (docs/design.md, "Attempts across jobs of one id"). tinyq_jobs gets
-- `slot` (ADD COLUMN rewrites no row); tinyq_marks and its trigger replace the cancel
-- tombstones. After this script, tinyq (src/marks.rs, which holds the hash) gives every
-- job present its slot, turns the tombstones into marks and drops tinyq_tombstones: that
-- pass grows with the store, once.

ALTER TABLE tinyq_jobs ADD COLUMN slot INTEGER;

CREATE TABLE tinyq_marks (
  slot    INTEGER PRIMARY KEY,
  attempt INTEGER NOT NULL
);

DROP TRIGGER tinyq_jobs_cancel_tombstone;

CREATE TRIGGER tinyq_jobs_marked AFTER DELETE ON tinyq_jobs
WHEN OLD.slot IS NOT NULL AND OLD.attempt > 0 BEGIN
  INSERT INTO tinyq_marks (slot, attempt) VALUES (OLD.slot, OLD.attempt)
  ON CONFLICT (slot) DO UPDATE SET attempt = excluded.attempt WHERE excluded.attempt > attempt;
END;

-- ---- end of the JOB-05 block --------------------------------------------------------------
