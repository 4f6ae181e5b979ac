'use strict';
// One worker process of the workflow tests (tests/test_workflow_helpers.py) for the Node helper:
//   node workflow_worker.js DB LOG [CONCURRENCY]
// As workflow_worker.py: works the queue `wf` until SIGTERM, its handler chosen by the
// payload's `kind`, each event appended to LOG as "event id attempt pid".
const fs = require('fs');
const path = require('path');
const tinyq = require(path.join(__dirname, '..', '..', 'node'));

const [db, log, concurrency] = process.argv.slice(2);
const queue = new tinyq.Queue(db, 'wf');
const note = (event, run) => fs.appendFileSync(log, `${event} ${run.id} ${run.attempt} ${process.pid}\n`);

async function handler(payload, run) {
  note('start', run);
  switch (payload.kind) {
    case 'child':
      if (payload.fail) run.fail('bad page');
      return payload.n * 10;
    case 'parent': {
      // ids made from the parent's own, so that a replay adds nothing
      const ids = Array.from({ length: payload.children }, (_, n) => `${run.id}/${n}`);
      new tinyq.Queue(run.db, 'wf').addMany(ids.map((_, n) => ({ kind: 'child', n, fail: n === payload.failing })), { ids });
      const results = await run.waitFor(ids);
      note('collected', run);
      return { results };
    }
    case 'approval': {
      const draft = await run.step('draft', () => { note('model', run); return 'a draft'; });
      const approval = await run.waitSignal(payload.signal, payload.timeout);
      note('sent', run);
      return { draft, approval };
    }
    case 'sleeper':
      await run.sleep('nap', payload.ms);
      note('woke', run);
      return 'woke';
    default:
      return 'plain';
  }
}

console.log('working');
queue.work(handler, { concurrency: Number(concurrency || 1), poll: 200, handleSignals: true })
  .then((n) => console.log(`returned ${n}`), (err) => console.log(`raised ${err.message}`));
