'use strict';
// ERR-01 in the Node helper: every option and argument is checked where it is given, with an
// error naming it and the value; none becomes "absent" (JSON would make NaN, Infinity and an
// invalid Date null) and none makes work() spin.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');

const { tempDb } = require('../test-support');

test('test_ERR_01 work() refuses a poll, handler or option it cannot use, at once', async () => {
  const q = new tinyq.Queue(tempDb(), 'q');
  for (const poll of [0, -1, NaN, Infinity, 1.5, '1s']) {
    await assert.rejects(q.work(async () => {}, { poll }), { message: `poll must be a whole number >= 1, not ${require('util').inspect(poll)}` });
  }
  await assert.rejects(q.work(undefined), /work: the handler must be a function, not undefined/);
  await assert.rejects(q.work('handler'), /work: the handler must be a function, not 'handler'/);
  await assert.rejects(q.work(async () => {}, { polll: 10 }), /work: unknown option 'polll'/);
  await assert.rejects(q.work(async () => {}, { worker: 42 }), /worker must be a non-empty string, not 42/);
  await assert.rejects(q.work(async () => {}, { lease: NaN }), /work: option lease must be a finite number, not NaN/);
  q.add({}, { id: 'still' }); // nothing ran, nothing was claimed
  assert.equal(q.get('still').state, 'waiting');
  q.close();
});

test('test_ERR_01 an invalid Date or a number that is not finite in add options is an error', () => {
  const q = new tinyq.Queue(tempDb(), 'q');
  assert.throws(() => q.add({}, { at: new Date('invalid') }), /^TypeError: add: option at is an invalid Date$/);
  assert.throws(() => q.add({}, { expires: new Date('soon') }), /add: option expires is an invalid Date/);
  assert.throws(() => q.add({}, { delay: Infinity }), /add: option delay must be a finite number, not Infinity/);
  assert.throws(() => q.add({}, { priority: NaN }), /add: option priority must be a finite number, not NaN/);
  assert.throws(() => q.add({}, 'soon'), /add: options must be an object, not 'soon'/);
  assert.throws(() => q.addMany([{}], { at: new Date('x') }), /addMany: option at is an invalid Date/);
  assert.throws(() => q.schedule('s', '@hourly', {}, { priority: -Infinity }), /schedule: option priority must be a finite/);
  assert.throws(() => q.settings({ lease: NaN }), /settings: option lease must be a finite number, not NaN/);
  assert.throws(() => q.signal('s', {}, { keep: Infinity }), /signal: option keep must be a finite number/);
  assert.equal(q.watch().length, 0); // nothing was added
  const at = new Date(Date.now() + 60000);
  assert.equal(q.get(q.add({}, { at, expires: new Date(at.getTime() + 1000) })).run_at, at.getTime());
  q.close();
});
