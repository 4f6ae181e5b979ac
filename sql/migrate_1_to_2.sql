-- From store version 1 to 2: tinyq_jobs rebuilt for a cheaper hot path (bench/README.md).
-- The result is what sql/store.sql creates (tests/test_migrations.py compares the two).
--
-- 1. The CHECK on status is written with ORs. SQLite evaluates `status IN (six values)`
--    through a temporary b-tree, created and dropped on every INSERT and on every UPDATE
--    of status: about a third of the work of a batch of adds, claims and settles.
-- 2. One index, tinyq_jobs_held, replaces tinyq_jobs_running and tinyq_jobs_settled. When
--    a job settles, its entry moves inside one index, from the running range to the end of
--    the done range next to it, usually on the same page: a settle writes one page less
--    (one WAL frame of four), and the WAL fills (and is checkpointed) less often.
--    Its WHERE is ORs for the same reason as the CHECK; a query reaches it by saying
--    `status = '...'` for one status (a partial index is used only when the query implies
--    its WHERE, and SQLite does not see that an IN list does).
--    A running job's expires_at is NULL (only done and failed jobs have one), so queries
--    on leases say `expires_at IS NULL` and seek by lease_until.
--
-- The table is rebuilt as SQLite documents for a changed constraint: new table, copy, drop,
-- rename; its indexes and triggers go with the old table and are created again here.

CREATE TABLE tinyq_jobs_v2 (
  seq         INTEGER PRIMARY KEY,                -- add order
  id          TEXT NOT NULL UNIQUE,
  queue       TEXT NOT NULL,
  status      TEXT NOT NULL CHECK (status = 'scheduled' OR status = 'queued' OR status = 'running'
                                   OR status = 'done' OR status = 'failed' OR status = 'cancelled'),
  grp         TEXT,
  priority    INTEGER NOT NULL DEFAULT 0,
  run_at      INTEGER NOT NULL,
  attempt     INTEGER NOT NULL DEFAULT 0,   -- number of the latest lease; the fence
  tries       INTEGER NOT NULL DEFAULT 0,   -- attempts charged against the budget
  budget      INTEGER,                      -- this job's own attempts; NULL = the queue's
  lease_until INTEGER,                      -- set while an attempt holds or held an unsettled lease
  deadline    INTEGER,                      -- the attempt's timeout
  started_at  INTEGER,
  worker      TEXT,
  holder      INTEGER,                      -- tinyq_holders.id of the leasing process
  payload     BLOB,
  result      BLOB,
  error       TEXT,
  progress    BLOB,
  created_at  INTEGER NOT NULL,
  settled_at  INTEGER,
  expires_at  INTEGER,                      -- done/failed only: when the id is freed
  changed_at  INTEGER NOT NULL,             -- time of the latest state change (for its event)
  note        BLOB                           -- detail of the latest state change (for its event)
);

INSERT INTO tinyq_jobs_v2
SELECT seq, id, queue, status, grp, priority, run_at, attempt, tries, budget, lease_until, deadline,
       started_at, worker, holder, payload, result, error, progress, created_at, settled_at,
       CASE WHEN status = 'done' OR status = 'failed' THEN expires_at END, changed_at, note
FROM tinyq_jobs;

DROP TABLE tinyq_jobs;
ALTER TABLE tinyq_jobs_v2 RENAME TO tinyq_jobs;

-- Claim order (JOB-01) over due jobs.
CREATE INDEX tinyq_jobs_queued ON tinyq_jobs (queue, priority DESC, run_at, seq, grp)
  WHERE status = 'queued';
-- Jobs waiting for their time.
CREATE INDEX tinyq_jobs_scheduled ON tinyq_jobs (queue, run_at) WHERE status = 'scheduled';
-- Jobs that hold or held a lease: running ones by lease (expires_at NULL), with the group
-- for per-group counts and the holder for DUR-02; done and failed ones by expiry (RET-01).
CREATE INDEX tinyq_jobs_held ON tinyq_jobs (queue, status, expires_at, lease_until, grp, holder)
  WHERE status = 'running' OR status = 'done' OR status = 'failed';

-- Events: every state change is logged by these triggers, so no code path can forget one.
CREATE TRIGGER tinyq_jobs_added AFTER INSERT ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note);
  INSERT OR IGNORE INTO tinyq_queues (name) VALUES (NEW.queue);
END;

CREATE TRIGGER tinyq_jobs_changed AFTER UPDATE OF status, attempt ON tinyq_jobs
WHEN OLD.status IS NOT NEW.status OR OLD.attempt IS NOT NEW.attempt BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue,
          CASE NEW.status WHEN 'queued' THEN 'waiting' ELSE NEW.status END,
          NEW.attempt, NEW.changed_at, NEW.note);
END;

CREATE TRIGGER tinyq_jobs_progressed AFTER UPDATE OF progress ON tinyq_jobs BEGIN
  INSERT INTO tinyq_events (id, queue, state, attempt, at, detail)
  VALUES (NEW.id, NEW.queue, 'progress', NEW.attempt, NEW.changed_at, NEW.progress);
END;

CREATE TRIGGER tinyq_jobs_removed AFTER DELETE ON tinyq_jobs BEGIN
  DELETE FROM tinyq_steps WHERE job = OLD.seq;
END;

-- A cancelled job's id may be added again at once (see store.sql): the new job's attempts
-- continue after the old ones (CAN-01, JOB-05).
CREATE TRIGGER tinyq_jobs_cancel_tombstone AFTER DELETE ON tinyq_jobs
WHEN OLD.status = 'cancelled' AND OLD.attempt > 0 BEGIN
  INSERT OR REPLACE INTO tinyq_tombstones (id, attempt, at) VALUES (OLD.id, OLD.attempt, OLD.changed_at);
END;
