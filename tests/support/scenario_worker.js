'use strict';
// One worker process of a helper scenario (tests/helper_scenarios.json) for the Node helper:
//   node scenario_worker.js DB LOG INDEX
// As scenario_worker.py: each handler start appends "id attempt pid" to LOG; prints
// "returned N" or "raised message" once work() ends (SIGTERM stops it).
const fs = require('fs');
const path = require('path');
const tinyq = require(path.join(__dirname, '..', '..', 'node'));

const [db, log, index] = process.argv.slice(2);
const spec = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'helper_scenarios.json'), 'utf8'))
  .scenarios[Number(index)];
const handlerSpec = spec.handler || {};
const results = { unstorable: () => ({ big: 10n }) };

async function handler(payload, run) {
  fs.appendFileSync(log, `${run.id} ${run.attempt} ${process.pid}\n`);
  if (handlerSpec.sleep_ms) await new Promise((resolve) => setTimeout(resolve, handlerSpec.sleep_ms));
  if ('snooze' in handlerSpec) run.snooze(handlerSpec.snooze);
  if (handlerSpec.durable_sleep_ms) await run.sleep('nap', handlerSpec.durable_sleep_ms);
  const make = results[handlerSpec.result];
  return make ? make() : handlerSpec.result;
}

console.log('working');
new tinyq.Queue(db, 'q').work(handler, { ...spec.work, handleSignals: true })
  .then((n) => console.log(`returned ${n}`), (err) => console.log(`raised ${err.message}`));
