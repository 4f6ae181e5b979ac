'use strict';
// The idle wake-up of tinyq's Node worker, on a worker_thread with its own connection: each
// 'arm' message starts a tq_wait (blocking this thread, never the main event loop), and a
// 'woke' message goes back as soon as a job may be claimable, or when `poll` ms have passed.
const { parentPort, workerData } = require('worker_threads');
const { adapterOf, openWith } = require('./drivers.js');
const { close, exec, one } = require('./sql.js');

// How often the waiter looks at stop(); tq_wait itself sleeps until the store is written.
const SLICE = 250;

// Set by the worker when it stops: checked between slices, so stop() need not wait out a
// poll, and before the connection opens, so a worker that stopped at once opens nothing.
const stopped = () => Atomics.load(workerData.stop, 0) === 1;

let db = null;
let wait = null;
if (!stopped()) {
  db = openWith(workerData.driver, workerData.file);
  adapterOf(db).load(db, workerData.extension);
  exec(db, 'PRAGMA busy_timeout = 5000');
  wait = (queue, ms) => one(db, 'SELECT tq_wait(?, ?)', queue, ms);
}

function waitUpTo(ms) {
  const end = Date.now() + ms;
  for (;;) {
    if (stopped()) return;
    const left = end - Date.now();
    try {
      if (wait(workerData.queue, Math.ceil(Math.max(1, Math.min(left, SLICE)))) === 1) return;
    } catch (err) {
      if (!/locked|busy/i.test(err.message)) throw err;
    }
    if (left <= SLICE) return;
  }
}

parentPort.on('message', (message) => {
  if (message.close) {
    if (db) close(db);
    parentPort.close();
    return;
  }
  if (db) waitUpTo(message.poll);
  parentPort.postMessage('woke');
});
