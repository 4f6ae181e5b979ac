-- From store version 2 to 3: job meta and periodic jobs (issue 18).
-- The result is what sql/store.sql creates (tests/test_migrations.py compares the two).
--
-- 1. tinyq_jobs gets `meta`, a JSON object kept beside the payload. ADD COLUMN changes
--    no row (old jobs read NULL), so the upgrade does not grow with the store.
-- 2. tinyq_schedules holds the schedules; see sql/store.sql.

ALTER TABLE tinyq_jobs ADD COLUMN meta BLOB;

CREATE TABLE tinyq_schedules (
  name       TEXT PRIMARY KEY,
  queue      TEXT NOT NULL,
  expr       TEXT NOT NULL,               -- `when` as given: a cron expression, @every <duration>, @daily...
  tz         TEXT NOT NULL,               -- IANA zone the cron expression is read in
  payload    BLOB,
  priority   INTEGER NOT NULL DEFAULT 0,
  grp        TEXT,
  budget     INTEGER,                     -- the jobs' attempts; NULL = the queue's
  meta       BLOB,                        -- the jobs' meta (a JSON object)
  missed     TEXT NOT NULL CHECK (missed = 'latest' OR missed = 'skip' OR missed = 'all'),
  paused     INTEGER NOT NULL DEFAULT 0,
  next_at    INTEGER,                     -- the next due time not yet added; NULL: none ever again
  last_at    INTEGER,                     -- due time of the latest job added
  last_id    TEXT,                        -- id of the latest job added
  created_at INTEGER NOT NULL,
  changed_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX tinyq_schedules_due ON tinyq_schedules (queue, next_at) WHERE paused = 0;
