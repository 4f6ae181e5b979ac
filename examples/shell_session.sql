-- A tinyq session in the sqlite3 shell, in SQL only: add, claim, settle, watch.
-- From the repository root:   sqlite3 < examples/shell_session.sql
-- It prints examples/shell_session.out (the clock is pinned, so every run prints the same).
.load ./dist/tinyq
.headers on
.mode column
.echo on

-- Pin this connection's clock to 12:00:00 (tq_clock(NULL) unpins it).
SELECT tq_clock('2026-11-29T12:00:00Z') AS now;

-- A queue with a 1-minute lease. Three jobs with chosen ids; one jumps the line,
-- one is due in 5 minutes. Adding an id that is present adds nothing.
SELECT json_extract(tq_queue('thumbs', '{"lease": "1m"}'), '$.lease') AS lease_ms;
SELECT tq_add('thumbs', '{"photo": 1}', '{"id": "thumb:1"}') AS added;
SELECT tq_add('thumbs', '{"photo": 2}', '{"id": "thumb:2", "priority": 10}') AS added;
SELECT tq_add('thumbs', '{"photo": 3}', '{"id": "thumb:3", "delay": "5m"}') AS added;
SELECT tq_add('thumbs', '{"photo": 1}', '{"id": "thumb:1"}') AS added_again;
SELECT id, state, priority, time(run_at / 1000, 'unixepoch') AS due FROM tq_jobs;

-- A worker claims up to 10 due jobs: priority first. Each gets a lease and an attempt.
SELECT id, attempt, payload, time(lease_until / 1000, 'unixepoch') AS lease_until
FROM tq_claim('thumbs', 'worker-1', 10);

-- It reports progress, then settles: thumb:2 is done; thumb:1 asks to run again in 30s.
SELECT tq_progress('thumb:2', 1, '{"percent": 50}') AS reported;
SELECT tq_settle('thumb:2', 1, 'done', '{"bytes": 2048}') AS settled;
SELECT tq_settle('thumb:1', 1, 'retry', '30s') AS settled;
-- Settling the same attempt again is stale: it changes nothing (0).
SELECT tq_settle('thumb:2', 1, 'fail', 'too late') AS settled;
SELECT id, state, attempt, time(run_at / 1000, 'unixepoch') AS due, result FROM tq_jobs;

-- Ten minutes later everything is due; a second worker takes the rest.
SELECT tq_clock('2026-11-29T12:10:00Z') AS now;
SELECT id, attempt FROM tq_claim('thumbs', 'worker-2', 10);
SELECT tq_settle('thumb:1', 2, 'done', '{"bytes": 1024}') AS settled;
SELECT tq_settle('thumb:3', 1, 'fail', 'photo not found') AS settled;

-- Watch: every state change, in commit order (a watcher remembers the last seq it saw).
SELECT seq, id, state, attempt, time(at / 1000, 'unixepoch') AS at, detail FROM tq_watch(0);
SELECT seq, id, state FROM tq_watch(12);

-- One job in full, and the queue at a glance.
SELECT json_extract(tq_get('thumb:3'), '$.state', '$.attempt', '$.error') AS "thumb:3";
SELECT queue, waiting, running, done, failed FROM tq_stats('thumbs');
