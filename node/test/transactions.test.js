'use strict';
// A handler's transaction on run.db holds its own writes only (docs/design.md, "A handler's
// transaction"), and an app's transaction in the worker's process never freezes the event loop
// nor drops the worker's settles.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');

const { exec, newQueue, tempDb, value } = require('../test-support');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check, ms = 60000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${check}`);
    await sleep(10);
  }
}

const count = (runs, id) => runs.set(id, (runs.get(id) || 0) + 1);

test('a handler transaction that rolls back takes in no other job\'s settle, claim or step', async () => {
  const q = newQueue();
  q.settings({ lease: '2s' });
  exec(q.db, 'CREATE TABLE notes (text TEXT)');
  q.add({ slow: true }, { id: 'slow', priority: 9 });
  const fast = ['f1', 'f2', 'f3', 'f4', 'f5', 'f6'];
  for (const id of fast) q.add({}, { id });
  const runs = new Map();
  const working = q.work(async (payload, run) => {
    count(runs, run.id);
    if (payload.slow) {
      exec(run.db, 'BEGIN IMMEDIATE');
      exec(run.db, "INSERT INTO notes VALUES ('rolled back')");
      await run.step('inside', () => 'its own'); // in its transaction: rolled back with it
      await sleep(1000); // the other handlers end meanwhile
      exec(run.db, 'ROLLBACK');
      return 'slow';
    }
    await sleep(50);
    return run.step('kept', () => run.id);
  }, { concurrency: 7 });
  await until(() => ['slow', ...fast].every((id) => q.get(id).state === 'done'));
  await q.stop();
  await working;
  assert.deepEqual(Object.fromEntries(runs), Object.fromEntries(['slow', ...fast].map((id) => [id, 1])));
  for (const id of fast) assert.equal(q.get(id).result, id);
  assert.equal(value(q.db, "SELECT tq_step_get('slow', 'inside')"), null);
  assert.equal(value(q.db, 'SELECT count(*) FROM notes'), 0);
});

test('a handler that ends with a transaction open on run.db: rolled back, the job errs, the rest settles', async () => {
  const q = newQueue();
  exec(q.db, 'CREATE TABLE notes (text TEXT)');
  q.add({ throws: true }, { id: 'throws', attempts: 1 });
  q.add({}, { id: 'returns', attempts: 1 });
  const warned = [];
  const warn = console.warn;
  console.warn = (...args) => warned.push(args.join(' '));
  try {
    const working = q.work(async (payload, run) => {
      if (run.id === 'after') return 'after';
      exec(run.db, 'BEGIN IMMEDIATE');
      exec(run.db, `INSERT INTO notes VALUES ('${run.id}')`);
      if (payload.throws) throw new Error('boom');
      return 'returned';
    });
    await until(() => ['throws', 'returns'].every((id) => q.get(id).state === 'failed'), 15000);
    q.add({}, { id: 'after' }); // settles while the worker runs: no transaction left holds it
    await until(() => q.get('after').state === 'done', 15000);
    await q.stop();
    await working;
  } finally {
    console.warn = warn;
  }
  assert.match(q.get('throws').error, /Error: boom; .*transaction open on run\.db.*rolled back/);
  assert.match(q.get('returns').error, /transaction open on run\.db.*rolled back/);
  assert.equal(value(q.db, 'SELECT count(*) FROM notes'), 0);
  assert.equal(warned.filter((w) => /transaction open on run\.db/.test(w)).length, 2);
});

test('an app transaction in the worker\'s process: no event-loop stall, every job settled once', async () => {
  const file = tempDb();
  const q = newQueue('q', file);
  q.settings({ lease: '2s' });
  const app = tinyq.open(file); // the app's own connection, in the worker's process
  exec(app, 'CREATE TABLE orders (n INTEGER)');
  const appQueue = new tinyq.Queue(app, 'q');
  const ids = Array.from({ length: 24 }, (_, i) => `j${i}`);
  for (const id of ids) q.add({}, { id });
  const runs = new Map();
  let lag = 0;
  let last = performance.now();
  const ticker = setInterval(() => {
    const now = performance.now();
    lag = Math.max(lag, now - last - 10);
    last = now;
  }, 10);
  try {
    const working = q.work(async (payload, run) => {
      count(runs, run.id);
      await sleep(40);
      return run.step('s', () => run.id);
    }, { concurrency: 4 });
    await until(() => runs.size >= 4);
    exec(app, 'BEGIN IMMEDIATE');
    exec(app, 'INSERT INTO orders VALUES (1)');
    appQueue.add({}, { id: 'order:1' });
    await sleep(1000); // the worker's settles, claims and step puts wait for the lock meanwhile
    exec(app, 'COMMIT');
    await until(() => [...ids, 'order:1'].every((id) => q.get(id).state === 'done'));
    await q.stop();
    await working;
  } finally {
    clearInterval(ticker);
    app.close();
  }
  assert.ok(lag < 500, `the event loop stalled ${Math.round(lag)} ms`);
  assert.deepEqual([...runs.values()].filter((n) => n !== 1), []);
  assert.equal(runs.size, ids.length + 1);
});
