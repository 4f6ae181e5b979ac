-- tinyq store, version 9: what a new store is created with. A store made by an older
-- tinyq is brought here by sql/migrate_N_to_M.sql instead (tests/fixtures/v1_store.sql to
-- tests/fixtures/v8_store.sql are versions 1 to 8 as they shipped).
-- Every object is named tinyq_*; nothing else is touched.
-- Value columns are declared BLOB: no affinity, so text such as '0012' is kept as given.

CREATE TABLE tinyq_meta (
  key   TEXT PRIMARY KEY,
  value BLOB
) WITHOUT ROWID;

CREATE TABLE tinyq_queues (
  name              TEXT PRIMARY KEY,
  lease             INTEGER,   -- ms; NULL means the default
  timeout           INTEGER,
  attempts          INTEGER,
  backoff           INTEGER,
  backoff_max       INTEGER,
  concurrency       INTEGER,
  rate_n            INTEGER,
  rate_ms           INTEGER,
  group_concurrency INTEGER,
  group_rate_n      INTEGER,
  group_rate_ms     INTEGER,
  dedupe            INTEGER,
  keep              INTEGER,
  paused            INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE tinyq_jobs (
  seq          INTEGER PRIMARY KEY,                -- add order
  id           TEXT NOT NULL UNIQUE,
  queue        TEXT NOT NULL,
  status       TEXT NOT NULL CHECK (status = 'scheduled' OR status = 'queued' OR status = 'running'
                                    OR status = 'done' OR status = 'failed' OR status = 'cancelled'
                                    OR status = 'blocked'),
  grp          TEXT,
  priority     INTEGER NOT NULL DEFAULT 0,
  run_at       INTEGER NOT NULL,             -- blocked: its own time (after) or the wait's timeout (signal)
  attempt      INTEGER NOT NULL DEFAULT 0,   -- number of the latest lease; the fence
  tries        INTEGER NOT NULL DEFAULT 0,   -- attempts charged against the budget
  budget       INTEGER,                      -- this job's own attempts; NULL = the queue's
  lease_until  INTEGER,                      -- set while an attempt holds or held an unsettled lease
  deadline     INTEGER,                      -- the attempt's timeout
  started_at   INTEGER,
  worker       TEXT,
  holder       INTEGER,                      -- tinyq_holders.id of the leasing process
  payload      BLOB,
  result       BLOB,
  error        TEXT,
  progress     BLOB,
  created_at   INTEGER NOT NULL,
  settled_at   INTEGER,
  expires_at   INTEGER,                      -- done/failed only: when the id is freed; NULL while dependents hold it
  changed_at   INTEGER NOT NULL,             -- time of the latest state change (for its event)
  note         BLOB,                         -- detail of the latest state change (for its event)
  meta         BLOB,                         -- a JSON object kept beside the payload (schema 3)
  parked       INTEGER NOT NULL DEFAULT 0,   -- 1: due, set aside until its group has room (schema 4)
  start_by     INTEGER,                      -- tq_add's `expires`: no attempt starts from then (schema 6)
  slot         INTEGER,                      -- the id's row in tinyq_marks; NULL for a generated id (schema 6)
  -- Workflows (schema 7, DEP-01, SIG-01; docs/design.md "Workflows"):
  waits        INTEGER,                      -- blocked on jobs: how many of them have not finished
  signal       TEXT,                         -- blocked on a signal: its name
  after_failed TEXT,                         -- 'run' or 'cancel'; NULL: 'fail'
  held         INTEGER,                      -- dependents not finished yet (they keep this job)
  linked       INTEGER                       -- 1 once the job is on either side of a tinyq_deps row
, last_event INTEGER) -- last_event (version 7, written as ADD COLUMN writes it after the workflows block's rebuild): the seq of the job's latest event, the head of its timeline (see tinyq_events)
;

-- Claim order (JOB-01) over due jobs. A claim walks only the jobs it may start
-- (parked = 0): ungrouped jobs and the head of each group that has room (docs/design.md).
CREATE INDEX tinyq_jobs_queued ON tinyq_jobs (queue, parked, priority DESC, run_at, seq, grp)
  WHERE status = 'queued';
-- The jobs set aside, per group in claim order: the next head of a group is the first here.
CREATE INDEX tinyq_jobs_parked ON tinyq_jobs (queue, grp, priority DESC, run_at, seq)
  WHERE status = 'queued' AND parked = 1;
-- Jobs waiting for their time.
CREATE INDEX tinyq_jobs_scheduled ON tinyq_jobs (queue, run_at) WHERE status = 'scheduled';
-- Jobs that must start by a time (tq_add's `expires`, EXP-01; schema 6), while they wait
-- or are blocked (schema 9): a claim's probe for jobs past it is one seek, empty while
-- nothing expires.
CREATE INDEX tinyq_jobs_expiring ON tinyq_jobs (queue, start_by)
  WHERE start_by IS NOT NULL AND (status = 'scheduled' OR status = 'queued' OR status = 'blocked');
-- Jobs that hold or held a lease: running ones by lease (expires_at NULL), with the group
-- for per-group counts and the holder for DUR-02; done and failed ones by expiry (RET-01).
CREATE INDEX tinyq_jobs_held ON tinyq_jobs (queue, status, expires_at, lease_until, grp, holder)
  WHERE status = 'running' OR status = 'done' OR status = 'failed';

CREATE TABLE tinyq_steps (
  job        INTEGER NOT NULL,   -- tinyq_jobs.seq
  name       TEXT NOT NULL,
  value      BLOB,
  attempt    INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (job, name)
) WITHOUT ROWID;

CREATE TABLE tinyq_events (
  seq     INTEGER PRIMARY KEY,  -- commit order; the newest event is never swept, so it only grows
  id      TEXT NOT NULL,
  queue   TEXT NOT NULL,
  state   TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  at      INTEGER NOT NULL,
  detail  BLOB
, prev INTEGER); -- prev (version 7, written as ADD COLUMN writes it): see the timeline block below

-- ---- A job's timeline without a scan (schema 7) ---------------------------------------
-- Each job's events form a chain, newest first: tinyq_jobs.last_event is the seq of the job's
-- latest event and tinyq_events.prev the seq of the same job's event before it (NULL for the
-- first), so tq_watch's `job` filter walks the job's own events by rowid, however long the
-- log (docs/design.md, "A job's timeline"). The statements that log an event set last_event
-- to the seq that event gets (src/timeline.rs); the event triggers write prev from
-- OLD.last_event. No index: one by job costs each event a b-tree insert.
-- ---- end of the timeline block -----------------------------------------------------------

CREATE TABLE tinyq_starts (
  queue TEXT NOT NULL,
  grp   TEXT,
  at    INTEGER NOT NULL
);
CREATE INDEX tinyq_starts_queue ON tinyq_starts (queue, at, grp);

-- Counters per queue, kept by the triggers below (jobs per stored status) and by claims
-- (starts in the rate window). `started` counts the queue's starts with at > `edge`: a
-- claim moves `edge` to now - window and counts out, once each, the starts it passes.
-- `gedge` is the same edge for the group rate window (the groups' own counts).
-- `spill` (schema 5) says how the queue's line is counted for tq_get's `ahead`: NULL, one
-- bucket of at most 1024 jobs, counted by `queued`; otherwise cut into buckets (the
-- long-lines block): the first counted by `front` and ending at next_*, the others by
-- tinyq_buckets, and `spill` is what the latest change did to those, for
-- tinyq_counts_spilled to apply ('': nothing more than `front`).
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
, spill TEXT, blocked INTEGER NOT NULL DEFAULT 0, front INTEGER, next_priority INTEGER, next_run_at INTEGER, next_seq INTEGER) WITHOUT ROWID; -- spill: version 5, blocked: version 7, front and next_*: version 8 (the long-lines block), written as ADD COLUMN writes them

-- One row per group of a queue with group limits that has due or running jobs: its
-- running leases, its starts with at > the queue's gedge, and its head (the one job of
-- the group a claim may take: parked = 0), NULL when the group has no room or no due job.
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

CREATE TABLE tinyq_holders (
  id      INTEGER PRIMARY KEY,
  machine TEXT NOT NULL,    -- machine id and boot id
  pid     INTEGER NOT NULL,
  started INTEGER NOT NULL, -- process start time, in clock ticks since boot
  seen_at INTEGER NOT NULL,
  UNIQUE (machine, pid, started)
);

-- Events: every state change is logged by these triggers, so no code path can forget one.
-- The same triggers keep the counters (tinyq_counts, tinyq_groups) in step with the jobs, in
-- the statement that changes them, so a claim or tq_stats reads a count instead of counting.
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

CREATE TRIGGER tinyq_queues_added AFTER INSERT ON tinyq_queues BEGIN
  INSERT OR IGNORE INTO tinyq_counts (queue) VALUES (NEW.name);
END;

-- A queue's counters row is made by its first job (tinyq_jobs_added) or by tq_queue
-- (tinyq_queues_added); either way the queue has its row, made once rather than tried by
-- every add (schema 9).
CREATE TRIGGER tinyq_counts_added AFTER INSERT ON tinyq_counts BEGIN
  INSERT OR IGNORE INTO tinyq_queues (name) VALUES (NEW.queue);
END;

-- A change of status moves a line cut into buckets (or grown past 1024 jobs) when the job
-- joins or leaves it (spill: see tinyq_counts). Apart from tinyq_jobs_changed, so that its
-- counts fire no trigger of tinyq_counts, and on `UPDATE OF grp` (schema 9): SQLite starts
-- a fired trigger's program, sized for its whole body, before it tests the WHEN, so the
-- statements that change a status name `grp = grp` (timeline.rs, next_event!) except a
-- settle that cannot touch a line or a group (an ungrouped job's done from running). Created
-- before tinyq_jobs_changed, so that it fires after it (SQLite fires a change's triggers
-- newest first) and reads `queued` as counted. A job of the first bucket changes `front`
-- alone (no trigger); `spill` is written only for what the buckets must do, read after
-- that `front`: a job past the first bucket, a first bucket over 1024 jobs or empty.
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

-- ---- long-lines (schema 8): a long line's first bucket counted in tinyq_counts ----------
-- A line of over 1024 jobs is cut into buckets (schema 5), so that tq_get's `ahead` counts
-- rather than walks (COST-01; docs/design.md, "tq_get's `ahead`"). The first bucket, from
-- the front of the line, is where claims take their jobs: it has no row (schema 8). Its jobs
-- are counted in tinyq_counts.front, and it ends where the second bucket starts, the job
-- (next_priority, next_run_at, next_seq) of the same row. So a claim and a settle in a long
-- line write nothing but the counts row they write anyway, and fire no trigger more than in
-- a short one (schemas 5 to 7 kept the first bucket in a row, and each claim paid that row,
-- its span and three triggers). Every other bucket is a row of tinyq_buckets: it starts at
-- the job (priority, run_at, seq) whose claim-order key is `key`
-- (printf('%08x%d%016x%016x', 2147483647 - priority, run_at >= 0, run_at, seq) compares as
-- (priority DESC, run_at, seq)), and `n` counts the queued jobs, parked or not, from its key
-- to the next row's. A bucket over 1024 jobs is cut at its 512th; an empty one goes (an empty
-- first bucket takes the second's jobs, whose row goes); a line left with one bucket has no
-- rows, and `front` and `next_*` NULL.
CREATE TABLE tinyq_buckets (
  queue    TEXT NOT NULL,
  key      TEXT NOT NULL,
  n        INTEGER,
  priority INTEGER,
  run_at   INTEGER,
  seq      INTEGER,
  PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- The bucket rows of a line, in spans of 1 to 64 rows (a second level, so that summing the
-- buckets before a job stays flat with the line): a span starts at `key` ('' the first)
-- and holds the rows from there to the next span, `buckets` of them with `n` jobs in all.
-- Kept by the triggers on tinyq_buckets, from each row's change; a span over 64 buckets is
-- cut at its 33rd, an empty one goes (the next one becomes '' when the first goes).
CREATE TABLE tinyq_spans (
  queue   TEXT NOT NULL,
  key     TEXT NOT NULL,
  n       INTEGER,
  buckets INTEGER,
  PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- What a change did to a line cut into buckets (tinyq_counts.spill, set by the jobs'
-- triggers): '+key' or '-key', the bucket row holding key (the last whose key is not after
-- it) gains or loses a job; '>', the first bucket is over 1024 jobs, or '<', it is empty
-- (tinyq_buckets_front, below, cuts it or gives it the second's jobs; the UPDATE then finds
-- no row for them: no key is before ''). A trigger of its own, with a WHEN and a body
-- as small as schema 7's: a claim or a settle in a line of any length pays one test, while
-- the job is in the first bucket.
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

-- A bucket over 1024 jobs is cut at its 512th in line (the two ranges of the claim index,
-- parked or not, merged in claim order): once per 512 jobs added to it.
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

-- A bucket's jobs, and the bucket itself, count in its span: the last one whose key is not
-- after its own (the first row of a line makes the first span, '').
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

-- A span over 64 buckets is cut at its 33rd (a walk of 32 rows, once per 32 buckets made);
-- an empty one goes, and when it was the first, the next one starts at '' instead.
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

-- A group of a queue with group limits has a row: its running leases, its head, and
-- `dirty` when its room or its due jobs changed (the next claim promotes its next head).
-- A job added set aside marks its group in the add itself (jobs.rs, mark_group; schema 9:
-- a trigger on every insert cost each add its program). A change of status does here, on
-- `UPDATE OF grp` as tinyq_jobs_lined and for the same reason.
CREATE TRIGGER tinyq_jobs_grouped AFTER UPDATE OF grp ON tinyq_jobs
WHEN NEW.grp IS NOT NULL AND OLD.status IS NOT NEW.status BEGIN
  INSERT INTO tinyq_groups (queue, grp, dirty) SELECT NEW.queue, NEW.grp, 1
  WHERE NEW.parked = 1 OR EXISTS (SELECT 1 FROM tinyq_groups WHERE queue = NEW.queue AND grp = NEW.grp)
  ON CONFLICT (queue, grp) DO UPDATE SET
    running = running + (NEW.status = 'running') - (OLD.status = 'running'),
    head = CASE WHEN head = OLD.seq THEN NULL ELSE head END,
    dirty = 1;
END;

-- A replace (tq_add's on_conflict 'replace' or 'debounce', KEY-01; schema 6) is the one
-- write of a job's payload after its insert: a job that has not started takes a new
-- payload, time, priority and group. A change of status is logged and counted by
-- tinyq_jobs_changed; without one, the event is logged here (detail {"replaced":true}), and
-- a job that stays in a line cut into buckets joins its new place's bucket, then leaves its
-- old one's (in that order, so that no bucket is dropped while the line is still long; one
-- that stays in the first bucket changes neither, so no cut walks the line without it).
-- The groups it leaves and joins are marked dirty (its old group's head cleared if it was
-- that head), so the next claim promotes their heads (limits/groups.rs).
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

-- Attempts across the jobs of one id (JOB-05, version 6): an attempt belongs to one job for
-- ever, so once a job is gone (done or failed and swept, cancelled) a job added later with
-- the same id numbers its attempts after every attempt the id ever had. Each chosen id has
-- a slot (tinyq_jobs.slot: 16 bits of a hash of the id, computed by tinyq, src/marks.rs);
-- a slot's mark is the highest attempt of any job of its ids that is gone, and a new job of
-- a chosen id starts from its slot's mark. Generated ids never repeat and have no slot. At
-- most 65536 rows, whatever the number of ids (docs/design.md, "Attempts across jobs").
CREATE TABLE tinyq_marks (
  slot    INTEGER PRIMARY KEY,
  attempt INTEGER NOT NULL
);

CREATE TRIGGER tinyq_jobs_marked AFTER DELETE ON tinyq_jobs
WHEN OLD.slot IS NOT NULL AND OLD.attempt > 0 BEGIN
  INSERT INTO tinyq_marks (slot, attempt) VALUES (OLD.slot, OLD.attempt)
  ON CONFLICT (slot) DO UPDATE SET attempt = excluded.attempt WHERE excluded.attempt > attempt;
END;

-- Periodic jobs (version 3). Each due time of a schedule becomes one job of its queue, with
-- the id '<name>@<due time, ISO-8601 UTC>', added by the next claim on that queue (CRON-01).
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

-- What a claim on a queue looks up first: its live schedules' next due times.
CREATE INDEX tinyq_schedules_due ON tinyq_schedules (queue, next_at) WHERE paused = 0;

-- ---- Workflows (schema 7: DEP-01, SIG-01; docs/design.md, "Workflows") ------------------
-- A blocked job is in none of the indexes above (each names the statuses it holds), so
-- claims, limits and `ahead` never see it. It waits for jobs (`waits` of them unfinished,
-- the rows of tinyq_deps) or for a signal (`signal`, with the wait's timeout as run_at).

-- Dependencies: `job` waits or waited for `dep` (both tinyq_jobs.seq). By `dep`, the settle
-- that finishes a job finds its dependents; by `job`, tq_deps lists a job's dependencies.
-- `resolved` is 1 once `dep` finished and `job` took it into account (each edge once, even
-- if `dep` is retried and finishes again), 2 once `job` finished too and let `dep` go.
CREATE TABLE tinyq_deps (
  dep      INTEGER NOT NULL,
  job      INTEGER NOT NULL,
  resolved INTEGER,
  PRIMARY KEY (dep, job)
) WITHOUT ROWID;
CREATE INDEX tinyq_deps_job ON tinyq_deps (job, dep);

-- The jobs that wait for a signal, by name (tq_signal wakes them), and by timeout (a claim
-- makes the ones past it due, as it does scheduled jobs). `signal` is set only while a job
-- is blocked on it, so the condition names that column alone: the UPDATEs of claims and
-- settles, which never write it, leave both indexes alone.
CREATE INDEX tinyq_jobs_signal ON tinyq_jobs (signal) WHERE signal IS NOT NULL;
CREATE INDEX tinyq_jobs_timeout ON tinyq_jobs (queue, run_at) WHERE signal IS NOT NULL;

-- Signals sent (tq_signal), each kept until `keep_until` so that a wait that begins later
-- returns at once; the first payload sent for a name is the one kept.
CREATE TABLE tinyq_signals (
  name       TEXT PRIMARY KEY,
  payload    BLOB,
  sent_at    INTEGER NOT NULL,
  keep_until INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX tinyq_signals_kept ON tinyq_signals (keep_until);

-- A job that goes takes its edges with it, both ways (a trigger with a WHEN: a job never
-- in a workflow pays one test).
CREATE TRIGGER tinyq_jobs_unlinked AFTER DELETE ON tinyq_jobs WHEN OLD.linked IS NOT NULL BEGIN
  DELETE FROM tinyq_deps WHERE job = OLD.seq;
  DELETE FROM tinyq_deps WHERE dep = OLD.seq;
END;

-- ---- end of the workflows block -----------------------------------------------------------
