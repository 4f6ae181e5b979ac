-- A trigger enqueues the confirmation email in the same transaction as the order:
-- a committed order has exactly one email job, a rolled-back order has none (JOB-02).
--
-- From the repository root:   sqlite3 < examples/trigger_enqueue.sql
-- (an in-memory database; `sqlite3 shop.db < examples/trigger_enqueue.sql` keeps a new file)

.load ./dist/tinyq
-- tq_add may run in a trigger while trusted_schema is ON (Debian's 3.40 shell has it ON;
-- the shell of current SQLite versions turns it off, so say it).
PRAGMA trusted_schema = ON;

CREATE TABLE orders (id INTEGER PRIMARY KEY, email TEXT NOT NULL);

-- The job's id comes from the order, so the trigger firing twice still adds one job.
CREATE TRIGGER orders_email AFTER INSERT ON orders BEGIN
  SELECT tq_add('emails', json_object('order', NEW.id, 'to', NEW.email),
                json_object('id', 'order-email:' || NEW.id));
END;

.print '1. Order 1, committed:'
BEGIN IMMEDIATE;
INSERT INTO orders VALUES (1, 'ada@example.com');
COMMIT;
SELECT '   ' || id || ' ' || state || ' ' || payload FROM tq_jobs;

.print '2. Order 2, rolled back (its job is visible inside the transaction, then gone):'
BEGIN IMMEDIATE;
INSERT INTO orders VALUES (2, 'bob@example.com');
SELECT '   inside: ' || id || ' ' || state FROM tq_jobs WHERE id = 'order-email:2';
ROLLBACK;
SELECT '   after ROLLBACK: ' || count(*) || ' job(s) for order 2, '
       || (SELECT count(*) FROM orders WHERE id = 2) || ' order row(s)'
FROM tq_jobs WHERE id = 'order-email:2';

.print '3. Order 1 written again (INSERT OR REPLACE fires the trigger again):'
INSERT OR REPLACE INTO orders VALUES (1, 'ada@example.com');
SELECT '   ' || count(*) || ' job(s) for order 1' FROM tq_jobs WHERE id = 'order-email:1';

.print '4. Order 3, in autocommit (the INSERT is its own transaction):'
INSERT INTO orders VALUES (3, 'cy@example.com');
SELECT '   ' || count(*) || ' job(s) for order 3' FROM tq_jobs WHERE id = 'order-email:3';

.print '5. In the end: orders and their email jobs'
SELECT '   order ' || o.id || ': ' || coalesce(j.id || ' ' || j.state, 'no job')
FROM orders o LEFT JOIN tq_jobs j ON j.id = 'order-email:' || o.id
ORDER BY o.id;
SELECT '   jobs in the store: ' || count(*) FROM tq_jobs;

.print '6. A mail worker claims them:'
SELECT '   ' || id || ' attempt ' || attempt || ' to ' || json_extract(payload, '$.to')
FROM tq_claim('emails', 'mailer', 10);
