'use strict';
// Queue.drain: work() until no job of the queue is running or due now, then a summary
// { done, failed, retried } of the attempts it ran (as Python's Queue.drain).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');

const { newQueue, value } = require('../test-support');

/** A job that fails once, a chain blocked on a job, a job that adds two more, a job without
 * tries left: what the drain must run to the end. */
function mixedJobs(q) {
  q.settings({ backoff: 0 }); // a retry is due at once
  q.add('flaky', { id: 'flaky' });
  q.add('first', { id: 'first' });
  q.add('second', { id: 'second', after: ['first'] });
  q.add('parent', { id: 'parent' });
  q.add('doomed', { id: 'doomed', attempts: 1 });
}

test('drain runs retries, dependents and the jobs handlers add, and counts a failure', async () => {
  const q = newQueue('mail');
  mixedJobs(q);
  const handler = async (payload, run) => {
    if (payload === 'parent') new tinyq.Queue(run.db, 'mail').addMany(['child', 'child'], { ids: ['child:1', 'child:2'] });
    if (payload === 'flaky' && run.attempt === 1) throw new Error('upstream timeout');
    if (payload === 'doomed') throw new Error('bad input');
    return payload.toUpperCase();
  };
  assert.deepEqual(await q.drain(handler, { concurrency: 2 }), { done: 6, failed: 1, retried: 1 });
  for (const id of ['flaky', 'first', 'second', 'parent', 'child:1', 'child:2']) assert.equal(q.get(id).state, 'done', id);
  assert.equal(q.get('flaky').attempt, 2);
  assert.equal(q.get('doomed').state, 'failed');
  assert.deepEqual(await q.drain(handler), { done: 0, failed: 0, retried: 0 });
});

test('drain counts run.fail, and retries until the tries run out', async () => {
  const q = newQueue('mail');
  q.settings({ backoff: 0 });
  q.add('give up', { id: 'gives-up' });
  q.add('always', { id: 'always', attempts: 3 });
  const summary = await q.drain((payload, run) => {
    if (payload === 'give up') run.fail('not worth it');
    throw new Error('still broken');
  });
  assert.deepEqual(summary, { done: 0, failed: 2, retried: 2 });
  assert.equal(q.get('always').attempt, 3);
});

test('drain does not wait for a job scheduled later', async () => {
  const q = newQueue('mail');
  q.settings({ backoff: '1h' });
  q.add('later', { id: 'later', delay: '1h' });
  q.add('fails', { id: 'fails' });
  const started = Date.now();
  assert.deepEqual(await q.drain(() => { throw new Error('down'); }), { done: 0, failed: 0, retried: 1 });
  assert.ok(Date.now() - started < 600000); // not the hour of either
  assert.equal(q.get('later').state, 'scheduled');
  assert.equal(q.get('fails').state, 'scheduled');
});

test('drain with the adding connection\'s clock pinned back runs a job added with a delay', async () => {
  const q = newQueue('mail');
  value(q.db, 'SELECT tq_clock(?)', Date.now() - 2 * 3600000);
  q.add('reminder', { id: 'remind', delay: '1h' });
  value(q.db, 'SELECT tq_clock(NULL)');
  assert.deepEqual(await q.drain(() => 'sent'), { done: 1, failed: 0, retried: 0 });
  assert.equal(q.get('remind').result, 'sent');
});

test('drain of a queue never used returns at once; drain refuses a queue already working', async () => {
  const q = newQueue('never-used');
  assert.deepEqual(await q.drain(() => null), { done: 0, failed: 0, retried: 0 });
  const working = q.work(() => null, { poll: 50 });
  assert.throws(() => q.drain(() => null), /already working/);
  await q.stop();
  await working;
  await assert.rejects(q.drain(() => null, { bogus: 1 }), /unknown option 'bogus'/);
});
