'use strict';
// index.d.ts against what a TypeScript user writes (test/types/*.mts, *.cts), with tsc --strict:
// the usage compiles, and each `@ts-expect-error` line really is an error.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('child_process');
const path = require('path');

test('index.d.ts types the API for ESM and CommonJS users (tsc --strict)', () => {
  const tsc = path.join(__dirname, '..', 'node_modules', 'typescript', 'bin', 'tsc');
  const out = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'types', 'tsconfig.json')],
    { encoding: 'utf8' });
  assert.equal(out.status, 0, out.stdout + out.stderr);
});
