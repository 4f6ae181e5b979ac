'use strict';
// One Node measurement for bench/workers.py: `node bench/workers_node.js '<json spec>'`
// prints one JSON line. Kinds: node-tinyq (drain a prefilled queue with tinyq's work()),
// node-wake (idle wake-up latency), node-liteque and node-plainjob (the same drain with the
// npm queues). NODE_PATH points at bench/work/node/node_modules (liteque, plainjob,
// better-sqlite3); TINYQ_EXT at the extension.
const { performance, monitorEventLoopDelay } = require('perf_hooks');
const Database = require('better-sqlite3');

const spec = JSON.parse(process.argv[2]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function tinyqDb(file) {
  const db = new Database(file);
  db.loadExtension(process.env.TINYQ_EXT);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  return db;
}

/** Resolves, with the seconds it took, once `n` handlers ran; `start(handler)` starts the worker. */
async function drain(n, start) {
  let left = n;
  let finished;
  const all = new Promise((resolve) => { finished = resolve; });
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const stop = await start(async () => {
    left -= 1;
    if (left === 0) finished();
  });
  await all;
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await stop();
  return { seconds, cpu: (cpu.user + cpu.system) / 1e6, jobs: n };
}

const kinds = {
  async 'node-tinyq'() {
    const tinyq = require(spec.module);
    const db = tinyqDb(spec.path);
    const add = db.prepare("SELECT tq_add('q', ?)");
    db.transaction(() => { for (let i = 0; i < spec.n; i++) add.get(`{"n": ${i}}`); })();
    db.close();
    const q = new tinyq.Queue(spec.path, 'q');
    // spec.sleep: a model call of that many seconds, its answer kept as a step (spec.step)
    const model = () => sleep(spec.sleep * 1000).then(() => ({ text: 'an answer' }));
    const slow = (handler) => async (payload, run) => {
      if (spec.step) await run.step('answer', model);
      else await model();
      return handler();
    };
    return drain(spec.n, (handler) => {
      const working = q.work(spec.sleep ? slow(handler) : handler, { concurrency: spec.c, prefetch: spec.prefetch });
      return () => q.stop().then(() => working);
    });
  },

  async 'node-wake'() {
    const tinyq = require(spec.module);
    const q = new tinyq.Queue(spec.path, 'q');
    const other = tinyqDb(spec.path); // adds from another connection: no shortcut through q.add
    const add = other.prepare("SELECT tq_add('q', '{}')");
    let t0 = 0;
    let started;
    const latencies = [];
    const working = q.work(async () => { latencies.push(performance.now() - t0); started(); });
    await sleep(300);
    const delay = monitorEventLoopDelay({ resolution: 1 });
    delay.enable();
    for (let i = 0; i < spec.n; i++) {
      await sleep(30 + (i * 7) % 50); // idle in between: the worker is asleep again
      const ran = new Promise((resolve) => { started = resolve; });
      t0 = performance.now();
      add.get();
      await ran;
    }
    delay.disable();
    await q.stop();
    await working;
    latencies.sort((a, b) => a - b);
    const at = (p) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))];
    return { median_ms: at(0.5), p90_ms: at(0.9), stall_ms: delay.max / 1e6, n: latencies.length };
  },

  async 'node-liteque'() {
    const { buildDBClient, Runner, SqliteQueue } = require('liteque');
    const db = buildDBClient(spec.path, { runMigrations: true });
    const queue = new SqliteQueue('q', db, { defaultJobArgs: { numRetries: 0 }, keepFailedJobs: false });
    for (let i = 0; i < spec.n; i++) await queue.enqueue({ n: i });
    return drain(spec.n, (handler) => {
      const runner = new Runner(queue, { run: handler, onComplete: async () => {}, onError: async () => {} },
        { concurrency: spec.c, pollIntervalMs: 1, timeoutSecs: 60 });
      const running = runner.run();
      return () => { runner.stop(); return running; };
    });
  },

  async 'node-plainjob'() {
    const { better, defineQueue, defineWorker } = require('plainjob');
    const sqlite = new Database(spec.path);
    sqlite.pragma('journal_mode = WAL');
    sqlite.pragma('synchronous = NORMAL');
    const queue = defineQueue({ connection: better(sqlite), logger: quiet });
    queue.addMany('bench', Array.from({ length: spec.n }, (_, i) => ({ n: i })));
    return drain(spec.n, (handler) => {
      // plainjob's worker runs one job at a time: c workers in this process.
      const workers = Array.from({ length: spec.c }, () => defineWorker('bench', handler,
        { queue, pollIntervall: 1, logger: quiet }));
      const running = workers.map((w) => w.start());
      return async () => { await Promise.all(workers.map((w) => w.stop())); await Promise.all(running); };
    });
  },
};

const quiet = { debug() {}, info() {}, warn() {}, error: console.error, log() {} };

kinds[spec.kind]().then((result) => {
  console.log(JSON.stringify(result));
  process.exit(0);
}, (err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
