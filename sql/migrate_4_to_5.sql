-- From store version 4 to 5: the line of each queue cut into counted buckets, so that
-- tq_get's `ahead` counts rather than walks (COST-01; docs/design.md, "tq_get's `ahead`").
-- The result is what sql/store.sql creates (tests/test_migrations.py compares the two).
--
-- tinyq_counts gets `spill` (ADD COLUMN rewrites no row); tinyq_buckets and tinyq_spans are
-- new; the triggers that write them are created again with their new bodies. The lines of over
-- 1024 queued jobs are cut here, 512 jobs to a bucket, from the queued jobs in claim order
-- (one sort of the queued jobs, once).

ALTER TABLE tinyq_counts ADD COLUMN spill TEXT;

CREATE TABLE tinyq_buckets (
  queue    TEXT NOT NULL,
  key      TEXT NOT NULL,
  n        INTEGER,
  priority INTEGER,
  run_at   INTEGER,
  seq      INTEGER,
  PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- Job i (from 1, in claim order) of such a line starts a bucket when i = 1, 513, 1025, ...
INSERT INTO tinyq_buckets (queue, key, n, priority, run_at, seq)
SELECT queue, iif(i = 1, '', printf('%08x%d%016x%016x', 2147483647 - priority, run_at >= 0, run_at, seq)),
       min(512, total - i + 1), iif(i = 1, NULL, priority), iif(i = 1, NULL, run_at), iif(i = 1, NULL, seq)
FROM (SELECT queue, priority, run_at, seq, count(*) OVER (PARTITION BY queue) AS total,
             row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, seq) AS i
      FROM tinyq_jobs WHERE status = 'queued')
WHERE i % 512 = 1 AND total > 1024;
UPDATE tinyq_counts SET spill = '' WHERE queue IN (SELECT queue FROM tinyq_buckets);

CREATE TABLE tinyq_spans (
  queue   TEXT NOT NULL,
  key     TEXT NOT NULL,
  n       INTEGER,
  buckets INTEGER,
  PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- Bucket i (from 1, in key order) of a line starts a span when i = 1, 33, 65, ...
INSERT INTO tinyq_spans (queue, key, n, buckets)
SELECT queue, min(key), sum(n), count(*)
FROM (SELECT queue, key, n, row_number() OVER (PARTITION BY queue ORDER BY key) AS i FROM tinyq_buckets)
GROUP BY queue, (i - 1) / 32;

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
    spill = CASE WHEN spill IS NULL THEN CASE WHEN NEW.status = 'queued' AND queued >= 1024 THEN '*' END
                 WHEN NEW.status = 'queued' THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                 WHEN OLD.status = 'queued' THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq + (spill IS NULL)) ELSE '' END
  WHERE queue = NEW.queue AND OLD.status IS NOT NEW.status;
END;

CREATE TRIGGER tinyq_counts_spilled AFTER UPDATE OF spill ON tinyq_counts WHEN NEW.spill <> '' BEGIN
  INSERT OR IGNORE INTO tinyq_buckets (queue, key, n) SELECT NEW.queue, '', NEW.queued - 1 WHERE NEW.spill = '*';
  UPDATE tinyq_buckets SET n = n + CASE WHEN NEW.spill LIKE '-%' THEN -1 ELSE 1 END
  WHERE queue = NEW.queue AND key = CASE WHEN NEW.spill = '*' THEN '' ELSE (
    SELECT key FROM tinyq_buckets WHERE queue = NEW.queue AND key <= substr(NEW.spill, 2) ORDER BY key DESC LIMIT 1) END;
END;

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

CREATE TRIGGER tinyq_buckets_added AFTER INSERT ON tinyq_buckets BEGIN
  INSERT OR IGNORE INTO tinyq_spans (queue, key, n, buckets) SELECT NEW.queue, '', 0, 0 WHERE NEW.key = '';
  UPDATE tinyq_spans SET n = n + NEW.n, buckets = buckets + 1 WHERE queue = NEW.queue AND key = (SELECT key FROM tinyq_spans WHERE queue = NEW.queue AND key <= NEW.key ORDER BY key DESC LIMIT 1);
END;

CREATE TRIGGER tinyq_buckets_counted AFTER UPDATE OF n ON tinyq_buckets WHEN NEW.n IS NOT OLD.n BEGIN
  UPDATE tinyq_spans SET n = n + NEW.n - OLD.n WHERE queue = NEW.queue AND key = (SELECT key FROM tinyq_spans WHERE queue = NEW.queue AND key <= NEW.key ORDER BY key DESC LIMIT 1);
END;

CREATE TRIGGER tinyq_buckets_removed AFTER DELETE ON tinyq_buckets BEGIN
  UPDATE tinyq_spans SET n = n - OLD.n, buckets = buckets - 1 WHERE queue = OLD.queue AND key = (SELECT key FROM tinyq_spans WHERE queue = OLD.queue AND key <= OLD.key ORDER BY key DESC LIMIT 1);
END;

CREATE TRIGGER tinyq_spans_split AFTER UPDATE OF buckets ON tinyq_spans WHEN NEW.buckets > 64 BEGIN
  INSERT OR IGNORE INTO tinyq_spans (queue, key, n, buckets)
  SELECT NEW.queue, min(key), sum(n), count(*) FROM (SELECT key, n FROM tinyq_buckets
    WHERE queue = NEW.queue AND key >= NEW.key ORDER BY key LIMIT NEW.buckets - 32 OFFSET 32);
  UPDATE tinyq_spans SET buckets = 32, n = NEW.n - (SELECT s.n FROM tinyq_spans s WHERE s.queue = NEW.queue
    AND s.key = (SELECT key FROM tinyq_buckets WHERE queue = NEW.queue AND key >= NEW.key ORDER BY key LIMIT 1 OFFSET 32))
  WHERE queue = NEW.queue AND key = NEW.key;
END;

CREATE TRIGGER tinyq_spans_emptied AFTER UPDATE OF buckets ON tinyq_spans WHEN NEW.buckets = 0 BEGIN
  DELETE FROM tinyq_spans WHERE queue = NEW.queue AND key = NEW.key;
END;

CREATE TRIGGER tinyq_buckets_emptied AFTER UPDATE OF n ON tinyq_buckets WHEN NEW.n = 0 BEGIN
  UPDATE tinyq_buckets SET n = (SELECT n FROM tinyq_buckets WHERE queue = NEW.queue AND key > '' ORDER BY key LIMIT 1)
  WHERE NEW.key = '' AND queue = NEW.queue AND key = ''
    AND EXISTS (SELECT 1 FROM tinyq_buckets WHERE queue = NEW.queue AND key > '');
  DELETE FROM tinyq_buckets WHERE queue = NEW.queue AND key = CASE WHEN NEW.key <> '' THEN NEW.key
    ELSE (SELECT min(key) FROM tinyq_buckets WHERE queue = NEW.queue AND key > '') END;
  UPDATE tinyq_counts SET spill = NULL WHERE queue = NEW.queue
    AND NOT EXISTS (SELECT 1 FROM tinyq_buckets WHERE queue = NEW.queue AND key > '');
  DELETE FROM tinyq_buckets WHERE queue = NEW.queue
    AND NOT EXISTS (SELECT 1 FROM tinyq_buckets WHERE queue = NEW.queue AND key > '');
END;

CREATE TRIGGER tinyq_jobs_removed AFTER DELETE ON tinyq_jobs BEGIN
  DELETE FROM tinyq_steps WHERE job = OLD.seq;
  -- A cancelled job was counted out when it was marked; done and failed ones go here.
  UPDATE tinyq_counts SET done = done - (OLD.status = 'done'), failed = failed - (OLD.status = 'failed'),
    scheduled = scheduled - (OLD.status = 'scheduled'), queued = queued - (OLD.status = 'queued'),
    running = running - (OLD.status = 'running'),
    spill = CASE WHEN spill IS NULL THEN NULL WHEN OLD.status = 'queued' THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq + (spill IS NULL)) ELSE '' END
  WHERE queue = OLD.queue AND OLD.status <> 'cancelled';
END;
