// `import` from ESM gives the same module as `require`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import tinyqDefault, { Queue, Worker, Run, Outcome, Cancelled, open, load, extensionPath } from 'tinyq';

const require = createRequire(import.meta.url);

test('import { Queue } from "tinyq" is require("tinyq").Queue', () => {
  const cjs = require('tinyq');
  assert.equal(Queue, cjs.Queue);
  assert.equal(tinyqDefault, cjs);
  for (const [name, value] of Object.entries({ Worker, Run, Outcome, Cancelled, open, load, extensionPath })) {
    assert.equal(value, cjs[name], name);
  }
  assert.deepEqual(Object.keys(cjs).sort(), ['Cancelled', 'Outcome', 'Queue', 'Run', 'Worker', 'extensionPath', 'load', 'open']);
});
