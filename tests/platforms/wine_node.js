'use strict';
// Run by Node for Windows (node.exe under Wine: scripts/release.sh's try_windows_node and
// tests/test_platforms.py) beside node_modules/tinyq, the npm package as npm installs it: the
// package picks its win32-x64 tinyq.dll, loads it into node:sqlite, and its worker drains a
// queue on a file database. Prints one line; throws on anything unexpected.
const path = require('path');
const tinyq = require('tinyq');
const { DatabaseSync } = require('node:sqlite');

const check = (ok, what) => { if (!ok) throw new Error(what); };

async function main() {
  const packaged = path.join(__dirname, 'node_modules', 'tinyq', 'prebuilds', 'win32-x64', 'tinyq.dll');
  check(tinyq.extensionPath() === packaged, `extensionPath() is ${tinyq.extensionPath()}, not ${packaged}`);
  const file = path.join(__dirname, 'jobs.db');
  const db = tinyq.load(new DatabaseSync(file, { allowExtension: true }));
  const { version, sqlite } = db.prepare('SELECT tq_version() AS version, sqlite_version() AS sqlite').get();
  check(version === require('tinyq/package.json').version, `tq_version() is ${version}`);

  const queue = new tinyq.Queue(db, 'squares');
  for (let n = 1; n <= 5; n++) queue.add({ n }, { id: `n${n}`, attempts: 1 });
  const summary = await queue.drain(async ({ n }, run) => {
    if (n === 5) run.fail('five is left out');
    return { square: n * n };
  }, { concurrency: 2 });
  check(summary.done === 4 && summary.failed === 1, `drain gave ${JSON.stringify(summary)}`);
  for (let n = 1; n <= 4; n++) {
    const job = queue.get(`n${n}`);
    check(job.state === 'done' && job.result.square === n * n, `n${n}: ${JSON.stringify(job)}`);
  }
  const five = queue.get('n5');
  check(five.state === 'failed' && five.error === 'five is left out', `n5: ${JSON.stringify(five)}`);
  db.close();
  console.log(`npm tinyq ${version} (prebuilds/win32-x64/tinyq.dll) in Node ${process.version} on ` +
    `${process.platform}-${process.arch}, node:sqlite (SQLite ${sqlite}): drained 5 jobs on jobs.db, ` +
    `done 4 (results checked), failed 1 (run.fail)`);
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
