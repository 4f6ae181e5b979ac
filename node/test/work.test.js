'use strict';
// Queue.work(): outcomes, errors, lease renewals, stop(), cancellation and timeouts.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');

const { all, closeQueue, newQueue, tempDb, value } = require('../test-support');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The store's clock when job `id` last changed state (its last watch event). */
const changedAt = (q, id) => q.watch().filter((e) => e.id === id).pop().at;

/** Resolves once `check()` is truthy (polled), or fails after `ms`. */
async function until(check, ms = 60000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${check}`);
    await sleep(10);
  }
}

/** Work `q` with `handler` until every job in `ids` is no longer waiting/running. */
async function workUntilSettled(q, ids, handler, opts) {
  const working = q.work(handler, opts);
  await until(() => ids.every((id) => !['waiting', 'running'].includes(q.get(id).state)));
  await q.stop();
  return working;
}

test('work runs the handler and settles done with its result', async () => {
  const q = newQueue();
  q.add({ n: 20 }, { id: 'a' });
  q.add('text', { id: 'b' });
  const seen = [];
  const handled = await workUntilSettled(q, ['a', 'b'], async (payload, run) => {
    seen.push([run.id, run.attempt, payload]);
    return typeof payload === 'object' ? { double: payload.n * 2 } : undefined;
  }, { concurrency: 2 });
  assert.equal(handled, 2);
  assert.deepEqual(seen.sort(), [['a', 1, { n: 20 }], ['b', 1, 'text']]);
  assert.equal(q.get('a').state, 'done');
  assert.deepEqual(q.get('a').result, { double: 40 });
  assert.equal(q.get('b').result, null);
});

test('a handler that throws is recorded as an error "Name: message"', async () => {
  class QuotaError extends Error {}
  const q = newQueue();
  q.add({}, { id: 'custom', attempts: 1 });
  q.add({}, { id: 'type', attempts: 1 });
  q.add({}, { id: 'again', attempts: 2 });
  await workUntilSettled(q, ['custom', 'type'], async (payload, run) => {
    if (run.id === 'custom') throw new QuotaError('over quota');
    if (run.id === 'type') null.boom; // eslint-disable-line no-unused-expressions
    throw new RangeError('too far');
  });
  assert.equal(q.get('custom').state, 'failed');
  assert.equal(q.get('custom').error, 'QuotaError: over quota');
  assert.match(q.get('type').error, /^TypeError: .*null/); // V8 and JavaScriptCore word it differently
  // With attempts left, an error is retried after its backoff (1 s by default, +-10%),
  // counted from the settle (both times the store's own).
  const again = q.get('again');
  assert.equal(again.state, 'scheduled');
  assert.equal(again.error, 'RangeError: too far');
  const backoff = again.run_at - changedAt(q, 'again');
  assert.ok(backoff >= 900 && backoff <= 1100, `backoff ${backoff} ms`);
});

test('run.retry, run.snooze and run.fail', async () => {
  const q = newQueue();
  for (const id of ['retry', 'snooze', 'fail', 'retry-last', 'snooze-last']) {
    q.add({}, { id, attempts: id.endsWith('-last') ? 1 : 5 });
  }
  await workUntilSettled(q, ['retry', 'snooze', 'fail', 'retry-last', 'snooze-last'], async (payload, run) => {
    if (run.id.startsWith('retry')) run.retry('1h');
    if (run.id.startsWith('snooze')) return run.snooze(3600000);
    run.fail('not worth it');
  }, { concurrency: 5 });
  const retried = q.get('retry');
  assert.equal(retried.state, 'scheduled');
  assert.equal(retried.tries, 1); // counts
  assert.equal(retried.run_at - changedAt(q, 'retry'), 3600000); // an hour after the settle
  const snoozed = q.get('snooze');
  assert.equal(snoozed.state, 'scheduled');
  assert.equal(snoozed.tries, 0); // does not count
  assert.equal(snoozed.run_at - changedAt(q, 'snooze'), 3600000);
  assert.equal(q.get('snooze-last').state, 'scheduled'); // budget of 1 not used up
  assert.equal(q.get('retry-last').state, 'failed'); // budget of 1 used up
  assert.equal(q.get('fail').state, 'failed');
  assert.equal(q.get('fail').error, 'not worth it');
});

test('a control outcome the extension refuses is recorded as an error', async () => {
  const q = newQueue();
  q.add({}, { id: 'a', attempts: 1 });
  await workUntilSettled(q, ['a'], async (payload, run) => run.snooze('soon'));
  assert.equal(q.get('a').state, 'failed');
  assert.match(q.get('a').error, /^\w*Error: tq_settle: .*soon/); // the driver's error class
});

test('steps and progress inside one attempt', async () => {
  const q = newQueue();
  q.add({}, { id: 'a' });
  let calls = 0;
  await workUntilSettled(q, ['a'], async (payload, run) => {
    const first = await run.step('answer', async () => { calls += 1; return { text: 'Hello!' }; });
    const again = await run.step('answer', () => { calls += 1; return 'other'; });
    assert.equal(run.progress({ pct: 50 }), true);
    return { first, again };
  });
  assert.equal(calls, 1);
  assert.deepEqual(q.get('a').result, { first: { text: 'Hello!' }, again: { text: 'Hello!' } });
  assert.deepEqual(q.get('a').progress, { pct: 50 });
  assert.deepEqual(q.watch().filter((e) => e.state === 'progress').map((e) => e.detail), ['{"pct":50}']);
});

test('a first attempt keeps its steps without reading them first; the next attempt reads them', async () => {
  const q = newQueue();
  q.add({}, { id: 'a' });
  const asked = []; // [attempt, statement] of each statement the worker's connection prepares
  const answers = {};
  let attempt = 0;
  await workUntilSettled(q, ['a'], async (payload, run) => {
    attempt = run.attempt;
    const db = run._db; // the worker's connection (run.db is the handler's own): tinyq reads steps there
    if (!db.traced) { // statements are prepared once per connection, on their first use
      for (const method of ['prepare', 'query']) { // bun:sqlite's adapter prepares with query()
        if (typeof db[method] !== 'function') continue;
        const prepare = db[method].bind(db);
        db[method] = (sql) => { asked.push([attempt, sql]); return prepare(sql); };
      }
      db.traced = true;
    }
    const first = await run.step('answer', async () => `from attempt ${run.attempt}`);
    answers[run.attempt] = [first, await run.step('answer', () => 'called again')];
    if (run.attempt === 1) run.snooze(0);
    return first;
  });
  assert.deepEqual(answers, { 1: ['from attempt 1', 'from attempt 1'], 2: ['from attempt 1', 'from attempt 1'] });
  assert.equal(q.get('a').result, 'from attempt 1');
  assert.deepEqual(asked.filter(([, sql]) => sql.includes('tq_step_get')).map(([at]) => at), [2]);
});

test('a delayed job runs when due, also in a queue with a concurrency limit', async () => {
  const q = newQueue();
  q.settings({ concurrency: 2 });
  q.add({}, { id: 'later', delay: '300ms' });
  const job = q.get('later');
  assert.equal(job.run_at - job.created_at, 300);
  const working = q.work(async () => {});
  await until(() => q.get('later').state === 'done');
  await q.stop();
  await working;
  // not before its time: claimed (the store's clock) at or after its run_at
  const claimed = q.watch().find((e) => e.id === 'later' && e.state === 'running');
  assert.ok(claimed.at >= job.run_at, `claimed at ${claimed.at}, due at ${job.run_at}`);
});

test('renewals keep a long handler\'s lease (lease 1s, handler until 4 renewals)', async () => {
  const q = newQueue();
  q.settings({ lease: '1s' });
  q.add({}, { id: 'long' });
  const leases = [];
  await workUntilSettled(q, ['long'], async (payload, run) => {
    // runs until its lease has been renewed three times (a count, not a time)
    while (new Set(leases).size < 4) {
      await sleep(100);
      leases.push(run.leaseUntil);
      // Another worker finds nothing to claim: the lease is held the whole time.
      assert.equal(value(q.db, "SELECT count(*) FROM tq_claim('q', 'thief', 1)"), 0);
    }
    return 'finished';
  });
  const job = q.get('long');
  assert.equal(job.state, 'done');
  assert.equal(job.attempt, 1);
  assert.equal(job.result, 'finished');
  // it outlived its first lease (the store's clock), yet no other worker could claim it
  assert.ok(job.settled_at > leases[0], `settled ${job.settled_at}, first lease until ${leases[0]}`);
  assert.equal(q.watch().filter((e) => e.state === 'running').length, 1);
});

test('stop() claims nothing more and waits for the work in flight', async () => {
  const q = newQueue();
  q.add({}, { id: 'first' });
  q.add({}, { id: 'second' });
  let started = 0;
  let finished = 0;
  const working = q.work(async () => {
    started += 1;
    await sleep(400);
    finished += 1;
    return 'ok';
  });
  await until(() => started === 1);
  const stopped = q.stop();
  assert.equal(stopped, working);
  assert.equal(finished, 0);
  assert.equal(await working, 1);
  assert.equal(finished, 1);
  assert.equal(q.get('first').state, 'done'); // settled before work() resolved
  assert.equal(q.get('second').state, 'waiting'); // never claimed
  assert.equal(started, 1);
});

test('a cancelled job sets run.cancelled and is not settled', async () => {
  const q = newQueue();
  q.settings({ lease: '400ms' });
  q.add({}, { id: 'a' });
  let run;
  const working = q.work(async (payload, r) => {
    run = r;
    const t0 = Date.now();
    while (!r.cancelled && Date.now() - t0 < 60000) await sleep(20); // learns it from the next renewal (every 200 ms)
    return 'finished anyway';
  });
  await until(() => run);
  assert.equal(q.cancel('a'), true);
  await until(() => run.cancelled);
  assert.equal(run.signal.aborted, true);
  await sleep(50);
  await q.stop();
  await working;
  assert.equal(q.get('a'), null);
  assert.deepEqual(q.watch().map((e) => e.state), ['waiting', 'running', 'cancelled']);
});

test('a timed-out attempt sets run.cancelled and is not settled', async () => {
  const q = newQueue();
  q.settings({ lease: '1s', timeout: '1s', attempts: 1 });
  q.add({}, { id: 'slow' });
  let run;
  const working = q.work(async (payload, r) => {
    run = r;
    const t0 = Date.now();
    while (!r.cancelled && Date.now() - t0 < 60000) await sleep(20); // tq_renew returns NULL past the deadline
    return 'too late';
  });
  await until(() => run && run.cancelled);
  await sleep(50);
  await q.stop();
  await working;
  assert.notEqual(q.get('slow').state, 'done'); // the helper did not settle it
  // The next claim ends the attempt as an error "timeout".
  all(q.db, "SELECT * FROM tq_claim('q', 'w2', 1)");
  assert.equal(q.get('slow').state, 'failed');
  assert.equal(q.get('slow').error, 'timeout');
});

test('run.meta is the job\'s meta; errors: "class" records only the error\'s class', async () => {
  const q = newQueue();
  q.add({}, { id: 'm', meta: { correlation_id: 'req-7' } });
  q.add({}, { id: 'plain' });
  q.add({}, { id: 'secret', attempts: 1 });
  const metas = {};
  await workUntilSettled(q, ['m', 'plain', 'secret'], async (payload, run) => {
    metas[run.id] = run.meta;
    if (run.id === 'secret') throw new TypeError('key sk-123 over quota');
  }, { errors: 'class' });
  assert.deepEqual(metas, { m: { correlation_id: 'req-7' }, plain: {}, secret: {} });
  assert.equal(q.get('secret').error, 'TypeError');
  await assert.rejects(q.work(async () => {}, { errors: 'stack' }), /errors must be/);
});

test('a thrown value that is not an Error is kept as JSON, not as "[object Object]"', async () => {
  const q = newQueue();
  const thrown = { obj: { code: 42, retry: false }, text: 'quota', num: 7, list: [1, 'a'] };
  for (const id of Object.keys(thrown)) q.add({}, { id, attempts: 1 });
  await workUntilSettled(q, Object.keys(thrown), async (payload, run) => { throw thrown[run.id]; });
  assert.deepEqual(Object.keys(thrown).map((id) => q.get(id).error),
    ['{"code":42,"retry":false}', 'quota', '7', '[1,"a"]']);
});

test('an idle worker wakes for a job added by another process, long before its poll, and the event loop runs on', async () => {
  const { execFile } = require('child_process');
  const q = newQueue();
  let ran = false;
  // A poll of an hour: only the wake-up thread can start the job within the test's time,
  // and a worker blocking the event loop in tq_wait would stop the beats for that hour.
  const working = q.work(async () => { ran = true; }, { poll: 3600000 });
  let beats = 0;
  const beat = setInterval(() => { beats += 1; }, 10);
  try {
    await until(() => beats >= 100); // the loop beats on while the worker is idle
    const pkg = JSON.stringify(require('path').join(__dirname, '..'));
    // not spawnSync: that would stall this event loop for as long as the child runs
    await new Promise((resolve, reject) => execFile(process.execPath,
      ['-e', `const t = require(${pkg}); new t.Queue(${JSON.stringify(q.path)}, 'q').add({}, { id: 'from-outside' });`],
      (err) => (err ? reject(err) : resolve())));
    const before = beats;
    await until(() => ran);
    await until(() => beats > before); // and after the job
  } finally {
    clearInterval(beat);
  }
  await q.stop();
  await working;
  assert.equal(q.get('from-outside').state, 'done');
});

test('the heartbeat renews every running job in one pass', async () => {
  const q = newQueue();
  q.settings({ lease: '1s' });
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  const working = q.work(async () => { await gate; }, { concurrency: 3 });
  for (let i = 0; i < 3; i++) { // claimed 150 ms apart
    q.add({}, { id: `j${i}` });
    await until(() => q.get(`j${i}`).state === 'running');
    await sleep(150);
  }
  const first = [0, 1, 2].map((i) => q.get(`j${i}`).lease_until);
  await until(() => [0, 1, 2].every((i) => q.get(`j${i}`).lease_until > first[i])); // renewed
  const leases = [0, 1, 2].map((i) => q.get(`j${i}`).lease_until);
  release();
  await until(() => [0, 1, 2].every((i) => q.get(`j${i}`).state === 'done'));
  await q.stop();
  await working;
  assert.ok(Math.max(...leases) - Math.min(...leases) <= 5, `leases ${leases}`);
  assert.deepEqual([0, 1, 2].map((i) => q.get(`j${i}`).attempt), [1, 1, 1]);
});

// -- prefetch: jobs claimed ahead of the running handlers ---------------------------------

/** `n` jobs j00, j01, ... in that claim order (by priority); their ids. */
function addJobs(q, n) {
  return Array.from({ length: n }, (_, i) => q.add({ i }, { id: `j${String(i).padStart(2, '0')}`, priority: 1000 - i }));
}

/** Work `q` until the jobs are settled, the handler (after `await handler(payload)`) noting
 * the ids in the order they started and the most jobs of the queue leased at once. */
async function startsAndLeases(q, ids, opts, handler = async () => {}) {
  const started = [];
  let most = 0;
  await workUntilSettled(q, ids, async (payload, run) => {
    started.push(run.id);
    most = Math.max(most, value(q.db, "SELECT leases FROM tq_stats('q')"));
    await handler(payload);
  }, opts);
  return { started, most };
}

test('prefetch (auto): every job runs once, in claim order, with jobs claimed ahead', async () => {
  // 'auto' claims ahead while the handlers average under 1 ms: a busy machine can make a
  // whole round slow, so rounds are worked until one has claimed ahead (20 at most).
  for (const concurrency of [1, 4]) {
    let mostOfAll = 0;
    for (let round = 0; round < 20 && mostOfAll <= concurrency; round++) {
      const q = newQueue();
      const ids = addJobs(q, 60);
      const { started, most } = await startsAndLeases(q, ids, { concurrency });
      assert.deepEqual(started, ids);
      assert.ok(ids.every((id) => q.get(id).state === 'done' && q.get(id).attempt === 1));
      assert.ok(most <= concurrency + 7, `${most} leased at once with concurrency ${concurrency}`);
      mostOfAll = Math.max(mostOfAll, most);
      await closeQueue(q);
    }
    assert.ok(mostOfAll > concurrency, `at most ${mostOfAll} leased at once with concurrency ${concurrency}`);
  }
});

test('prefetch: 0 claims only the free places; auto, past fast handlers, as many ahead at most', async () => {
  // slow (5 ms) handlers: 'auto' claims ahead those expected to end while one claim commits
  for (const [opts, handler, most] of [[{ prefetch: 0 }, async () => {}, 2], [{ prefetch: 0 }, () => sleep(5), 2],
    [{}, () => sleep(5), 4]]) {
    const q = newQueue();
    const ids = addJobs(q, 30);
    const run = await startsAndLeases(q, ids, { concurrency: 2, ...opts }, handler);
    assert.deepEqual(run.started, ids);
    assert.ok(ids.every((id) => q.get(id).state === 'done' && q.get(id).attempt === 1));
    assert.ok(run.most <= most, `${run.most} leased at once with ${JSON.stringify(opts)}`);
  }
});

test('jobs claimed ahead are renewed while they wait and go back on stop, no try used up', async () => {
  const q = newQueue();
  q.settings({ lease: '1s' });
  const ids = addJobs(q, 5);
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  const started = [];
  const working = q.work(async (payload, run) => {
    started.push(run.id);
    await gate;
  }, { prefetch: 2 });
  await until(() => started.length === 1);
  const leased = ids.map((id) => q.get(id).lease_until);
  // the two claimed ahead are renewed while they wait (a wait for it, not for a time)
  await until(() => ids.slice(1, 3).every((id, i) => q.get(id).lease_until > leased[i + 1]));
  const states = ids.map((id) => q.get(id).state);
  const renewed = ids.slice(1, 3).map((id, i) => q.get(id).lease_until > leased[i + 1]);
  const stopped = q.stop();
  release();
  assert.equal(await stopped, 1); // one handler ran
  assert.deepEqual(states, ['running', 'running', 'running', 'waiting', 'waiting']);
  assert.deepEqual(renewed, [true, true]);
  assert.deepEqual(started, ['j00']);
  assert.deepEqual(ids.map((id) => q.get(id).state), ['done', 'waiting', 'waiting', 'waiting', 'waiting']);
  assert.deepEqual(ids.map((id) => [q.get(id).attempt, q.get(id).tries]), [[1, 1], [1, 0], [1, 0], [0, 0], [0, 0]]);
});

test('prefetch auto: jobs done before a slow one are settled meanwhile, those behind it go back on stop', async () => {
  const q = newQueue();
  const ids = addJobs(q, 30);
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  let blocked = null;
  const working = q.work(async ({ i }) => {
    // tiny jobs first, then one that blocks: the first after ten with a job claimed behind it
    if (blocked === null && i >= 10 && q.get(ids[i + 1]).state === 'running') {
      blocked = i;
      await gate;
    }
  });
  await until(() => blocked !== null);
  const ahead = ids.slice(blocked + 1).filter((id) => q.get(id).state === 'running');
  await until(() => ids.slice(0, blocked).every((id) => q.get(id).state === 'done'));
  const stopped = q.stop();
  release();
  await stopped;
  await working;
  assert.ok(ahead.length >= 1 && ahead.length <= 7, `claimed ahead: ${ahead}`);
  assert.ok(ids.slice(0, blocked + 1).every((id) => q.get(id).state === 'done'));
  assert.ok(ids.slice(blocked + 1).every((id) => q.get(id).state === 'waiting' && q.get(id).tries === 0));
});

test('a bad prefetch or concurrency is an error naming it and its value', async () => {
  const q = newQueue();
  q.add({}, { id: 'a' });
  for (const [value, shown] of [[-1, '-1'], [1.5, '1.5'], ['7', "'7'"], ['AUTO', "'AUTO'"], [NaN, 'NaN'],
    [Infinity, 'Infinity'], [true, 'true'], [{}, '{}']]) {
    await assert.rejects(q.work(async () => {}, { prefetch: value }),
      { message: `prefetch must be 'auto' or a whole number >= 0, not ${shown}` });
  }
  for (const [value, shown] of [[0, '0'], [2.5, '2.5'], ['4', "'4'"], [Infinity, 'Infinity']]) {
    await assert.rejects(q.work(async () => {}, { concurrency: value }),
      { message: `concurrency must be a whole number >= 1, not ${shown}` });
  }
  assert.equal(q.get('a').state, 'waiting'); // nothing claimed
  await workUntilSettled(q, ['a'], async () => {}, { prefetch: 5 }); // work() is usable again
  assert.equal(q.get('a').state, 'done');
});

/** The open file descriptors of this process that point at `file` (or its -wal / -shm). */
function openHandles(file) {
  const fs = require('fs');
  return fs.readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(file);
    } catch {
      return false; // closed meanwhile
    }
  });
}

test('once work() has returned, nothing of the worker holds the database open', async () => {
  for (const stopAt of [0, 50]) { // at once (the wake-up thread may not have started) and later
    const q = newQueue();
    q.add({ n: 1 });
    const working = q.work(() => {}, { poll: 300000 }); // idle in a 5 min tq_wait
    await sleep(stopAt);
    // stop() does not wait out the idle poll: it and work() end well within it (a 60 s
    // safety limit, so that a failure is seen before the poll would end the wait anyway)
    let timer;
    const outwaited = new Promise((resolve) => { timer = setTimeout(() => resolve('poll'), 60000); });
    const stopped = Promise.all([q.stop(), working]).then(() => 'stopped');
    assert.equal(await Promise.race([stopped, outwaited]), 'stopped');
    clearTimeout(timer);
    await closeQueue(q);
    assert.deepEqual(openHandles(q.path), [], `stopped after ${stopAt} ms`);
  }
});

test('a Worker over 20 idle queues has one waiter thread for them all (issue 29)', async () => {
  const fs = require('fs');
  const wakeups = require('../wakeups.js');
  const file = tempDb();
  const tasks = () => fs.readdirSync('/proc/self/task').length;
  const asleep = (n) => () => wakeups.threads().some((t) => t.file === file && t.sleeping === n);
  const names = Array.from({ length: 20 }, (_, i) => `q${i}`);
  const counted = {};
  for (const n of [1, 20]) {
    const worker = new tinyq.Worker(file, Object.fromEntries(names.slice(0, n).map((name) => [name, () => {}])));
    const working = worker.work();
    await until(asleep(n)); // every queue's loop found it empty and sleeps in the waiter
    counted[n] = { tasks: tasks(), waiters: wakeups.threads().filter((t) => t.file === file).length };
    await worker.stop();
    await working;
    worker.close();
  }
  assert.equal(counted[20].waiters, 1);
  // A waiter thread per queue made 19 threads more (and more: each worker_thread has its own).
  assert.ok(counted[20].tasks - counted[1].tasks < 5, JSON.stringify(counted));
  assert.deepEqual(wakeups.threads().filter((t) => t.file === file), []); // ended with the last work()
});

test('a Worker refuses bad queues by name, and one stop() ends every queue (issue 29)', async () => {
  const file = tempDb();
  assert.throws(() => new tinyq.Worker(file, {}), /queues must be a non-empty object/);
  assert.throws(() => new tinyq.Worker(file, { emails: [() => {}, { concurency: 2 }] }), /queue 'emails': unknown option 'concurency'/);
  assert.throws(() => new tinyq.Worker(file, { emails: 'send' }), /queue 'emails': expected a handler/);
  const ran = [];
  const worker = new tinyq.Worker(file, { a: (p) => { ran.push(['a', p.n]); }, b: [(p) => { ran.push(['b', p.n]); }, { concurrency: 2 }] });
  const adder = new tinyq.Queue(file, 'a');
  const working = worker.work();
  assert.throws(() => worker.work(), /already working/);
  adder.add({ n: 1 });
  new tinyq.Queue(adder.db, 'b').add({ n: 2 });
  await until(() => ran.length === 2);
  assert.deepEqual(await worker.stop(), { a: 1, b: 1 });
  assert.deepEqual(await working, { a: 1, b: 1 });
  worker.close();
  adder.close();
});

test('prefetch (auto): handlers that started together get their next jobs claimed while they run', async () => {
  // 'auto' predicts the ends of handlers that average under a second: a second wave that
  // started together, held open here, gets the third claimed ahead while it still runs
  // (with prefetch: 0 none would be, and the wait below would time out).
  const concurrency = 4;
  const q = newQueue();
  const ids = addJobs(q, 3 * concurrency);
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  const started = [];
  const working = q.work(async (payload, run) => {
    started.push(run.id);
    const i = ids.indexOf(run.id);
    if (i < concurrency) await sleep(200); // the first wave: the average handler's time
    else if (i < 2 * concurrency) await gate; // the second: held until the third is claimed
  }, { concurrency });
  const second = ids.slice(concurrency, 2 * concurrency);
  const third = ids.slice(2 * concurrency);
  let early;
  try {
    await until(() => second.every((id) => started.includes(id)));
    await until(() => third.every((id) => q.get(id).state === 'running')); // claimed, however long it takes
    early = third.filter((id) => started.includes(id));
  } finally {
    release(); // a failure above must not leave handlers that stop() would wait for forever
  }
  await until(() => ids.every((id) => q.get(id).state === 'done'));
  await q.stop();
  await working;
  assert.deepEqual(early, []);
  assert.deepEqual(started, ids);
});

test('a handler that ends while the claim commits is settled without waiting for a wake-up', async () => {
  // Fast handlers end while the worker's claim commits; the claim that drains the queue then
  // put the worker to sleep in tq_wait_any with their settles still pending (until the lease
  // ran out). With an hour's lease, every round must settle all its jobs.
  for (let round = 0; round < 10; round++) {
    const q = newQueue();
    q.settings({ lease: '1h' });
    const ids = addJobs(q, 60);
    const working = q.work(async () => {}, { concurrency: 4 });
    await until(() => ids.every((id) => q.get(id).state === 'done'));
    await q.stop();
    await working;
  }
});

test('a step whose answer cannot be stored fails the job for good: its function runs once', async () => {
  const q = newQueue();
  q.settings({ backoff: 0 }); // a retry would be due at once
  q.add('bigint', { id: 'bigint', attempts: 3 });
  q.add('cycle', { id: 'cycle', attempts: 3 });
  const calls = { bigint: 0, cycle: 0 };
  const summary = await q.drain(async (payload, run) => {
    await run.step('charge', () => {
      calls[payload] += 1; // the side effect
      if (payload === 'bigint') return 10n;
      const receipt = { id: 7 };
      receipt.self = receipt;
      return receipt;
    });
    return 'charged';
  });
  assert.deepEqual(calls, { bigint: 1, cycle: 1 });
  assert.deepEqual(summary, { done: 0, failed: 2, retried: 0 });
  assert.match(q.get('bigint').error, /^run\.step 'charge': its answer cannot be stored as JSON \(TypeError: .*BigInt.*\): /);
  assert.match(q.get('cycle').error, /^run\.step 'charge': its answer cannot be stored as JSON \(TypeError: .*(circular|cyclic)/);
  assert.deepEqual(all(q.db, 'SELECT name FROM tq_steps(?)', 'bigint'), []);
});

// Issue 46: a synchronous handler that starved the renewals got no warning (Python's asyncio
// worker warns). Lease 2 s: the renewal due after 1 s runs once the 1.8 s loop ends.
test('a handler that blocks the event loop past its renewal gets a warning, once, and its job settles', async () => {
  const q = new tinyq.Queue(tempDb(), 'q');
  const id = q.add({}, { id: 'busy' });
  const warned = [];
  const warn = console.warn;
  console.warn = (message) => warned.push(String(message));
  try {
    const block = () => { for (const end = Date.now() + 1800; Date.now() < end;); };
    await q.drain(async (payload, run) => {
      if (run.attempt > 1) return 'again'; // lease lost on a very loaded machine: still settles
      block();
      const renewed = run.leaseUntil;
      for (const t0 = Date.now(); run.leaseUntil === renewed && !run.cancelled && Date.now() - t0 < 30000;) {
        await new Promise((resolve) => setTimeout(resolve, 10)); // the late renewal has committed
      }
      block(); // late again: no second warning
      return 'ok';
    }, { lease: '2s', poll: 50 });
  } finally {
    console.warn = warn;
  }
  assert.equal(q.get(id).state, 'done');
  const late = warned.filter((m) => m.includes('lease renewal of job busy'));
  assert.equal(late.length, 1, warned.join('\n'));
  assert.match(late[0], /^tinyq: the lease renewal of job busy \(attempt 1\) came \d+\.\d\d s late: a handler is blocking the event loop/);
  q.close();
});
