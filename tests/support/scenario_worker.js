'use strict';
// One worker process of a helper scenario (tests/helper_scenarios.json) for the Node helper:
//   node scenario_worker.js DB LOG INDEX
// As scenario_worker.py: each handler start appends "id attempt pid start" to LOG (and
// "... cancelled" / "... end" / "... step" as the scenario says); prints "returned N" or
// "raised message" once work() ends (SIGTERM stops it; with the scenario's `stop`, with its
// timeout, and the process lives on after work() returns). With the scenario's `drain`:
// drain() instead, and "drained {summary JSON}" once it returns.
const fs = require('fs');
const path = require('path');
const tinyq = require(path.join(__dirname, '..', '..', 'node'));

const [db, log, index] = process.argv.slice(2);
const spec = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'helper_scenarios.json'), 'utf8'))
  .scenarios[Number(index)];
const handlerSpec = spec.handler || {};
const results = { unstorable: () => ({ big: 10n }) };
const record = (run, event = 'start') => fs.appendFileSync(log, `${run.id} ${run.attempt} ${process.pid} ${event}\n`);

async function handler(payload, run) {
  record(run);
  if (handlerSpec.hang) {
    await new Promise(() => run.signal.addEventListener('abort', () => record(run, 'cancelled')));
  }
  if (handlerSpec.sleep_ms) {
    await new Promise((resolve) => setTimeout(resolve, handlerSpec.sleep_ms));
    if (spec.stop || spec.queues) record(run, 'end');
  }
  if ('snooze' in handlerSpec) run.snooze(handlerSpec.snooze);
  if (handlerSpec.durable_sleep_ms) await run.sleep('nap', handlerSpec.durable_sleep_ms);
  for (const [call, name] of handlerSpec.waits || []) await run[{ wait_signal: 'waitSignal' }[call] || call](name, 0);
  if ('step_result' in handlerSpec) {
    await run.step('ask', () => {
      record(run, 'step');
      const make = results[handlerSpec.step_result];
      return make ? make() : handlerSpec.step_result;
    });
  }
  if (run.attempt <= ((handlerSpec.raise_until || {})[payload.n] || 0)) {
    throw new Error(`attempt ${run.attempt} of job ${payload.n} raises`);
  }
  const make = results[handlerSpec.result];
  return make ? make() : handlerSpec.result;
}

console.log('working');
if (spec.queues) { // one work() for all of them; SIGTERM stops it
  const queues = Object.fromEntries(Object.entries(spec.queues).map(([name, opts]) => [name, [handler, opts]]));
  new tinyq.Worker(db, queues, { ...spec.work, handleSignals: true }).work()
    .then((counts) => console.log(`returned ${Object.values(counts).reduce((a, b) => a + b, 0)}`),
      (err) => console.log(`raised ${err.message}`));
  return;
}
const queue = new tinyq.Queue(db, 'q');
if (spec.drain) {
  queue.drain(handler, spec.work).then((summary) => {
    console.log(`drained ${JSON.stringify(summary)}`);
    queue.close();
  }, (err) => console.log(`raised ${err.message}`));
  return;
}
if (spec.stop) process.on('SIGTERM', () => queue.stop({ timeout: spec.stop.timeout_ms }));
queue.work(handler, { ...spec.work, handleSignals: !spec.stop })
  .then((n) => console.log(`returned ${n}`), (err) => console.log(`raised ${err.message}`))
  .then(() => { if (spec.stop) setInterval(() => {}, 1000); }); // lives on: the abandoned handler may return
