'use strict';
// Group commit in work() (group.js, docs/design.md): the writes of one turn of the event loop
// go to the store in one transaction, each in a savepoint. One call that fails, or a stale
// attempt's step, changes nothing for the others; a step that returned to its handler is on
// disk even when the worker is SIGKILLed.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const tinyq = require('..');
const { commitGroup } = require('../group.js');
const { open, one } = require('../sql.js');

const { all, tempDb, value } = require('../test-support');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const call = (name, ...args) => ({ fn: (db) => one(db, `SELECT ${name}(${args.map(() => '?').join(', ')})`, ...args), name, args });
const claim = (db, n, opts) => (opts === undefined
  ? all(db, "SELECT id, attempt FROM tq_claim('q', 'test', ?)", n)
  : all(db, "SELECT id, attempt FROM tq_claim('q', 'test', ?, ?)", n, opts));
const kept = (db, id) => value(db, "SELECT tq_step_get(?, 'answer')", id) ?? null;

async function until(check, ms = 120000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${check}`);
    await sleep(10);
  }
}

test('one failing call in a group leaves the others kept', () => {
  const file = tempDb();
  const q = new tinyq.Queue(file, 'q');
  for (let i = 0; i < 3; i++) q.add({ n: i });
  const db = open(file);
  const [a, b, c] = claim(db, 3);
  const group = [call('tq_step_put', a.id, a.attempt, 'answer', '"a"'),
    call('tq_step_put', b.id, 'x', 'answer', '"b"'), // a bad attempt
    call('tq_step_put', c.id, c.attempt, 'answer', '"c"'),
    call('tq_progress', c.id, c.attempt, '{"half": true}')];
  commitGroup(db, group);
  assert.deepEqual(group.map((w) => w.value), ['"a"', undefined, '"c"', 1]);
  assert.match(group[1].error.message, /^tq_step_put: attempt must be an integer, not 'x'/);
  assert.deepEqual([group[0], group[2], group[3]].map((w) => w.error), [undefined, undefined, undefined]);
  const other = open(file); // committed: another connection sees them
  assert.deepEqual([a, b, c].map((j) => kept(other, j.id)), ['"a"', null, '"c"']);
  assert.deepEqual(q.get(c.id).progress, { half: true });
});

test('a stale attempt in a group keeps nothing and gets NULL; the others are kept', async () => {
  const file = tempDb();
  const q = new tinyq.Queue(file, 'q');
  q.add({ n: 0 });
  q.add({ n: 1 });
  const db = open(file);
  const [fresh] = claim(db, 1);
  const [stale] = claim(db, 1, '{"lease": 1}');
  await until(() => claim(db, 1).length === 1); // its 1 ms lease ran out: claimed again
  assert.equal(q.get(stale.id).attempt, 2);
  const group = [call('tq_step_put', stale.id, 2, 'answer', '"attempt 2"'),
    call('tq_step_put', stale.id, 1, 'answer', '"attempt 1"'),
    call('tq_step_put', fresh.id, fresh.attempt, 'answer', '"fresh"'),
    call('tq_progress', stale.id, 1, '"stale progress"')];
  commitGroup(db, group);
  assert.deepEqual(group.map((w) => w.value ?? null), ['"attempt 2"', null, '"fresh"', 0]);
  assert.deepEqual(group.map((w) => w.error), [undefined, undefined, undefined, undefined]);
  assert.equal(kept(db, stale.id), '"attempt 2"');
  assert.equal(kept(db, fresh.id), '"fresh"');
  assert.equal(q.get(stale.id).progress, null);
});

test('work(): the steps of concurrent handlers share commits, a cancelled attempt fails alone', async () => {
  const file = tempDb();
  const q = new tinyq.Queue(file, 'q');
  const n = 30;
  const ids = Array.from({ length: n }, (_, i) => q.add({ n: i }));
  const lost = ids[4];
  const other = new tinyq.Queue(file, 'q');
  const seen = new Map();
  let arrived = 0;
  let open;
  const gate = new Promise((resolve) => { open = resolve; });
  const working = q.work(async (payload, run) => {
    arrived += 1;
    if (arrived === n) {
      other.cancel(lost); // this attempt no longer holds its job
      open();
    }
    await gate; // every handler asks for its write in the same turn
    try {
      seen.set(run.id, await run.step('answer', () => run.id));
    } catch (err) {
      seen.set(run.id, err instanceof tinyq.Cancelled ? 'cancelled' : err);
    }
  }, { concurrency: n });
  await until(() => seen.size === n);
  await q.stop();
  await working;
  assert.deepEqual(ids.map((id) => seen.get(id)), ids.map((id) => (id === lost ? 'cancelled' : id)));
  assert.deepEqual(ids.filter((id) => id !== lost).map((id) => q.get(id).state), Array(n - 1).fill('done'));
  assert.equal(kept(q.db, lost), null);
  q.close();
  other.close();
});

test('steps that returned to their handlers survive a SIGKILL of the worker', async () => {
  const file = tempDb();
  const log = path.join(path.dirname(file), 'returned.log');
  const q = new tinyq.Queue(file, 'q');
  const ids = [];
  for (let i = 0; i < 2000; i++) ids.push(q.add({ n: i }));
  const pkg = JSON.stringify(path.join(__dirname, '..'));
  const worker = spawn(process.execPath, ['-e', `
    const fs = require('fs');
    const tinyq = require(${pkg});
    const log = fs.openSync(process.env.LOG, 'a');
    const q = new tinyq.Queue(process.env.DB, 'q');
    const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
    q.work(async (payload, run) => {
      await run.step('answer', async () => { await sleep(payload.n % 7); return { answer: payload.n }; });
      fs.writeSync(log, run.id + '\\n'); // the step returned: recorded, synced
      fs.fsyncSync(log);
      await sleep(50 * (payload.n % 3));
    }, { concurrency: 200 });`], { env: { ...process.env, DB: file, LOG: log }, stdio: ['ignore', 'inherit', 'inherit'] });
  const exited = new Promise((resolve) => worker.on('exit', (code, signal) => resolve({ code, signal })));
  let ended = false;
  exited.then(() => { ended = true; });
  const returned = () => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n').filter(Boolean) : []);
  try {
    await until(() => returned().length >= 500 || ended);
  } finally {
    worker.kill('SIGKILL');
  }
  assert.equal((await exited).signal, 'SIGKILL');
  const done = returned();
  assert.ok(done.length >= 500 && done.length < ids.length, `${done.length} steps returned`);
  assert.deepEqual(done.filter((id) => kept(q.db, id) === null), []);
  q.close();
});
