'use strict';
// Shared by node/test/*.test.js (kept outside test/, where node --test would run it as a test):
// temporary database files, removed when the test file ends, queues on them, stopped and closed
// after each test, and SQL on a Database of whichever driver the tests run on ($TINYQ_DRIVER,
// else the default: drivers.js).
const { after, afterEach } = require('node:test');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { openWith } = require('./drivers.js');
const { exec, one, rows, transaction } = require('./sql.js');
const { Queue } = require('./index.js');

const dirs = [];
after(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

/** A path for a new database file in a fresh temporary folder. */
function tempDb() {
  dirs.push(fs.mkdtempSync(path.join(os.tmpdir(), 'tinyq-node-')));
  return path.join(dirs[dirs.length - 1], 'q.db');
}

// Every test's queues are stopped and closed after it, even when it fails, so that a failing
// test cannot leave a worker running (which would keep the test process alive).
const queues = [];
afterEach(async () => {
  for (const q of [...queues]) await closeQueue(q);
});

/** A Queue named `name` on `file` (a new database by default), closed after the test. */
function newQueue(name = 'q', file = tempDb()) {
  queues.push(new Queue(file, name));
  return queues[queues.length - 1];
}

/** Stops and closes a queue of newQueue() before the test ends (closed once: node:sqlite
 * refuses a second close). */
async function closeQueue(q) {
  if (queues.includes(q)) queues.splice(queues.indexOf(q), 1);
  await q.stop();
  q.close();
}

/** A Database of the tests' driver, without tinyq. */
const plainDb = (file) => openWith(process.env.TINYQ_DRIVER, file);

module.exports = { tempDb, newQueue, closeQueue, plainDb, value: one, all: rows, exec, transaction };
