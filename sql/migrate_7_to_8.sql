-- From store version 7 to 8. The result is what sql/store.sql creates
-- (tests/test_migrations.py compares the two). Each change of version 8 is a block of its
-- own below, headed by what it is for.

-- ---- long-lines: a long line's first bucket counted in tinyq_counts (docs/design.md, "tq_get's `ahead`")
-- The first bucket of a line cut into buckets loses its row (key '') to four columns of
-- tinyq_counts: its jobs (`front`) and where it ends (next_*, the start of the second). The
-- lines are cut again in the new shape, from the queued jobs in claim order (one sort of the
-- queued jobs, once), with the triggers of tinyq_buckets and tinyq_spans dropped, as schema 5
-- cut them; those triggers and the four of tinyq_jobs that write `spill` are created again.
-- tq_check's recount cuts lines with the statements of this block that write rows
-- (src/store.rs, recut_lines): the INSERTs, UPDATEs and DELETEs before its first CREATE TRIGGER.

ALTER TABLE tinyq_counts ADD COLUMN front INTEGER;
ALTER TABLE tinyq_counts ADD COLUMN next_priority INTEGER;
ALTER TABLE tinyq_counts ADD COLUMN next_run_at INTEGER;
ALTER TABLE tinyq_counts ADD COLUMN next_seq INTEGER;

DROP TRIGGER tinyq_counts_spilled;
DROP TRIGGER tinyq_buckets_split;
DROP TRIGGER tinyq_buckets_added;
DROP TRIGGER tinyq_buckets_counted;
DROP TRIGGER tinyq_buckets_removed;
DROP TRIGGER tinyq_spans_split;
DROP TRIGGER tinyq_spans_emptied;
DROP TRIGGER tinyq_buckets_emptied;

DELETE FROM tinyq_spans;
DELETE FROM tinyq_buckets;
UPDATE tinyq_counts SET spill = NULL, front = NULL, next_priority = NULL, next_run_at = NULL, next_seq = NULL;
-- Job i (from 1, in claim order) of a line over 1024 jobs starts a bucket when i = 513,
-- 1025, ... (jobs 1 to 512 are the first bucket, which has no row).
INSERT INTO tinyq_buckets (queue, key, n, priority, run_at, seq)
SELECT queue, printf('%08x%d%016x%016x', 2147483647 - priority, run_at >= 0, run_at, seq),
       min(512, total - i + 1), priority, run_at, seq
FROM (SELECT queue, priority, run_at, seq, count(*) OVER (PARTITION BY queue) AS total,
             row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, seq) AS i
      FROM tinyq_jobs WHERE status = 'queued')
WHERE i % 512 = 1 AND i > 1 AND total > 1024;
UPDATE tinyq_counts SET spill = '', front = 512,
  (next_priority, next_run_at, next_seq) = (SELECT priority, run_at, seq FROM tinyq_buckets b
                                            WHERE b.queue = tinyq_counts.queue ORDER BY key LIMIT 1)
WHERE queue IN (SELECT queue FROM tinyq_buckets);
-- Row i (from 1, in key order) of a line starts a span when i = 1, 33, 65, ...; the first at ''.
INSERT INTO tinyq_spans (queue, key, n, buckets)
SELECT queue, iif((i - 1) / 32 = 0, '', min(key)), sum(n), count(*)
FROM (SELECT queue, key, n, row_number() OVER (PARTITION BY queue ORDER BY key) AS i FROM tinyq_buckets)
GROUP BY queue, (i - 1) / 32;

DROP TRIGGER tinyq_jobs_added;
DROP TRIGGER tinyq_jobs_changed;
DROP TRIGGER tinyq_jobs_replaced;
DROP TRIGGER tinyq_jobs_removed;

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
                 WHEN spill IS NULL THEN CASE WHEN queued >= 1024 THEN '>' END
                 WHEN (next_priority, NEW.run_at, NEW.seq) >= (NEW.priority, next_run_at, next_seq) THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                 WHEN front >= 1024 THEN '>' ELSE '' END,
    front = CASE WHEN spill IS NULL THEN NULL ELSE front + (NEW.status = 'queued' AND (next_priority, NEW.run_at, NEW.seq) < (NEW.priority, next_run_at, next_seq)) END
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
    blocked = blocked + (NEW.status = 'blocked') - (OLD.status = 'blocked'),
    spill = CASE WHEN spill IS NULL THEN CASE WHEN NEW.status = 'queued' AND queued >= 1024 THEN '>' END
                 WHEN NEW.status = 'queued' THEN CASE WHEN (next_priority, NEW.run_at, NEW.seq) >= (NEW.priority, next_run_at, next_seq) THEN '+' || printf('%08x%d%016x%016x', 2147483647 - NEW.priority, NEW.run_at >= 0, NEW.run_at, NEW.seq + (spill IS NULL))
                                                      WHEN front >= 1024 THEN '>' ELSE '' END
                 WHEN OLD.status = 'queued' THEN CASE WHEN (next_priority, OLD.run_at, OLD.seq) >= (OLD.priority, next_run_at, next_seq) THEN '-' || printf('%08x%d%016x%016x', 2147483647 - OLD.priority, OLD.run_at >= 0, OLD.run_at, OLD.seq + (spill IS NULL))
                                                      WHEN front <= 1 THEN '<' ELSE '' END ELSE '' END,
    front = CASE WHEN spill IS NULL THEN NULL
                 WHEN NEW.status = 'queued' THEN front + ((next_priority, NEW.run_at, NEW.seq) < (NEW.priority, next_run_at, next_seq))
                 WHEN OLD.status = 'queued' THEN front - ((next_priority, OLD.run_at, OLD.seq) < (OLD.priority, next_run_at, next_seq)) ELSE front END
  WHERE queue = NEW.queue AND OLD.status IS NOT NEW.status;
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

CREATE TRIGGER tinyq_counts_spilled AFTER UPDATE OF spill ON tinyq_counts WHEN NEW.spill <> '' BEGIN
  INSERT OR IGNORE INTO tinyq_buckets (queue, key, n) SELECT NEW.queue, '', 0 WHERE NEW.spill = '>' OR NEW.spill = '<';
  UPDATE tinyq_buckets SET n = n + CASE WHEN NEW.spill LIKE '-%' THEN -1 ELSE 1 END
  WHERE queue = NEW.queue AND key = (
    SELECT key FROM tinyq_buckets WHERE queue = NEW.queue AND key <= substr(NEW.spill, 2) ORDER BY key DESC LIMIT 1);
END;

-- The first bucket's turn (tinyq_counts_spilled adds a row '' for it, which goes at once):
-- over 1024 jobs (`front` NULL: the line just grew past 1024), it is cut at its 512th job,
-- the new row starting at its 513th (the INSERT comes first: see docs/design.md); empty, it
-- takes the second's jobs, whose row is emptied, so it goes (tinyq_buckets_counted). On
-- tinyq_buckets rather than in tinyq_counts_spilled's body: SQLite starts a fired trigger's
-- program, sized for its whole body, before it tests the WHEN, and that one fires for
-- every change of a job.
CREATE TRIGGER tinyq_buckets_front AFTER INSERT ON tinyq_buckets WHEN NEW.key = '' BEGIN
  INSERT INTO tinyq_buckets (queue, key, n, priority, run_at, seq)
  SELECT NEW.queue, printf('%08x%d%016x%016x', 2147483647 - j.priority, j.run_at >= 0, j.run_at, j.seq),
         c.jobs - 512, j.priority, j.run_at, j.seq
  FROM (SELECT ifnull(front, queued) AS jobs FROM tinyq_counts WHERE queue = NEW.queue AND ifnull(front, queued) > 1024) AS c,
       (SELECT priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued' AND queue = NEW.queue AND parked = 0
        UNION ALL SELECT priority, run_at, seq FROM tinyq_jobs WHERE status = 'queued' AND queue = NEW.queue AND parked = 1
        ORDER BY 1 DESC, 2, 3 LIMIT 1 OFFSET 512) AS j;
  DELETE FROM tinyq_buckets WHERE queue = NEW.queue AND key = '';
  UPDATE tinyq_counts SET front = 512,
    (next_priority, next_run_at, next_seq) = (SELECT priority, run_at, seq FROM tinyq_buckets WHERE queue = NEW.queue ORDER BY key LIMIT 1)
  WHERE queue = NEW.queue AND ifnull(front, queued) > 1024;
  UPDATE tinyq_buckets SET n = 0 WHERE queue = NEW.queue AND key = (SELECT min(key) FROM tinyq_buckets WHERE queue = NEW.queue)
    AND (SELECT front FROM tinyq_counts WHERE queue = NEW.queue) = 0;
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

CREATE TRIGGER tinyq_buckets_added AFTER INSERT ON tinyq_buckets WHEN NEW.key <> '' BEGIN
  INSERT OR IGNORE INTO tinyq_spans (queue, key, n, buckets) VALUES (NEW.queue, '', 0, 0);
  UPDATE tinyq_spans SET n = n + NEW.n, buckets = buckets + 1 WHERE queue = NEW.queue AND key = (SELECT key FROM tinyq_spans WHERE queue = NEW.queue AND key <= NEW.key ORDER BY key DESC LIMIT 1);
END;

-- A bucket row's change counts in its span; an empty row goes (its jobs, if any, to an empty
-- first bucket: tinyq_buckets_front), and the first bucket then ends where the first row left starts; a line left with no rows is one bucket, counted by
-- tinyq_counts.queued alone again. One trigger, in this order: SQLite fires the triggers of
-- one change newest first, so an emptied row deleted by a trigger of its own would empty
-- its span before the span's count was taken off.
CREATE TRIGGER tinyq_buckets_counted AFTER UPDATE OF n ON tinyq_buckets WHEN NEW.n IS NOT OLD.n BEGIN
  UPDATE tinyq_spans SET n = n + NEW.n - OLD.n WHERE queue = NEW.queue AND key = (SELECT key FROM tinyq_spans WHERE queue = NEW.queue AND key <= NEW.key ORDER BY key DESC LIMIT 1);
  UPDATE tinyq_counts SET front = OLD.n WHERE NEW.n = 0 AND queue = NEW.queue AND front = 0;
  DELETE FROM tinyq_buckets WHERE NEW.n = 0 AND queue = NEW.queue AND key = NEW.key;
  UPDATE tinyq_counts SET (next_priority, next_run_at, next_seq) =
    (SELECT priority, run_at, seq FROM tinyq_buckets WHERE queue = NEW.queue ORDER BY key LIMIT 1)
  WHERE NEW.n = 0 AND queue = NEW.queue;
  UPDATE tinyq_counts SET spill = NULL, front = NULL WHERE NEW.n = 0 AND queue = NEW.queue AND next_seq IS NULL;
END;

CREATE TRIGGER tinyq_buckets_removed AFTER DELETE ON tinyq_buckets WHEN OLD.key <> '' BEGIN
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
  UPDATE tinyq_spans SET key = '' WHERE NEW.key = '' AND queue = NEW.queue
    AND key = (SELECT min(key) FROM tinyq_spans WHERE queue = NEW.queue);
END;

-- ---- end of the long-lines block ---------------------------------------------------------
