'use strict';
// The idle wake-up of tinyq's Node workers, on one worker_thread per database file of the
// process (wakeups.js), with its own connection: it sleeps in tq_wait_any for every queue
// whose worker is idle (blocking this thread, never the main event loop), and posts
// { ready: [queues] } as soon as a job of those may be claimable. The main thread sends
// { sleep: queue } through `port`, read synchronously between tq_wait_any calls
// (receiveMessageOnPort), and bumps `signal[0]` (Atomics.notify) to wake a waiter with
// nothing to wait for; `signal[1]` is 1 once it closes.
const { receiveMessageOnPort, workerData } = require('worker_threads');
const { adapterOf, openWith } = require('./drivers.js');
const { close, exec, one } = require('./sql.js');

// How often the waiter looks at close when every worker sleeps; tq_wait_any itself sleeps
// until the store is written. A queue that falls idle while a call runs is not in its list
// until the next call (whose first look sees what came meanwhile). So while any worker of
// the file is awake (it may fall idle at any time), and a little after a wake-up, the calls
// are short: a worker whose last job just ended waits little for its next one.
const SLICE = 250;
const SHORT_SLICE = 10;
const BUSY_FOR = 200; // ms of short calls after the last wake-up

const { port, signal, poll } = workerData;
const closed = () => Atomics.load(signal, 1) === 1;

let db = null;
if (!closed()) {
  db = openWith(workerData.driver, workerData.file);
  adapterOf(db).load(db, workerData.extension);
  exec(db, 'PRAGMA busy_timeout = 5000');
}

const sleeping = new Set();
let busyUntil = 0;
let workers = 1; // the work() calls on the file, asleep or not ({ workers: n })

/** Takes the messages sent since the last look; false once closed. */
function take() {
  for (let m = receiveMessageOnPort(port); m !== undefined; m = receiveMessageOnPort(port)) {
    if (m.message.sleep !== undefined) sleeping.add(m.message.sleep);
    if (m.message.workers !== undefined) workers = m.message.workers;
  }
  return !closed();
}

function waitAny(ms) {
  try {
    return JSON.parse(one(db, 'SELECT tq_wait_any(?, ?)', JSON.stringify([...sleeping]), ms));
  } catch (err) {
    if (!/locked|busy/i.test(err.message)) throw err;
    Atomics.wait(signal, 0, Atomics.load(signal, 0), poll); // a busy store: every queue claims after `poll`
    return [...sleeping];
  }
}

if (db) {
  try {
    while (take()) {
      if (sleeping.size === 0) {
        const seen = Atomics.load(signal, 0);
        if (!take()) break;
        if (sleeping.size === 0) Atomics.wait(signal, 0, seen); // until a sleeper or close
        continue;
      }
      const short = sleeping.size < workers || Date.now() < busyUntil;
      const ready = waitAny(short ? SHORT_SLICE : SLICE);
      if (ready.length > 0) {
        for (const queue of ready) sleeping.delete(queue);
        busyUntil = Date.now() + BUSY_FOR;
        port.postMessage({ ready });
      }
    }
  } finally {
    close(db);
  }
}
port.close();
