-- From store version 5 to 6. The result is what sql/store.sql creates
-- (tests/test_migrations.py compares the two). Each change of version 6 is a block of its own.

-- JOB-05, attempts across the jobs of one id: a job added again under the id of a job that
-- is gone numbers its attempts after every attempt the id had (docs/design.md, "Attempts
-- across jobs of one id"). tinyq_jobs gets `slot` (ADD COLUMN rewrites no row);
-- tinyq_marks and its trigger replace the cancel tombstones. After this script, tinyq
-- (src/marks.rs, which holds the hash) gives every job present its slot, turns the
-- tombstones into marks and drops tinyq_tombstones.
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
-- (end of JOB-05's block)
