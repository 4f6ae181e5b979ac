'use strict';
// The Node worker process of bench/idle.py: `node bench/idle_node.js '<json spec>'` starts
// spec.n idle work() calls (queues q0..), prints {"cpu": share of a core} over spec.window
// seconds once idle, then {"lat": [ms, ...]} once spec.adds jobs have started. spec.mode:
// 'separate' (a Queue.work() per queue) or 'one work()' (one Worker for all of them).
const spec = JSON.parse(process.argv[2]);
const tinyq = require(spec.node); // today's helpers, or those of bench/idle.py --before
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

async function main() {
  const lat = [];
  let done;
  const all = new Promise((resolve) => { done = resolve; });
  const handler = async (payload) => {
    lat.push(Date.now() - payload.t);
    if (lat.length === spec.adds) done();
  };
  const names = Array.from({ length: spec.n }, (_, i) => `q${i}`);
  // 'one work()': a Worker for every queue; 'separate': a Queue.work() per queue
  const queues = spec.mode === 'one work()'
    ? [new tinyq.Worker(spec.path, Object.fromEntries(names.map((name) => [name, handler])))]
    : names.map((name) => new tinyq.Queue(spec.path, name));
  const works = queues.map((q) => (spec.mode === 'one work()' ? q.work() : q.work(handler)));
  await sleep(1000); // every work() has found its queue empty and sleeps
  const c0 = cpu();
  const t0 = performance.now();
  await sleep(spec.window * 1000);
  console.log(JSON.stringify({ cpu: (cpu() - c0) / ((performance.now() - t0) / 1000) }));
  await all;
  await Promise.all(queues.map((q) => q.stop()));
  await Promise.all(works);
  console.log(JSON.stringify({ lat }));
}

main().catch((err) => { console.error(err); process.exit(1); });
