'use strict';
// The idle wake-ups of every work() of the process: one waiter thread (waiter.js) per
// database file and driver, whatever the number of queues and work() calls, started by the
// first work() on the file and ended with the last. An idle worker asks `sleep(queue)`: the
// promise resolves once a job of that queue may be claimable (tq_wait_any named it). No
// timer: tq_wait_any wakes for new jobs and for every due time (a scheduled job, a lease
// that ran out, a rate window, a bound, a timeout).
const path = require('path');
const { extensionPath } = require('./sql.js');

const CLOSE_MS = 2000; // the longest the last work() waits for the waiter thread to end

const shared = new Map(); // file + driver -> { users, waiter }

function startThread(file, driver, poll) {
  const { MessageChannel, Worker } = require('worker_threads');
  const { port1, port2 } = new MessageChannel();
  const signal = new Int32Array(new SharedArrayBuffer(8)); // [sleepers sent, closed] (waiter.js)
  const worker = new Worker(path.join(__dirname, 'waiter.js'), {
    workerData: { file, extension: extensionPath(), driver, poll, port: port2, signal },
    transferList: [port2],
  });
  worker.unref(); // never what keeps a process alive
  port1.unref();
  const sleepers = new Map(); // queue -> resolvers
  const wakeAll = () => {
    for (const resolvers of sleepers.values()) for (const resolve of resolvers) resolve();
    sleepers.clear();
  };
  port1.on('message', ({ ready }) => {
    for (const queue of ready) {
      for (const resolve of sleepers.get(queue) || []) resolve();
      sleepers.delete(queue);
    }
  });
  let dead = null; // the thread failed or exited: wake-ups fall back to timers
  let exited;
  const exit = new Promise((resolve) => { exited = resolve; });
  const died = (err) => {
    dead = dead || err || new Error('tinyq: the wake-up thread exited');
    exited();
    wakeAll();
  };
  worker.on('error', (err) => {
    console.warn(`tinyq: the wake-up thread failed: ${err.message}`);
    died(err);
  });
  worker.on('exit', () => died(null));
  return {
    sleeping: () => sleepers.size,
    /** How many work() calls use the thread: while one is awake, its calls are short. */
    workers(n) {
      port1.postMessage({ workers: n });
    },
    /** Resolves when a job of `queue` may be claimable (after `poll` ms once the thread is gone). */
    sleep(queue) {
      if (dead) return new Promise((resolve) => setTimeout(resolve, poll).unref());
      return new Promise((resolve) => {
        if (!sleepers.has(queue)) {
          sleepers.set(queue, []);
          port1.postMessage({ sleep: queue });
          Atomics.add(signal, 0, 1);
          Atomics.notify(signal, 0);
        }
        sleepers.get(queue).push(resolve);
      });
    },
    /** Ends the thread; resolves once it has closed its connection (CLOSE_MS at most), so
     * nothing of the worker touches the database after work() returns. */
    async close() {
      Atomics.store(signal, 1, 1);
      Atomics.add(signal, 0, 1);
      Atomics.notify(signal, 0);
      let timer;
      await Promise.race([exit, new Promise((resolve) => { timer = setTimeout(resolve, CLOSE_MS); })]);
      clearTimeout(timer);
      wakeAll();
    },
  };
}

/** The waiter of `file` for one work(): { sleep(queue), release() }, release() resolving
 * once the last work() on the file let go and its thread ended. */
function acquire(file, driver, poll) {
  const key = `${driver}\0${file}`;
  let entry = shared.get(key);
  if (!entry) {
    entry = { users: 0, waiter: startThread(file, driver, poll) };
    shared.set(key, entry);
  }
  entry.users += 1;
  const { waiter } = entry;
  waiter.workers(entry.users);
  let released = false;
  return {
    sleep: (queue) => waiter.sleep(queue),
    async release() {
      if (released) return;
      released = true;
      entry.users -= 1;
      if (entry.users > 0) {
        waiter.workers(entry.users);
        return;
      }
      shared.delete(key);
      await waiter.close();
    },
  };
}

/** The process's waiter threads: [{ file, users (work() calls), sleeping (idle queues) }]. */
function threads() {
  return [...shared].map(([key, { users, waiter }]) => ({ file: key.split('\0')[1], users, sleeping: waiter.sleeping() }));
}

module.exports = { acquire, threads };
