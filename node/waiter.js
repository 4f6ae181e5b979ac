'use strict';
// The idle wake-up of tinyq's Node worker, on a worker_thread with its own connection: each
// 'arm' message starts a tq_wait (blocking this thread, never the main event loop), and a
// 'woke' message goes back as soon as a job may be claimable, or when `poll` ms have passed.
const { parentPort, workerData } = require('worker_threads');
const Database = require('better-sqlite3');

// How often the waiter looks at stop(); tq_wait itself sleeps until the store is written.
const SLICE = 250;

// Set by the worker when it stops: checked between slices, so stop() need not wait out a
// poll, and before the connection opens, so a worker that stopped at once opens nothing.
const stopped = () => Atomics.load(workerData.stop, 0) === 1;

let db = null;
let wait = null;
if (!stopped()) {
  db = new Database(workerData.file);
  db.loadExtension(workerData.extension);
  db.pragma('busy_timeout = 5000');
  wait = db.prepare('SELECT tq_wait(?, ?)').pluck();
}

function waitUpTo(ms) {
  const end = Date.now() + ms;
  for (;;) {
    if (stopped()) return;
    const left = end - Date.now();
    try {
      if (wait.get(workerData.queue, BigInt(Math.ceil(Math.max(1, Math.min(left, SLICE))))) === 1) return;
    } catch (err) {
      if (!/locked|busy/i.test(err.message)) throw err;
    }
    if (left <= SLICE) return;
  }
}

parentPort.on('message', (message) => {
  if (message.close) {
    if (db) db.close();
    parentPort.close();
    return;
  }
  if (db) waitUpTo(message.poll);
  parentPort.postMessage('woke');
});
