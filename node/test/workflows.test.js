'use strict';
// Workflows in the Node helper: add's after / after_failed, Queue.signal and Queue.deps, and in
// handlers run.waitFor, run.waitSignal and run.sleep, which end the attempt while they wait (the
// worker's place is free) and return on the replay, the steps kept not done again.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('child_process');
const fs = require('fs');
const path = require('path');
const tinyq = require('..');

const { newQueue, tempDb, value } = require('../test-support');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves once `check()` is truthy (polled), or fails after `ms`. */
async function until(check, what, ms = 60000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const stateOf = (q, id) => q.get(id)?.state;

test('a parent adds children, waitFor returns their results, a worker of concurrency 1 runs them all', async () => {
  const q = newQueue('wf');
  q.add({ kind: 'parent' }, { id: 'parent' });
  const starts = [];
  const working = q.work(async (payload, run) => {
    starts.push(run.id);
    if (payload.kind === 'child') return payload.n * 10;
    const ids = [0, 1, 2].map((n) => `${run.id}/${n}`);
    new tinyq.Queue(run.db, 'wf').addMany([0, 1, 2].map((n) => ({ kind: 'child', n })), { ids });
    const results = await run.waitFor(ids);
    return { results };
  }, { concurrency: 1, poll: 50 });
  await until(() => stateOf(q, 'parent') === 'done', 'the parent to finish');
  await q.stop();
  await working;
  assert.deepEqual(q.get('parent').result, { results: [0, 10, 20] });
  assert.deepEqual(starts, ['parent', 'parent/0', 'parent/1', 'parent/2', 'parent']);
  assert.deepEqual(q.deps('parent').map((d) => [d.id, d.state, d.result]),
    [['parent/0', 'done', 0], ['parent/1', 'done', 10], ['parent/2', 'done', 20]]);
});

test('add with after blocks the job until its dependency is done; after_failed reaches tq_add', async () => {
  const q = newQueue('wf');
  q.add('first', { id: 'first' });
  q.add('then', { id: 'then', after: ['first'], after_failed: 'run' });
  assert.equal(stateOf(q, 'then'), 'blocked');
  assert.deepEqual(q.get('then').blocked_on, { after: ['first'] });
  assert.throws(() => q.add('x', { id: 'x', after: ['first'], after_failed: 'sometimes' }), /after_failed/);
  const order = [];
  const working = q.work(async (payload) => { order.push(payload); }, { poll: 50 });
  await until(() => stateOf(q, 'then') === 'done', 'the dependent to run');
  await q.stop();
  await working;
  assert.deepEqual(order, ['first', 'then']);
});

test('waitSignal: the job waits without its place, a signal brings the payload, its step is not redone', async () => {
  const q = newQueue('wf');
  q.add({ kind: 'approval' }, { id: 'ticket-1' });
  const drafts = [];
  const sent = [];
  const working = q.work(async (payload, run) => {
    if (payload.kind !== 'approval') return 'plain';
    const draft = await run.step('draft', () => { drafts.push(run.attempt); return 'a draft'; });
    const approval = await run.waitSignal('approve:ticket-1', '7d');
    sent.push(approval);
    return { draft, approval };
  }, { concurrency: 1, poll: 50 });
  await until(() => stateOf(q, 'ticket-1') === 'blocked', 'the job to wait');
  assert.equal(q.get('ticket-1').blocked_on.signal, 'approve:ticket-1');
  q.add({ kind: 'other' }, { id: 'other' });
  await until(() => stateOf(q, 'other') === 'done', 'another job to use the free place');
  assert.equal(stateOf(q, 'ticket-1'), 'blocked');
  assert.equal(q.signal('approve:ticket-1', { by: 'lee' }), 1);
  await until(() => stateOf(q, 'ticket-1') === 'done', 'the signal to finish the job');
  await q.stop();
  await working;
  assert.deepEqual(q.get('ticket-1').result, { draft: 'a draft', approval: { by: 'lee' } });
  assert.deepEqual(drafts, [1]);
  assert.deepEqual(sent, [{ by: 'lee' }]);
  assert.equal(q.signal('approve:ticket-1', 'again'), 0);
});

test('waitSignal resolves to null after its timeout; sleep snoozes until its time', async () => {
  const q = newQueue('wf');
  q.add('wait', { id: 'wait' });
  q.add('nap', { id: 'nap' });
  const attempts = { wait: 0, nap: 0 };
  const working = q.work(async (payload, run) => {
    attempts[payload] += 1;
    if (payload === 'wait') return { approval: await run.waitSignal('never', '200ms') };
    await run.sleep('nap', '300ms');
    return 'woke';
  }, { concurrency: 2, poll: 50 });
  await until(() => stateOf(q, 'wait') === 'done' && stateOf(q, 'nap') === 'done', 'both to finish');
  await q.stop();
  await working;
  assert.deepEqual(q.get('wait').result, { approval: null });
  assert.equal(q.get('nap').result, 'woke');
  assert.ok(attempts.wait >= 2 && attempts.nap >= 2, JSON.stringify(attempts));
  const wake = JSON.parse(value(q.db, "SELECT tq_step_get('nap', 'sleep:nap')"));
  const lastStart = q.watch().filter((e) => e.id === 'nap' && e.state === 'running').pop();
  assert.ok(lastStart.at >= wake, `ran again at ${lastStart.at}, before its wake time ${wake}`);
});

test('bad arguments are refused with the name of the call', async () => {
  const q = newQueue('wf');
  q.add('x', { id: 'x' });
  const errors = [];
  const working = q.work(async (payload, run) => {
    for (const call of [() => run.sleep('nap', '10 weeks'), () => run.waitFor([1]), () => run.waitSignal('')]) {
      await call().catch((err) => errors.push(err.message));
    }
  }, { poll: 50 });
  await until(() => stateOf(q, 'x') === 'done', 'the job to finish');
  await q.stop();
  await working;
  assert.equal(errors.length, 3);
  assert.match(errors[0], /^sleep: not a duration: "10 weeks"/);
  assert.match(errors[1], /^waitFor: job ids are text/);
  assert.match(errors[2], /^waitSignal: a signal's name is text/);
});

test('a worker SIGKILLed while its job waits for a signal loses nothing', async () => {
  const file = tempDb();
  const q = newQueue('wf', file);
  const log = path.join(path.dirname(file), 'events.log');
  fs.writeFileSync(log, '');
  q.add({ kind: 'approval', signal: 'approve:9' }, { id: 'ticket-9' });
  const worker = () => {
    const child = spawn(process.execPath, [path.join(__dirname, '..', '..', 'tests', 'support', 'workflow_worker.js'), file, log],
      { stdio: ['ignore', 'pipe', 'inherit'] });
    child.exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve(sig || code)));
    return child;
  };
  const first = worker();
  await until(() => stateOf(q, 'ticket-9') === 'blocked', 'the job to wait');
  first.kill('SIGKILL');
  assert.equal(await first.exited, 'SIGKILL');
  assert.equal(q.signal('approve:9', 'yes'), 1);
  const second = worker();
  await until(() => stateOf(q, 'ticket-9') === 'done', 'a new worker to finish the job');
  second.kill('SIGTERM');
  await second.exited;
  assert.deepEqual(q.get('ticket-9').result, { draft: 'a draft', approval: 'yes' });
  const events = fs.readFileSync(log, 'utf8').trim().split('\n').map((line) => line.split(' ')[0]);
  assert.equal(events.filter((e) => e === 'model').length, 1);
  assert.equal(events.filter((e) => e === 'sent').length, 1);
});

test('DEP_01 waitFor keeps jobs that were done at once', async () => {
  const file = tempDb();
  const q = newQueue('wf', file);
  q.settings({ dedupe: '1h' });
  q.addMany(['child', 'child'], { ids: ['c1', 'c2'] });
  assert.deepEqual(await q.drain((payload, run) => run.id), { done: 2, failed: 0, retried: 0 });
  q.add('parent', { id: 'parent' });
  let got = null;
  const working = q.work(async (payload, run) => {
    got = await run.waitFor(['c1', 'c2']); // both done already
    return { got, go: await run.waitSignal('go') };
  }, { poll: 50 });
  await until(() => q.get('parent').state === 'blocked', 'the parent to wait for its signal');
  const other = tinyq.open(file); // sweeps with its clock past the children's dedupe
  const sweepAt = (ms) => {
    value(other, 'SELECT tq_clock(?)', ms);
    value(other, 'SELECT tq_sweep()');
    value(other, 'SELECT tq_clock(NULL)');
  };
  try {
    sweepAt(Date.now() + 2 * 3600000);
    assert.deepEqual(['c1', 'c2'].map((id) => stateOf(q, id)), ['done', 'done']); // kept while the parent waits
    q.signal('go', 'now');
    await until(() => stateOf(q, 'parent') === 'done', 'the parent to finish');
    assert.deepEqual(q.get('parent').result, { got: ['c1', 'c2'], go: 'now' });
    sweepAt(Date.now() + 2 * 3600000);
    assert.deepEqual(['c1', 'c2'].map((id) => q.get(id)), [null, null]); // swept once it has finished
  } finally {
    other.close();
    await q.stop();
    await working;
  }
});

test('a second sleep or signal wait of one name in a job is an error; a replay is no second use', async () => {
  const q = newQueue('wf');
  q.add('spins', { id: 'spins', attempts: 1 });
  q.add('times-out', { id: 'times-out', attempts: 1 });
  q.add('named', { id: 'named', attempts: 1 });
  const runs = { named: 0 };
  const working = q.work(async (payload, run) => {
    if (payload === 'spins') {
      for (let n = 0; n < 3; n += 1) await run.sleep('poll', 5); // sleeps once, then would spin
      return 'spun';
    }
    if (payload === 'times-out') {
      await run.waitSignal('go', 5); // null after 5 ms
      return run.waitSignal('go'); // would return null at once, missing a later signal
    }
    runs.named += 1;
    for (let n = 0; n < 3; n += 1) await run.sleep(`poll-${n}`, 5);
    return [await run.waitSignal('go-1', 5), await run.waitSignal('go-2', 5)];
  }, { poll: 50 });
  try {
    await until(() => ['spins', 'times-out', 'named'].every((id) => ['done', 'failed'].includes(stateOf(q, id))),
      'the three jobs to finish');
  } finally {
    await q.stop();
    await working;
  }
  assert.equal(stateOf(q, 'spins'), 'failed');
  assert.equal(q.get('spins').error, "Error: run.sleep: the name 'poll' was used already by this job: "
    + "each sleep and signal wait needs a name of its own (e.g. 'poll-' + n)");
  assert.equal(stateOf(q, 'times-out'), 'failed');
  assert.match(q.get('times-out').error, /run\.waitSignal: the name 'go' was used already by this job/);
  assert.deepEqual([stateOf(q, 'named'), q.get('named').result], ['done', [null, null]]);
  assert.ok(runs.named >= 6, `each wait ended an attempt, the replays went through: ${runs.named} runs`);
});
