'use strict';
// One Node worker process of the fairness tests (tests/test_limit_share.py):
//   node share_worker.js DB CONCURRENCY
// As share_worker.py: it works the queue `q` until SIGTERM; each job sleeps its payload's ms
// and returns this process's pid, so that a test can count which process ran what. Prints
// "working" first, and "returned N" once work() has ended.
const path = require('path');
const tinyq = require(path.join(__dirname, '..', '..', 'node'));

const [db, concurrency] = process.argv.slice(2);
const queue = new tinyq.Queue(db, 'q');
console.log('working');
queue.work(async (payload) => {
  await new Promise((resolve) => setTimeout(resolve, payload.ms));
  return process.pid;
}, { concurrency: Number(concurrency), poll: 200, handleSignals: true })
  .then((handled) => console.log(`returned ${handled}`), (err) => console.log(`raised ${err.message}`));
