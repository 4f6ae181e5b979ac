'use strict';
// The drivers a Queue runs on (drivers.js): a Database of each driver this runtime has, the
// `driver` option, and the errors for what is not one. The other test files run on whichever
// driver $TINYQ_DRIVER names (make test-node-drivers runs them on each).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');
const { adapterOf } = require('../drivers.js');

const { tempDb } = require('../test-support');

// A new Database of each driver, opened as its own documentation says, without tinyq.
const OPENERS = {
  'better-sqlite3': (file) => new (require('better-sqlite3'))(file),
  'node:sqlite': (file) => new (require('node:sqlite').DatabaseSync)(file, { allowExtension: true }),
  'bun:sqlite': (file) => new (require('bun:sqlite').Database)(file),
};

/** The drivers that open a database in this runtime (better-sqlite3 does not in Bun, nor
 * node:sqlite before Node 22.13). */
function available() {
  return Object.keys(OPENERS).filter((name) => {
    try {
      OPENERS[name](':memory:').close();
      return true;
    } catch {
      return false;
    }
  });
}

test('a Queue on a Database of each driver here: add, work, get, in your transaction', async () => {
  const names = available();
  assert.ok(names.length > 0, 'no driver opens a database here');
  for (const name of names) {
    const db = tinyq.load(OPENERS[name](tempDb()));
    const q = new tinyq.Queue(db, 'mail');
    assert.equal(adapterOf(q.db).name, name);
    const id = q.add({ to: 'ann' }, { id: `via ${name}` });
    const seen = [];
    const working = q.work(async (payload, run) => {
      seen.push([payload.to, run.meta]);
      q.stop();
      return { sent: true };
    }, { poll: 50 });
    assert.equal(await working, 1, name);
    assert.deepEqual(seen, [['ann', {}]], name);
    assert.equal(q.get(id).state, 'done', name);
    assert.deepEqual(q.get(id).result, { sent: true }, name);
    db.close();
  }
});

test('new Queue(path, name, { driver }) opens with that driver; an unknown one is an error naming it', () => {
  for (const name of available()) {
    const q = new tinyq.Queue(tempDb(), 'mail', { driver: name });
    assert.equal(adapterOf(q.db).name, name);
    assert.equal(q.get(q.add('hello')).payload, 'hello');
    q.close();
  }
  assert.throws(() => new tinyq.Queue(tempDb(), 'mail', { driver: 'sqlite3' }),
    /driver must be one of better-sqlite3, node:sqlite, bun:sqlite, not "sqlite3"/);
  assert.throws(() => tinyq.open(tempDb(), { driver: 'sqlite3' }), /not "sqlite3"/);
});

test('what is not a Database of a known driver is an error naming it', () => {
  assert.throws(() => new tinyq.Queue({ prepare() {} }, 'mail'), /not a Database of better-sqlite3, node:sqlite, bun:sqlite: Object/);
  assert.throws(() => tinyq.load(42), /not a Database: 42/);
});

test('the tests run on the driver $TINYQ_DRIVER names', () => {
  const q = new tinyq.Queue(tempDb(), 'mail');
  const fallback = available().includes('better-sqlite3') ? 'better-sqlite3' : 'node:sqlite';
  const expected = process.env.TINYQ_DRIVER || (process.versions.bun ? 'bun:sqlite' : fallback);
  assert.equal(adapterOf(q.db).name, expected);
  q.close();
});

test('node:sqlite without allowExtension: load() says how to open it', (t) => {
  if (!available().includes('node:sqlite')) return t.skip('no node:sqlite here');
  const db = new (require('node:sqlite').DatabaseSync)(':memory:');
  assert.throws(() => tinyq.load(db), /open the DatabaseSync with \{ allowExtension: true \}/);
  db.close();
});
