'use strict';
// Workers in child processes: steps survive a killed worker; SIGTERM stops a worker cleanly.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('child_process');
const path = require('path');
const tinyq = require('..');

const { tempDb } = require('../test-support');

/** A child `node -e source` with TINYQ_TEST_DB set; resolves `lines` as its stdout comes. */
function child(source, file) {
  const pkg = JSON.stringify(path.join(__dirname, '..'));
  const proc = spawn(process.execPath, ['-e', `const tinyq = require(${pkg});\n${source}`], {
    env: { ...process.env, TINYQ_TEST_DB: file },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  const waiters = [];
  proc.stdout.on('data', (chunk) => {
    out += chunk;
    for (const w of waiters.splice(0)) w();
  });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  /** Resolves once the child printed a line matching `re` (rejects if it exits first). */
  proc.line = (re) => new Promise((resolve, reject) => {
    const check = () => (re.test(out) ? resolve(out.match(re)) : waiters.push(check));
    exited.then(() => reject(new Error(`child exited before printing ${re}: ${out}`)));
    check();
  });
  proc.exited = exited;
  return proc;
}

test('a step kept by a worker that is then killed (SIGKILL) is the next attempt\'s answer', async () => {
  const file = tempDb();
  const q = new tinyq.Queue(file, 'q');
  q.settings({ lease: '30s' });
  q.add({ question: 'hi?' }, { id: 'ask' });

  const worker = child(`
    const q = new tinyq.Queue(process.env.TINYQ_TEST_DB, 'q');
    q.work(async (payload, run) => {
      const answer = await run.step('answer', async () => 'answer of pid ' + process.pid);
      console.log('kept: ' + answer + ' (attempt ' + run.attempt + ')');
      await new Promise(() => {});   // and never finish: the parent kills us here
    });`, file);
  const [, kept] = await worker.line(/kept: (.*) \(attempt 1\)/);
  worker.kill('SIGKILL');
  assert.equal((await worker.exited).signal, 'SIGKILL');
  assert.equal(q.get('ask').state, 'running');
  const deadLease = q.get('ask').lease_until;

  // The dead process's lease ends at once (DUR-02), well before its 30 s run out.
  const t0 = Date.now();
  let seen;
  const working = q.work(async (payload, run) => {
    let recomputed = false;
    const answer = await run.step('answer', async () => { recomputed = true; return 'a new answer'; });
    seen = { answer, recomputed, attempt: run.attempt, payload };
    return { answer };
  });
  while (q.get('ask').state !== 'done' && Date.now() - t0 < 60000) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await q.stop();
  await working;
  assert.deepEqual(seen, { answer: kept, recomputed: false, attempt: 2, payload: { question: 'hi?' } });
  assert.deepEqual(q.get('ask').result, { answer: kept });
  // settled (the store's clock) before the dead worker's lease would have run out
  assert.ok(q.get('ask').settled_at < deadLease, `settled ${q.get('ask').settled_at}, lease ${deadLease}`);
  q.close();
});

test('with handleSignals, SIGTERM stops claiming and waits for the handler in flight', async () => {
  const file = tempDb();
  const q = new tinyq.Queue(file, 'q');
  q.add({}, { id: 'first' });
  q.add({}, { id: 'second' });

  const worker = child(`
    const q = new tinyq.Queue(process.env.TINYQ_TEST_DB, 'q');
    q.work(async (payload, run) => {
      console.log('started ' + run.id);
      // in flight until the signal: tinyq's own listener, added by work(), runs before this one
      await new Promise((resolve) => process.once('SIGTERM', resolve));
      console.log('finished ' + run.id);
      return 'ok';
    }, { handleSignals: true }).then((handled) => {
      console.log('stopped after ' + handled);
      q.close();
    });`, file);
  await worker.line(/started first/);
  worker.kill('SIGTERM');
  const { code, signal } = await worker.exited;
  assert.equal(signal, null);
  assert.equal(code, 0);
  await worker.line(/finished first\nstopped after 1\n$/);
  assert.equal(q.get('first').state, 'done');
  assert.equal(q.get('second').state, 'waiting');
  q.close();
});

test('SIGTERM with five jobs in flight: all five settle, nothing more is claimed', async () => {
  const file = tempDb();
  const q = new tinyq.Queue(file, 'q');
  for (let i = 0; i < 12; i++) q.add({ i }, { id: `j${i}`, priority: 100 - i });
  const worker = child(`
    const q = new tinyq.Queue(process.env.TINYQ_TEST_DB, 'q');
    q.work(async (payload, run) => {
      run.progress('started');
      await new Promise((resolve) => process.once('SIGTERM', resolve));   // after tinyq's listener
      return 'finished';
    }, { concurrency: 5, handleSignals: true }).then((handled) => {
      console.log('stopped after ' + handled);
      q.close();
    });`, file);
  const ids = Array.from({ length: 12 }, (_, i) => `j${i}`);
  while (!ids.slice(0, 5).every((id) => q.get(id).progress === 'started')) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  worker.kill('SIGTERM');
  const { code } = await worker.exited;
  assert.equal(code, 0);
  await worker.line(/stopped after 5\n$/);
  assert.deepEqual(ids.map((id) => q.get(id).state),
    [...Array(5).fill('done'), ...Array(7).fill('waiting')]);
  assert.deepEqual(ids.slice(5).map((id) => q.get(id).attempt), Array(7).fill(0));
  q.close();
});

test('jobs claimed ahead by a worker that is then killed (SIGKILL) run in the next worker, once', async () => {
  const file = tempDb();
  const q = new tinyq.Queue(file, 'q');
  q.settings({ lease: '30s' });
  const ids = Array.from({ length: 30 }, (_, i) => q.add({ i }, { id: `k${String(i).padStart(2, '0')}`, priority: 100 - i }));

  // Tiny jobs, then one that never finishes (the parent kills us there): the first after ten
  // with a job claimed behind it.
  const worker = child(`
    const q = new tinyq.Queue(process.env.TINYQ_TEST_DB, 'q');
    q.work(async ({ i }, run) => {
      console.log('started ' + run.id);
      const next = 'k' + String(i + 1).padStart(2, '0');
      if (i >= 10 && q.get(next).state === 'running') {
        console.log('blocked ' + run.id);
        await new Promise(() => {});
      }
    }, { prefetch: 7 }); // always claims ahead ('auto' does only while handlers take < 1 ms)`, file);
  const blocked = Number((await worker.line(/blocked k(\d\d)/))[1]);
  const ahead = ids.slice(blocked + 1).filter((id) => q.get(id).state === 'running');
  const held = [ids[blocked], ...ahead]; // leased by the worker about to be killed
  const deadLeases = held.map((id) => q.get(id).lease_until);
  const done = (some) => some.every((id) => q.get(id).state === 'done');
  for (const t0 = Date.now(); !done(ids.slice(0, blocked)) && Date.now() - t0 < 60000;) { // settled within 20 ms
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  worker.kill('SIGKILL');
  assert.equal((await worker.exited).signal, 'SIGKILL');
  const [output] = await worker.line(/[^]*/);
  assert.ok(ahead.length >= 1 && ahead.length <= 7, `claimed ahead: ${ahead}`);
  assert.ok(ahead.every((id) => !output.includes(`started ${id}`)), output);

  // The dead process's leases end at the next claim (DUR-02), long before their 30 s.
  const ran = [];
  const working = q.work(async (payload, run) => { ran.push(run.id); });
  for (const t0 = Date.now(); !done(ids) && Date.now() - t0 < 60000;) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await q.stop();
  await working;
  assert.deepEqual(ran.sort(), ids.slice(blocked)); // the killed job and those claimed ahead, once each
  assert.ok(done(ids));
  assert.ok(ahead.every((id) => q.get(id).attempt === 2)); // the dead worker's lease, then ours
  // each settled (the store's clock) before the dead worker's lease of it would have run out
  assert.deepEqual(held.filter((id, i) => !(q.get(id).settled_at < deadLeases[i])), []);
  q.close();
});

// Issue 46: eleven handleSignals workers printed MaxListenersExceededWarning (a SIGTERM and a
// SIGINT listener each); they share one listener per signal, and SIGTERM stops them all.
test('12 workers with handleSignals: no listener warning, and SIGTERM stops every one', async () => {
  const file = tempDb();
  const worker = child(`
    const warnings = [];
    // node:sqlite on Node 22 warns that it is experimental: the runtime's warning, not tinyq's
    process.on('warning', (w) => w.name === 'ExperimentalWarning' || warnings.push(w.name + ': ' + w.message));
    const queues = Array.from({ length: 11 }, (_, i) => new tinyq.Queue(process.env.TINYQ_TEST_DB, 'q' + i));
    const several = new tinyq.Worker(process.env.TINYQ_TEST_DB, { a: async () => 'ok', b: async () => 'ok' },
      { handleSignals: true, poll: 50 });
    const works = queues.map((q) => q.work(async () => 'ok', { handleSignals: true, poll: 50 })).concat(several.work());
    console.log('listeners ' + process.listenerCount('SIGTERM') + ' ' + process.listenerCount('SIGINT'));
    Promise.all(works).then(() => setImmediate(() => {
      console.log('stopped all, listeners ' + process.listenerCount('SIGTERM') + ', warnings ' + JSON.stringify(warnings));
      queues.forEach((q) => q.close());
      several.close();
    }));`, file);
  const [, term, int] = await worker.line(/listeners (\d+) (\d+)\n/);
  worker.kill('SIGTERM');
  assert.deepEqual([term, int], ['1', '1'], 'one listener per signal for all the workers');
  const { code, signal } = await worker.exited;
  assert.deepEqual({ code, signal }, { code: 0, signal: null });
  await worker.line(/stopped all, listeners 0, warnings \[\]\n$/);
});
