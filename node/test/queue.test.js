'use strict';
// The Queue methods other than work(): add, get, cancel, retry, watch, settings, load/open.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');

const { all, exec, plainDb, tempDb, transaction, value } = require('../test-support');

test('open() loads tinyq and sets WAL, synchronous=FULL, busy_timeout', () => {
  const db = tinyq.open(tempDb());
  assert.match(value(db, 'SELECT tq_version()'), /^\d+\.\d+/);
  assert.equal(value(db, 'PRAGMA journal_mode'), 'wal');
  assert.equal(value(db, 'PRAGMA synchronous'), 2);
  assert.equal(value(db, 'PRAGMA busy_timeout'), 5000);
  db.close();
});

test('load() loads tinyq into a Database of yours', () => {
  const db = tinyq.load(plainDb(':memory:'));
  assert.equal(typeof value(db, 'SELECT tq_now()'), 'number');
  db.close();
});

test('add and get: payload as JSON, options, dedupe by id, null for no job', () => {
  const q = new tinyq.Queue(tempDb(), 'mail');
  const id = q.add({ to: 'ann', n: 1 });
  assert.match(id, /^tq_/);
  const job = q.get(id);
  assert.equal(job.queue, 'mail');
  assert.equal(job.state, 'waiting');
  assert.deepEqual(job.payload, { to: 'ann', n: 1 });

  assert.equal(q.add('plain text', { id: 'reply:41', priority: 5, group: 'ann', attempts: 3 }), 'reply:41');
  const chosen = q.get('reply:41');
  assert.equal(chosen.payload, 'plain text');
  assert.equal(chosen.priority, 5);
  assert.equal(chosen.group, 'ann');
  assert.equal(chosen.attempts, 3);
  assert.equal(q.add('another', { id: 'reply:41' }), 'reply:41'); // DEDUPE: adds nothing
  assert.equal(q.get('reply:41').payload, 'plain text');

  assert.equal(q.get(q.add({}, { delay: '1h' })).state, 'scheduled');
  const at = new Date(Date.now() + 60000);
  assert.equal(q.get(q.add({}, { at })).run_at, at.getTime());
  assert.equal(q.get('no such job'), null);
  q.close();
});

test('a bad option is the extension\'s error, naming the key', () => {
  const q = new tinyq.Queue(tempDb(), 'mail');
  assert.throws(() => q.add({}, { delay: '5 minutes' }), /tq_add: .*delay/);
  q.close();
});

test('add runs inside the caller\'s transaction and rolls back with it', () => {
  const db = tinyq.open(tempDb());
  const q = new tinyq.Queue(db, 'mail');
  exec(db, 'CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)');
  const sendLater = transaction(db, (body, fail) => {
    const id = value(db, 'INSERT INTO messages (body) VALUES (?) RETURNING id', body);
    q.add({ message: id }, { id: `send:${body}` });
    if (fail) throw new Error('rolled back');
  });
  sendLater('kept', false);
  assert.throws(() => sendLater('lost', true), /rolled back/);
  assert.notEqual(q.get('send:kept'), null);
  assert.equal(q.get('send:lost'), null);
  assert.equal(value(db, 'SELECT count(*) FROM messages'), 1);
  db.close();
});

test('cancel, retry, watch and settings', () => {
  const q = new tinyq.Queue(tempDb(), 'jobs');
  assert.equal(q.settings().lease, 30000);
  const s = q.settings({ lease: '2s', attempts: 1 });
  assert.equal(s.lease, 2000);
  assert.equal(s.attempts, 1);

  q.add({}, { id: 'a' });
  assert.equal(q.cancel('a'), true);
  assert.equal(q.cancel('a'), false);
  assert.equal(q.get('a'), null);

  q.add({}, { id: 'b' });
  const [job] = all(q.db, "SELECT id, attempt FROM tq_claim('jobs', 'w', 1)");
  value(q.db, "SELECT tq_settle(?, ?, 'fail', 'broken')", job.id, job.attempt);
  assert.equal(q.get('b').state, 'failed');
  assert.equal(q.retry('b'), true);
  assert.equal(q.get('b').state, 'waiting');
  assert.equal(q.retry('b'), false);

  const events = q.watch();
  assert.deepEqual(events.map((e) => `${e.id}:${e.state}`),
    ['a:waiting', 'a:cancelled', 'b:waiting', 'b:running', 'b:failed', 'b:waiting']);
  assert.equal(events[4].detail, 'broken');
  assert.deepEqual(q.watch(events[4].seq).map((e) => e.state), ['waiting']);
  q.close();
});

/** A better-sqlite3 Database, or null where it does not open (Bun). */
function betterSqlite3(file) {
  try {
    return new (require('better-sqlite3'))(file);
  } catch {
    return null;
  }
}

test('a Database that reads integers as BigInt: cancel, retry, unschedule, schedules, signal', (t) => {
  const plain = betterSqlite3(tempDb());
  if (plain === null) return t.skip('better-sqlite3 does not open here');
  const db = tinyq.load(plain);
  db.defaultSafeIntegers(true); // every integer it reads is a BigInt
  try {
    const q = new tinyq.Queue(db, 'mail');
    q.add('x', { id: 'gone' });
    assert.equal(q.cancel('gone'), true);
    assert.equal(q.cancel('gone'), false);
    q.add('y', { id: 'broken', attempts: 1 });
    value(db, "SELECT tq_settle(id, attempt, 'fail', 'down') FROM tq_claim('mail', 'w', 1)");
    assert.equal(q.get('broken').state, 'failed');
    assert.equal(q.retry('broken'), true);
    assert.equal(q.retry('broken'), false);
    q.schedule('digest', '@daily', 'd', { paused: true });
    assert.equal(q.schedules()[0].paused, true);
    assert.equal(q.unschedule('digest'), true);
    assert.equal(q.unschedule('digest'), false);
    assert.equal(q.signal('go', 'now'), 0);
  } finally {
    db.close();
  }
});
