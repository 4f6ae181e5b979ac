'use strict';
// add() with tq_add's expires, on_conflict and max_wait (EXP-01, KEY-01), and addMany: many
// adds in one transaction and one statement.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');

const { all, exec, tempDb, value } = require('../test-support');

const T0 = 1800000000000;

function pinned(name) {
  const q = new tinyq.Queue(tempDb(), name);
  value(q.db, 'SELECT tq_clock(?)', T0);
  return q;
}

test('add takes expires, on_conflict and max_wait', () => {
  const q = pinned('reindex');
  const debounce = { on_conflict: 'debounce', delay: '10s', max_wait: '1m' };
  assert.equal(q.add({ rev: 1 }, { id: 'doc:7', ...debounce, expires: '1h' }), 'doc:7');
  value(q.db, 'SELECT tq_clock(?)', T0 + 5000);
  assert.equal(q.add({ rev: 2 }, { id: 'doc:7', ...debounce }), 'doc:7');
  const job = q.get('doc:7');
  assert.deepEqual([job.payload, job.run_at, job.expires, job.state], [{ rev: 2 }, T0 + 15000, null, 'scheduled']);
  // A Date or a number is a time; text an ISO-8601 time or a duration from now.
  assert.equal(q.get(q.add({}, { expires: new Date(T0 + 60000) })).expires, T0 + 60000);
  assert.equal(q.get(q.add({}, { expires: T0 + 60000 })).expires, T0 + 60000);
  assert.equal(q.get(q.add({}, { expires: '30s' })).expires, T0 + 35000);
  assert.equal(q.add({ rev: 3 }, { id: 'doc:7', on_conflict: 'replace', priority: 2 }), 'doc:7');
  assert.deepEqual([q.get('doc:7').payload, q.get('doc:7').priority], [{ rev: 3 }, 2]);
  assert.throws(() => q.add({}, { id: 'x', on_conflict: 'merge' }), /tq_add: option "on_conflict" must be/);
  q.close();
});

test('addMany adds in order, with the options shared', () => {
  const q = pinned('mail');
  const ids = q.addMany([{ n: 1 }, 'plain text', 3, [4]], { priority: 2, meta: { batch: 7 } });
  assert.equal(ids.length, 4);
  assert.deepEqual(ids.map((id) => q.get(id).payload), [{ n: 1 }, 'plain text', 3, [4]]);
  assert.deepEqual([...new Set(ids.map((id) => `${q.get(id).priority} ${JSON.stringify(q.get(id).meta)}`))],
    ['2 {"batch":7}']);
  assert.deepEqual(all(q.db, "SELECT id FROM tq_claim('mail', 'w', 10)").map((r) => r.id), ids); // in order
  assert.deepEqual(q.addMany([]), []);
  q.close();
});

test('addMany with ids: each job its own id, the options shared', () => {
  const q = pinned('mail');
  assert.deepEqual(q.addMany([{ v: 1 }, { v: 1 }], { ids: ['a', 'b'] }), ['a', 'b']);
  assert.deepEqual(q.addMany([{ v: 2 }, { v: 2 }], { ids: ['a', 'b'] }), ['a', 'b']); // keep
  assert.deepEqual(['a', 'b'].map((id) => q.get(id).payload), [{ v: 1 }, { v: 1 }]);
  q.addMany([{ v: 3 }, { v: 3 }], { ids: ['a', 'b'], on_conflict: 'debounce', delay: '1m' });
  assert.deepEqual(['a', 'b'].map((id) => [q.get(id).payload, q.get(id).state]), [[{ v: 3 }, 'scheduled'], [{ v: 3 }, 'scheduled']]);
  assert.throws(() => q.addMany([{}], { ids: ['x', 'y'] }), /addMany: 2 ids for 1 payloads/);
  q.close();
});

test('addMany is all or nothing, alone or inside the caller\'s transaction', () => {
  const q = pinned('mail');
  const ids = () => all(q.db, 'SELECT id FROM tq_jobs ORDER BY id').map((r) => r.id);
  assert.throws(() => q.addMany([{}, {}], { ids: ['ok', 'tq_reserved'] }), /tq_add: option "id" must not start with 'tq_'/);
  assert.deepEqual(ids(), []);
  exec(q.db, 'BEGIN IMMEDIATE'); // (no transaction was left open: BEGIN inside one is an error)
  q.add({}, { id: 'mine' });
  assert.throws(() => q.addMany([{}, {}], { ids: ['x1', 'tq_bad'] }));
  q.addMany([{}], { ids: ['y1'] });
  exec(q.db, 'COMMIT'); // the caller's transaction went on, with its own add
  assert.deepEqual(ids(), ['mine', 'y1']);
  exec(q.db, 'BEGIN');
  q.addMany([{}], { ids: ['gone'] });
  exec(q.db, 'ROLLBACK');
  assert.equal(q.get('gone'), null);
  q.close();
});
