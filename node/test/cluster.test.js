'use strict';
// Issue 28, prefork in Node: the cluster module's primary touches the queue, then forks
// workers. cluster.fork() starts a new Node process (no fork() of the primary's memory), so
// each worker opens its own connection: every job runs, once.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const { tempDb } = require('../test-support');

const PROGRAM = `
const cluster = require('cluster');
const fs = require('fs');
const tinyq = require(${JSON.stringify(path.join(__dirname, '..'))});
const { one } = require(${JSON.stringify(path.join(__dirname, '..', 'sql.js'))});   // any driver
const [file, log, jobs] = [process.env.DB, process.env.LOG, Number(process.env.JOBS)];
if (cluster.isPrimary) {
  const q = new tinyq.Queue(file, 'emails');
  q.settings({ concurrency: 4 });              // set up in the primary, connection open
  let online = 0;
  for (let i = 0; i < 4; i++) cluster.fork().on('message', () => {
    if (++online < 4) return;
    for (let n = 0; n < jobs; n++) q.add({ n });
    const check = setInterval(() => {
      const done = one(q.db, "SELECT count(*) FROM tq_jobs WHERE queue = 'emails' AND state = 'done'");
      if (done < jobs) return;
      clearInterval(check);
      for (const w of Object.values(cluster.workers)) w.kill();
      console.log('done', done);
    }, 50);
  });
} else {
  const q = new tinyq.Queue(file, 'emails');
  q.work((payload) => { fs.appendFileSync(log, payload.n + ' ' + process.pid + '\\n'); }, { concurrency: 2 });
  process.send('working');
}
`;

test('workers forked by cluster from a primary that opened the queue run every job once', () => {
  const file = tempDb();
  const log = path.join(path.dirname(file), 'ran.log');
  const program = path.join(path.dirname(file), 'cluster.js');   // cluster forks a file
  fs.writeFileSync(program, PROGRAM);
  const out = spawnSync(process.execPath, [program], {
    env: { ...process.env, DB: file, LOG: log, JOBS: '400' }, encoding: 'utf8', timeout: 120000,
  });
  assert.match(out.stdout, /done 400/, out.stderr);
  const ran = fs.readFileSync(log, 'utf8').trim().split('\n').map((line) => line.split(' ')[0]);
  assert.equal(ran.length, 400);
  assert.equal(new Set(ran).size, 400);
});
