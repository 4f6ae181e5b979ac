'use strict';
// Issue 29: `await queue.stop()` inside a handler does not wait for that handler (it used to
// wait for itself for ever); work() still settles the job and returns.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');

const { tempDb } = require('../test-support');

test('await queue.stop() inside a handler resolves, and work() settles the job and returns', async () => {
  const q = new tinyq.Queue(tempDb(), 'q');
  const id = q.add({ n: 1 });
  const stopped = [];
  const handled = await Promise.race([
    q.work(async () => {
      await new Promise((resolve) => setImmediate(resolve)); // work() has returned its promise
      stopped.push(await q.stop());
      return 'ok';
    }, { poll: 50 }),
    new Promise((resolve) => setTimeout(() => resolve('hung'), 30000).unref()),
  ]);
  assert.equal(handled, 1);
  assert.deepEqual(stopped, [0]);
  assert.equal(q.get(id).state, 'done');
  q.close();
});

test('a stop() before work() is not lost: that work() claims nothing and resolves with 0, the next one works', async () => {
  const q = new tinyq.Queue(tempDb(), 'q');
  const id = q.add({ n: 1 });
  assert.equal(await q.stop(), 0);
  assert.equal(await q.work(async () => 'ran', { poll: 50 }), 0);
  assert.equal(q.get(id).state, 'waiting');
  const working = q.work(async () => { setImmediate(() => q.stop()); return 'ran'; }, { poll: 50 });
  assert.equal(await working, 1);
  assert.equal(q.get(id).state, 'done');
  q.close();
});

test('stop({ timeout }) abandons a handler that outlasts it: work() resolves, the job is not settled', async () => {
  const q = new tinyq.Queue(tempDb(), 'q');
  const id = q.add({ n: 1 });
  let release;
  let abandoned;
  const late = new Promise((resolve) => { release = resolve; });
  const working = q.work(async (payload, run) => {
    abandoned = run;
    setImmediate(() => q.stop({ timeout: 100 }));
    await late; // returns only once work() has resolved
    return 'late';
  }, { poll: 50 });
  assert.equal(await working, 1);
  assert.equal(abandoned.cancelled, true);
  assert.equal(abandoned.signal.aborted, true);
  assert.equal(abandoned.progress('late'), false);
  release();
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(q.get(id).state, 'running'); // until its lease runs out: then it runs again
  q.close();
});

test('run.progress after the job settled returns false, without marking the run cancelled', async () => {
  const q = new tinyq.Queue(tempDb(), 'q');
  const id = q.add({ n: 1 });
  let done;
  await q.work(async (payload, run) => {
    done = run;
    setImmediate(() => q.stop());
    return 'ok';
  }, { poll: 50 });
  assert.equal(q.get(id).state, 'done');
  assert.equal(done.progress({ late: true }), false); // work() has returned: no error either
  assert.equal(done.cancelled, false);
  assert.equal(q.get(id).progress ?? null, null);
  q.close();
});

test('stop({ timeout }) takes whole ms, and refuses anything else by name', () => {
  const q = new tinyq.Queue(tempDb(), 'q');
  for (const bad of [-1, 1.5, '5s', Infinity]) {
    assert.throws(() => q.stop({ timeout: bad }), /^Error: stop: timeout must be a whole number of ms >= 0/);
  }
  q.close();
});

// Issue 46: a step whose function was still running when stop()'s grace ended hung for ever
// (its put pending on the stopped worker's group commit), or kept its answer in the handler's
// run.db transaction, or threw the driver's "connection is not open": it throws Cancelled.
test('a step of an attempt abandoned by stop({ timeout }) throws Cancelled', async () => {
  for (const inOwnTransaction of [false, true]) {
    const q = new tinyq.Queue(tempDb(), 'q');
    q.add({ n: 1 });
    let release;
    const late = new Promise((resolve) => { release = resolve; });
    let step;
    const working = q.work(async (payload, run) => {
      setImmediate(() => q.stop({ timeout: 100 }));
      if (inOwnTransaction) run.db.exec('BEGIN');
      step = run.step('answer', () => late);
      return step;
    }, { poll: 50 });
    assert.equal(await working, 1);
    release(7); // the step's function returns once the attempt was abandoned
    const thrown = await Promise.race([
      step.then((value) => `kept ${value}`, (err) => err),
      new Promise((resolve) => setTimeout(() => resolve('hung'), 10000).unref()),
    ]);
    assert.ok(thrown instanceof tinyq.Cancelled, `in run.db's transaction: ${inOwnTransaction}: ${thrown}`);
    assert.match(thrown.value, /step "answer" not kept: attempt 1 of .* is over \(stop\(\)'s grace ended/);
    q.close();
  }
});
