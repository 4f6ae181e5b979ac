'use strict';
// One Node measurement for bench/servers.py: `node bench/servers_node.js '<json spec>'` prints
// one JSON line. spec.system: tinyq, bullmq, pgboss, graphile; spec.workload: drain (n
// prefilled no-op jobs, concurrency c), sleep (n prefilled jobs that each await spec.sleep s),
// latency (spec.n adds, spec.gap_ms apart, each committed by its own call, to a worker
// waiting idle). NODE_PATH: bench/work/sysnode/node_modules (the peers); tinyq's own helper
// and better-sqlite3 come from node/.
//
// Every system is one class below with the same five methods, so that each can be checked
// against its docs: setup(), prefill(n), start(handler, c) -> stop(), adder() -> add(i), and
// settled() -> how many jobs the store holds as completed. The handler is called with the
// job's number i; a drain is timed from start() until the store holds all n jobs as
// completed (polled every 5 ms once the last handler has run), so a system that acks in
// batches pays for its last batch too.
const path = require('path');
const { performance } = require('perf_hooks');

const ROOT = path.dirname(__dirname);
const spec = JSON.parse(process.argv[2]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const Database = require(path.join(ROOT, 'node', 'node_modules', 'better-sqlite3'));

// ------------------------------------------------------------------------- tinyq (node/)
// tinyq's helper as users run it: `new Queue(file, 'q').work(handler, { concurrency })`.
// Its connections are opened by node/sql.js with synchronous=FULL (the default); for NORMAL
// the bench wraps sql.js's open() (before index.js and worker.js take it) to set NORMAL after.
class Tinyq {
  async setup() {
    const sql = require(path.join(ROOT, 'node', 'sql.js'));
    if (spec.sync !== 'FULL') {
      const open = sql.open;
      sql.open = (file, options) => {
        const db = open(file, options);
        db.exec(`PRAGMA synchronous = ${spec.sync}`);
        return db;
      };
    }
    this.tinyq = require(path.join(ROOT, 'node', 'index.js'));
  }

  raw() { // a connection of the bench's own, at the same durability (adds: setup and latency)
    const db = new Database(spec.path);
    db.loadExtension(process.env.TINYQ_EXT);
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${spec.sync}`);
    db.pragma('busy_timeout = 5000');
    return db;
  }

  settled() {
    if (!this.reader) this.reader = this.raw();
    return this.reader.prepare("SELECT done FROM tq_stats('q')").get().done;
  }

  async prefill(n) {
    const db = this.raw();
    const add = db.prepare("SELECT tq_add('q', ?)");
    db.transaction(() => { for (let i = 0; i < n; i++) add.get(JSON.stringify({ i })); })();
    db.close();
  }

  start(handler, c) {
    const q = new this.tinyq.Queue(spec.path, 'q');
    const working = q.work(async (payload) => handler(payload.i), { concurrency: c });
    return async () => { await q.stop(); await working; };
  }

  async adder() { // another connection: no in-process shortcut to the worker
    const db = this.raw();
    const add = db.prepare("SELECT tq_add('q', ?)");
    return async (i) => add.get(JSON.stringify({ i }));
  }
}

// ------------------------------------------------------------------------- BullMQ (Redis)
// `new Worker(name, processor, { connection, concurrency })`, its docs' way to run jobs in
// parallel in one process. Jobs added with `Queue.addBulk` (prefill) and `Queue.add`
// (latency, from a Queue with its own connection). Defaults otherwise (completed jobs kept).
class BullMQ {
  async setup() {
    this.bullmq = require('bullmq');
    this.connection = { host: '127.0.0.1', port: spec.redis_port, maxRetriesPerRequest: null };
    this.queue = new this.bullmq.Queue('q', { connection: this.connection });
  }

  async prefill(n) {
    for (let at = 0; at < n; at += 1000) {
      const jobs = [];
      for (let i = at; i < Math.min(n, at + 1000); i++) jobs.push({ name: 'j', data: { i } });
      await this.queue.addBulk(jobs);
    }
  }

  start(handler, c) {
    const worker = new this.bullmq.Worker('q', async (job) => handler(job.data.i),
      { connection: this.connection, concurrency: c });
    worker.on('error', (err) => console.error(err));
    return async () => { await worker.close(); await this.queue.close(); };
  }

  async adder() {
    return async (i) => this.queue.add('j', { i });
  }

  settled() {
    return this.queue.getCompletedCount();
  }
}

// ------------------------------------------------------------------------- pg-boss (PostgreSQL)
// pg-boss 10 has no teamSize: a worker (`boss.work`) fetches `batchSize` jobs, hands the array
// to the handler and completes them together, then waits out the polling interval (at least
// 0.5 s, its floor) unless notified. Its docs' lever for throughput is batchSize, and more
// work() calls for more parallel fetches. Here: `pollingIntervalSeconds: 0.5` (the minimum);
// concurrency c is min(c, 10) work() calls (the pool's 10 connections) each with batchSize
// (drain: 1,000; sleep: c / workers), the handler running its batch c / workers at a time.
// Latency: adds by `send` from a second PgBoss instance (the worker's own instance would
// notify its worker in-process; a producer is usually another process).
class PgBoss {
  async setup() {
    const Boss = require('pg-boss');
    this.Boss = Boss;
    this.boss = new Boss({ connectionString: spec.pg_url });
    this.boss.on('error', (err) => console.error(err));
    await this.boss.start();
    await this.boss.createQueue('q');
  }

  async prefill(n) {
    for (let at = 0; at < n; at += 1000) {
      const jobs = [];
      for (let i = at; i < Math.min(n, at + 1000); i++) jobs.push({ name: 'q', data: { i } });
      await this.boss.insert(jobs);
    }
  }

  start(handler, c) {
    const workers = Math.min(c, 10);
    const each = Math.max(1, Math.round(c / workers));
    const batchSize = spec.workload === 'drain' ? 1000 : each;
    const run = async (jobs) => {
      let next = 0;
      const lane = async () => { while (next < jobs.length) await handler(jobs[next++].data.i); };
      await Promise.all(Array.from({ length: Math.min(each, jobs.length) }, lane));
    };
    const started = Array.from({ length: workers },
      () => this.boss.work('q', { batchSize, pollingIntervalSeconds: 0.5 }, run));
    return async () => { await Promise.all(started); await this.boss.stop({ graceful: true, wait: true }); };
  }

  async adder() {
    const producer = new this.Boss({ connectionString: spec.pg_url, supervise: false, schedule: false });
    producer.on('error', (err) => console.error(err));
    await producer.start();
    this.producer = producer;
    return async (i) => producer.send('q', { i });
  }

  async settled() {
    const { rows } = await this.boss.getDb().executeSql(
      "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'q' AND state = 'completed'");
    return rows[0].n;
  }
}

// ------------------------------------------------------------------------- graphile-worker (PostgreSQL)
// `run({ connectionString, concurrency, taskList })`, its docs' way to run a worker pool in
// one process; LISTEN/NOTIFY wakes it. A quiet logger (it logs every job by default; the
// other systems log nothing). Jobs added with WorkerUtils `addJobs` (prefill) and `addJob`
// (latency, from its own pool). localQueue (batched fetch) is left at its default (off).
class Graphile {
  async setup() {
    this.gw = require('graphile-worker');
    this.logger = new this.gw.Logger(() => (level, message) => { if (level === 'error') console.error(message); });
    this.utils = await this.gw.makeWorkerUtils({ connectionString: spec.pg_url, logger: this.logger });
    await this.utils.migrate();
  }

  async prefill(n) {
    for (let at = 0; at < n; at += 1000) {
      const jobs = [];
      for (let i = at; i < Math.min(n, at + 1000); i++) jobs.push({ identifier: 'job', payload: { i } });
      await this.utils.addJobs(jobs);
    }
  }

  start(handler, c) {
    const runner = this.gw.run({
      connectionString: spec.pg_url, concurrency: c, noHandleSignals: true, logger: this.logger,
      taskList: { job: async (payload) => handler(payload.i) },
    });
    return async () => { await (await runner).stop(); await this.utils.release(); };
  }

  async adder() {
    return async (i) => this.utils.addJob('job', { i });
  }

  async settled() { // it deletes a job once completed
    const { rows } = await this.utils.withPgClient((client) =>
      client.query('SELECT count(*)::int AS n FROM graphile_worker._private_jobs'));
    return spec.n - rows[0].n;
  }
}

const SYSTEMS = { tinyq: Tinyq, bullmq: BullMQ, pgboss: PgBoss, graphile: Graphile };

// ------------------------------------------------------------------------- workloads

async function drain(sys) {
  const n = spec.n;
  await sys.prefill(n);
  let done = 0;
  let finished;
  const all = new Promise((resolve) => { finished = resolve; });
  const handler = spec.workload === 'sleep'
    ? async () => { await sleep(spec.sleep * 1000); if (++done === n) finished(); }
    : async () => { if (++done === n) finished(); };
  console.log('working');
  const t0 = performance.now();
  const stop = sys.start(handler, spec.c);
  const timer = setTimeout(finished, spec.cap_s * 1000);
  await all;
  clearTimeout(timer);
  const ran = (performance.now() - t0) / 1000;
  const jobs = done;
  let acked = jobs < n ? 0 : await sys.settled();
  const until = performance.now() + 15000;
  while (jobs === n && acked < n && performance.now() < until) {
    await sleep(5);
    acked = await sys.settled();
  }
  if (jobs === n && acked < n) throw new Error(`only ${acked} of ${n} jobs completed in the store 15 s after the last handler`);
  const seconds = (performance.now() - t0) / 1000;
  await Promise.race([stop(), sleep(10000)]);
  return { seconds, ran, jobs, n, capped: jobs < n };
}

async function latency(sys) {
  const starts = new Map();
  let waiting = null;
  const handler = async (i) => {
    starts.set(i, performance.now());
    if (waiting && waiting.i === i) waiting.resolve();
  };
  const stop = sys.start(handler, 1);
  const add = await sys.adder();
  await sleep(1500); // the worker settles into idle
  console.log('working');
  const adds = [];
  const calls = [];
  const stopAt = performance.now() + (spec.cap_s + 2) * 1000; // pg-boss: 0.5 s a job
  for (let i = 0; i < spec.n; i++) {
    if (performance.now() > stopAt) break;
    await sleep(spec.gap_ms);
    const ran = new Promise((resolve) => { waiting = { i, resolve }; });
    const t0 = performance.now();
    await add(i);
    calls.push(performance.now() - t0);
    adds.push(t0);
    await Promise.race([ran, sleep(3000)]); // each job started before the next add
  }
  await Promise.race([stop(), sleep(10000)]);
  if (sys.producer) await sys.producer.stop({ graceful: false });
  const lat = adds.map((t0, i) => (starts.has(i) ? starts.get(i) - t0 : Infinity)).sort((a, b) => a - b);
  calls.sort((a, b) => a - b);
  const at = (xs, p) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))];
  for (let k = 0; k < lat.length; k++) if (lat[k] === Infinity) lat[k] = 1e9; // never started (JSON has no Infinity)
  return { p50_ms: at(lat, 0.5), p99_ms: at(lat, 0.99), add_ms: at(calls, 0.5), lost: lat.filter((x) => x === 1e9).length, samples: lat.length };
}

(async () => {
  const sys = new SYSTEMS[spec.system]();
  await sys.setup();
  const result = spec.workload === 'latency' ? await latency(sys) : await drain(sys);
  console.log(JSON.stringify(result));
  process.exit(0);
})().catch((err) => { console.error(err && err.stack || err); process.exit(1); });
