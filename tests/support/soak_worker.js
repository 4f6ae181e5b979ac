'use strict';
// The Node processes of the soak (tests/support/soak.py), through the Node helper; the same roles
// and job kinds as tests/support/soak_worker.py:
//   node soak_worker.js worker   DB LOG SEED
//   node soak_worker.js producer DB LOG SEED STOP
// A SIGTERM before work() has its own handler (the first log line is written after this):
// nothing is in flight yet, so leave with 0, as work() would. Once work() runs, its
// handler finishes the work in flight and this one does nothing.
let working = false;
process.on('SIGTERM', () => { if (!working) process.exit(0); });
const fs = require('fs');
const path = require('path');
const tinyq = require(path.join(__dirname, '..', '..', 'node', 'index.js'));

const KINDS = (process.env.TINYQ_SOAK_KINDS || 'ok,ok,ok,ok,ok,steps,steps,steps,retry,snooze,error,fail').split(',');
const QUEUE = process.env.TINYQ_SOAK_QUEUE || 'soak';
const P_CANCEL = Number(process.env.TINYQ_SOAK_CANCELS || 0.03); // per producer round
const monotonic = () => Number(process.hrtime.bigint()) / 1e9; // CLOCK_MONOTONIC, as Python's
const [role, db, logPath, seedText, stop] = process.argv.slice(2);

let seed = Number(seedText) >>> 0;
function random() { // a small seeded generator (mulberry32)
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pickFrom = (items) => items[Math.floor(random() * items.length)];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const fd = fs.openSync(logPath, 'a');
const log = (rec) => fs.writeSync(fd, JSON.stringify({ ...rec, pid: process.pid }) + '\n');

async function worker() {
  const q = new tinyq.Queue(db, QUEUE);
  const effect = (run, step) => {
    log({ ev: 'effect', id: run.id, step, attempt: run.attempt });
    return `${run.attempt}:${process.pid}`;
  };
  log({ ev: 'start', role: 'worker' });
  const handle = async (payload, run) => {
    await sleep(5 + random() * 35);
    if (payload.k === 'slow') { // longer than the lease: renewed while it runs
      for (let pct = 0; pct < 100; pct += 20) {
        if (run.cancelled) return null; // cancelled, timed out or taken: stop
        run.progress({ pct });
        await sleep(500);
      }
      return { slow: true };
    }
    if (payload.k === 'steps') {
      const a = await run.step('a', () => effect(run, 'a'));
      run.progress({ pct: 50 });
      await sleep(5 + random() * 25);
      const b = await run.step('b', () => effect(run, 'b'));
      return { a, b };
    }
    if (run.attempt === 1) {
      if (payload.k === 'retry') run.retry('50ms');
      if (payload.k === 'snooze') run.snooze('50ms');
      if (payload.k === 'error') throw new Error('first attempt fails');
      if (payload.k === 'fail') run.fail('failed for good (the soak retries it)');
    }
    return { by: process.pid };
  };
  working = true;
  await q.work(async (payload, run) => {
    log({ ev: 'run', id: run.id, attempt: run.attempt, t: monotonic() });
    try {
      return await handle(payload, run);
    } finally {
      log({ ev: 'ran', id: run.id, attempt: run.attempt, t: monotonic() });
    }
  }, { concurrency: 2, poll: 200, handleSignals: true });
  log({ ev: 'stopped' });
}

async function producer() {
  // A minute's busy timeout: on a starved machine a writer can hold the lock past 5 s, and
  // the soak's producers are to wait for it, not fail.
  const q = new tinyq.Queue(tinyq.open(db), QUEUE);
  q.db.pragma('busy_timeout = 60000');
  let n = 0;
  let recent = [];
  while (!fs.existsSync(stop)) {
    // The jobs due now, by this producer's clock (see soak_worker.py).
    const backlog = q.db.prepare("SELECT count(*) FROM tinyq_jobs WHERE queue = ? AND status = 'queued' AND run_at <= tq_now()").pluck().get(QUEUE) || 0;
    if (backlog < 150) {
      n += 1;
      const kind = pickFrom(KINDS);
      const group = `g${Math.floor(random() * 5)}`;
      const opts = { group };
      if (random() < 0.5) opts.id = `js-${process.pid}-${n}`;
      if (random() < 0.1) opts.delay = `${50 + Math.floor(random() * 1950)}ms`;
      const id = q.add({ k: kind, n }, opts);
      log({ ev: 'add', id, kind, group });
      recent = [...recent, id].slice(-20);
    }
    if (recent.length && random() < P_CANCEL) {
      const id = pickFrom(recent);
      log({ ev: 'cancel', id, r: q.cancel(id) ? 1 : 0 });
    }
    await sleep(10 + random() * 40);
  }
  log({ ev: 'stopped' });
  q.close();
}

(role === 'worker' ? worker() : producer()).catch((err) => {
  console.error(err);
  process.exit(1);
});
