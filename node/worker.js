'use strict';
// The loop behind Queue.work: claims and settles in one transaction, runs up to
// `concurrency` handlers at once, renews their leases in one statement (the heartbeat), and
// sleeps in tq_wait_any on the process's waiter thread for its file (wakeups.js) when idle.
const os = require('os');
const util = require('util');
const { AsyncLocalStorage } = require('async_hooks');
const { close, decode, encode, errorText, exec, fileOf, isBusy, one, open, options, rows } = require('./sql.js');
const { adapterOf } = require('./drivers.js');
const { Connections } = require('./connections.js');
const { GroupCommit } = require('./group.js');
const { Outcome, Run } = require('./run.js');
const wakeups = require('./wakeups.js');
const otel = require('./otel.js');

// -- the worker loop -------------------------------------------------------------------

// An idle worker sleeps in tq_wait_any on a worker_thread (waiter.js, one per file of the
// process, shared by every work(): wakeups.js), which posts a message when a job of its queue
// may be claimable: better-sqlite3 is synchronous, so tq_wait on the main thread would freeze
// the event loop. No claim meanwhile: tq_wait_any wakes for the due times too.

/** The claim statement: with the job's meta when this build's tq_claim has its hidden
 * `meta` column (store schema 3 and later), NULL in its place before. */
function claimStatement(db, claimOpts) {
  const hasMeta = one(db, "SELECT 1 FROM pragma_table_xinfo('tq_claim') WHERE name = 'meta'");
  return `SELECT id, attempt, payload, group_key, lease_until, deadline, ${hasMeta ? 'meta' : 'NULL AS meta'}`
    + ` FROM tq_claim(?, ?, ?${claimOpts === null ? ')' : ', ?)'}`;
}

const AUTO_AHEAD = 7; // what prefetch 'auto' claims ahead, while handlers are fast
const FAST_MS = 1; // ... that is, while they took under 1 ms (a moving average)
const FLUSH_MS = 20; // a settle waits at most this long for the next claim
// A claim takes CLAIM_PART jobs at most, and the worker lets the event loop turn before it
// claims the rest: the commit runs on the main thread, so the first jobs of a thousand
// start after a short commit, and handlers go on between the parts.
const CLAIM_PART = 250;
// The worker's connection waits this long at most for a lock held elsewhere, synchronously;
// then its group commit lets the event loop turn and tries again (group.js). The lock may be
// held by this very thread (the app's transaction, a handler's on its run.db): waiting for it
// in SQLite's busy handler would wait for nothing but the timeout, the event loop frozen.
const BUSY_MS = 5;

const PREDICT_MS = 1000; // 'auto' predicts handlers' ends while they average under 1 s
const LEAD_MIN_MS = 80; // ... and claims their next jobs this long before at least: before the
// ends of a wave and their step puts, not among them (a claim commits on the main thread)

/** How many jobs the worker claims ahead of its running handlers (the `prefetch` option),
 * as Python's asyncio work() does. A whole number is fixed. 'auto' claims ahead the jobs that
 * the handlers are expected to end while one settle-and-claim commits: concurrency x that
 * commit's time / a handler's time (moving averages), rounded down, at most `concurrency`, and AUTO_AHEAD
 * at least while the handlers took under FAST_MS. A place that frees then starts a job at
 * once, instead of after the commit that settles its last job and claims the next; a job
 * claimed ahead waits about one such commit for its place, and a backlog of tiny jobs costs
 * one commit per AUTO_AHEAD + 1 jobs instead of one per job. While the handlers average under
 * PREDICT_MS, 'auto' also claims ahead for the running handlers expected (from their start and
 * that average) to end within lead(), two commits' time and LEAD_MIN_MS at least, the worker
 * waking on a timer for it:
 * handlers that started together end together (a thousand model calls of 0.2 s), and the jobs
 * they make way for are claimed while they still run. The first claim takes only the free
 * places. */
class Pace {
  constructor(prefetch, concurrency) {
    this.fixed = wholeNumber('prefetch', prefetch, 0, 'auto') === 'auto' ? null : prefetch;
    this.concurrency = concurrency;
    this.average = null; // a handler's ms
    this.commit = null; // a settle-and-claim's ms
  }

  took(ms) {
    this.average = moving(this.average, ms);
  }

  committed(ms) {
    this.commit = moving(this.commit, ms);
  }

  /** Whether handlers' ends are predicted: 'auto', handlers that average under PREDICT_MS
   * and over the lead (shorter ones are all as good as ended: the commit-time rule serves). */
  predicts() {
    return this.fixed === null && this.average !== null && this.average < PREDICT_MS && this.average > this.lead();
  }

  /** How long before a handler's predicted end its next job is claimed: two commits, and
   * LEAD_MIN_MS at least. */
  lead() {
    return Math.max(LEAD_MIN_MS, 2 * (this.commit ?? 0));
  }

  ahead() {
    if (this.fixed !== null) return this.fixed;
    if (this.average === null || this.commit === null) return 0;
    // rounded down: long handlers claim none ahead (one would wait a whole handler's time)
    const ending = Math.floor((this.concurrency * this.commit) / Math.max(this.average, 0.001));
    return Math.max(this.average < FAST_MS ? AUTO_AHEAD : 0, Math.min(this.concurrency, ending));
  }
}

// The queue's concurrency limit (NULL: none), and the leases it counts (Share).
const LIMIT_OF = "SELECT json_extract(tq_queue(?), '$.concurrency')";
const LEASES_OF = 'SELECT leases FROM tq_stats(?)';
const YIELD_MS = 20; // a full limit's claims wait this long for other processes
const MAX_EVERY = 32; // ... once per 32 settles at the rarest (a worker alone)
const CHECK_EVERY_MS = 1000; // the queue's limit is read at most this often

/** Other processes' chance at a place of a queue whose concurrency limit is full (issue 46;
 * Python's _protocol.Share). A settle and the next claim in one commit take back the place
 * the settle frees, and another process, woken by that commit, finds the limit full again:
 * one process ran every job of a backlog. So when the limit was full at this worker's last
 * claim, its settles commit alone (yields()) and its claims wait YIELD_MS: another process
 * waiting for the queue, woken by the settle's commit, claims the place first. Alone under
 * a full limit the worker would leave the place idle that long at every job: when its claim
 * after a yield got all it asked (nobody took the place), it yields at every 2nd settle,
 * then 4th... up to every MAX_EVERY-th, and at every settle again once its claim comes back
 * short. Queues without a limit (read at most every CHECK_EVERY_MS) cost no statement. */
class Share {
  constructor(queue) {
    this.queue = queue;
    this.limit = null;
    this.checked = -Infinity; // when the limit was read (performance.now())
    this.full = false; // the limit was full after the last claim
    this.every = 1; // yield at every `every`-th settle while full
    this.settles = 0; // settles while full since the last yield
    this.yielded = false; // the next claim is the first after a yield
    this.until = 0; // no claim before then (performance.now()): a yield
  }

  /** After a claim of `want` jobs that got `got`, in its transaction; `held`: the leases
   * this worker held before it (running handlers, jobs claimed ahead). */
  claimedIn(db, want, got, held) {
    const now = performance.now();
    if (now - this.checked >= CHECK_EVERY_MS) {
      const limit = one(db, LIMIT_OF, this.queue);
      this.limit = limit === null || limit === undefined ? null : Number(limit); // BigInt with some drivers
      this.checked = now;
    }
    const leases = this.limit === null ? 0 : Number(one(db, LEASES_OF, this.queue) ?? 0);
    if (this.yielded) {
      // nobody took the place meanwhile: got all, or every lease is this worker's (a claim
      // ahead, prefetch, asks more than the limit leaves even a worker alone)
      this.yielded = false;
      this.every = got >= want || leases <= held + got ? Math.min(this.every * 2, MAX_EVERY) : 1;
    }
    this.full = this.limit !== null && leases >= this.limit;
  }

  /** Before a commit of settles (`settling`), a claim or both: whether claims wait (for
   * waitLeft(); the settles commit alone). A commit of settles alone, a claim waiting, starts
   * the wait too. */
  yields(settling) {
    if (this.waitLeft() > 0) return true;
    if (!(settling && this.full)) return false;
    this.settles += 1;
    if (this.settles < this.every) return false;
    this.settles = 0;
    this.yielded = true;
    this.until = performance.now() + YIELD_MS;
    return true;
  }

  /** How long claims still wait for others to take a place (ms, 0: none). */
  waitLeft() {
    return Math.max(this.until - performance.now(), 0);
  }
}

function moving(average, value) {
  return average === null ? value : 0.7 * average + 0.3 * value;
}

/** The option `value` when it is a whole number >= `least` (or `other`), else an error
 * naming the option and the value. */
function wholeNumber(option, value, least, other) {
  if ((other !== undefined && value === other) || (Number.isSafeInteger(value) && value >= least)) return value;
  const also = other === undefined ? '' : `${util.inspect(other)} or `;
  throw new Error(`${option} must be ${also}a whole number >= ${least}, not ${util.inspect(value)}`);
}

const WORK_OPTIONS = ['concurrency', 'worker', 'lease', 'poll', 'handleSignals', 'errors', 'prefetch'];

async function workLoop(queue, handler, opts) {
  if (typeof handler !== 'function') throw new TypeError(`work: the handler must be a function, not ${util.inspect(handler)}`);
  if (opts === null || typeof opts !== 'object') throw new TypeError(`work: options must be an object, not ${util.inspect(opts)}`);
  const unknown = Object.keys(opts).find((key) => !WORK_OPTIONS.includes(key));
  if (unknown !== undefined) throw new Error(`work: unknown option '${unknown}' (one of ${WORK_OPTIONS.join(', ')})`);
  const concurrency = wholeNumber('concurrency', opts.concurrency ?? 1, 1);
  const errors = opts.errors ?? 'message';
  if (errors !== 'message' && errors !== 'class') throw new Error(`errors must be 'message' or 'class', not ${errors}`);
  const pace = new Pace(opts.prefetch ?? 'auto', concurrency);
  if (opts.worker !== undefined && (typeof opts.worker !== 'string' || opts.worker === '')) {
    throw new TypeError(`worker must be a non-empty string, not ${util.inspect(opts.worker)}`);
  }
  const worker = opts.worker || `${os.hostname()}:${process.pid}`;
  const poll = wholeNumber('poll', opts.poll ?? 1000, 1); // ms; 0 would spin
  const claimOpts = options({ lease: opts.lease }, 'work');

  const file = queue.path || fileOf(queue.db);
  if (!file) {
    throw new Error('Queue.work needs a database file (not :memory:)');
  }
  const driver = adapterOf(queue.db).name; // the worker's connections use the Queue's driver
  // The worker's own connection: never inside the caller's transaction nor a handler's (they
  // get their own: run.db, connections.js), so every transaction on it is the worker's.
  const db = open(file, { driver });
  exec(db, `PRAGMA busy_timeout = ${BUSY_MS}`);
  const connections = new Connections(file, driver);
  const claimSql = claimStatement(db, claimOpts);
  const writes = new GroupCommit(db); // the step puts, settles, claims and renewals of one turn: one commit
  const share = new Share(queue.name); // a full concurrency limit: settles go alone
  const waiter = wakeups.acquire(file, driver, poll);
  const inflight = new Set();
  const running = new Set(); // the runs whose handler is running (for stop()'s grace)
  const heartbeat = startHeartbeat(writes, opts.lease ?? null);
  let handled = 0;
  let wake = null; // ends the current nap: a handler finished, stop(), or the waiter
  queue._wake = () => wake && wake();
  // A nap ends after `ms` (null: only when woken), or when a handler finishes, stop(), an
  // add on this Queue, or (idle) the waiter's tq_wait_any names this queue.
  const nap = (ms, idle) => new Promise((resolve) => {
    const timer = ms === null ? null : setTimeout(() => { wake = null; resolve(); }, ms);
    wake = () => { clearTimeout(timer); wake = null; resolve(); };
    if (idle) waiter.sleep(queue.name).then(() => wake && wake());
  });

  // work() keeps its process alive until it returns: an idle nap has no timer, and the
  // waiter thread is unref'd (Bun, unlike Node, then ended an idle worker process at once).
  const keepAlive = setInterval(() => {}, 2 ** 31 - 1);
  const forget = opts.handleSignals ? stopOnSignal(() => queue.stop()) : () => {};
  // [run, outcome, value, when] of handlers that ended, to settle with the next claim
  const finished = [];
  // Runs claimed ahead (prefetch), not started: leased, and renewed by the heartbeat
  const ahead = [];
  const claimArgs = (n) => (claimOpts === null ? [queue.name, worker, n] : [queue.name, worker, n, claimOpts]);
  const start = (run) => {
    if (run.cancelled) return heartbeat.remove(run); // cancelled while it waited, claimed ahead
    run._startedAt = performance.now();
    running.add(run); // in the order they started (a Set keeps it): predicted() reads it
    const p = runOne(queue, run, handler, errors, finished, heartbeat, pace).finally(() => {
      running.delete(run);
      inflight.delete(p);
      // a freed place starts the next job claimed ahead at once
      while (!queue._stopping && inflight.size < concurrency && ahead.length > 0) start(ahead.shift());
      queue._wake();
    });
    inflight.add(p);
    handled += 1;
  };
  let drained = false; // the last claim came back short: no claim ahead by prediction until one is full
  try {
    while (!queue._stopping) {
      const free = concurrency - inflight.size;
      const [due, wakeAt] = pace.predicts() && !drained ? predicted(running, ahead.length - free, pace) : [0, null];
      const wanted = free + Math.max(pace.ahead(), Math.min(concurrency, due)) - ahead.length;
      const want = Math.min(wanted, CLAIM_PART);
      if (free <= 0 && !(due > 0 && want > 0)) { // every place busy: the settles wait for the next claim, FLUSH_MS at most
        const wait = finished.length === 0 ? poll : FLUSH_MS - (Date.now() - finished[0][3]);
        const untilDue = wakeAt === null ? Infinity : wakeAt - performance.now();
        if (wait > 0 && untilDue > 0) {
          await nap(Math.max(1, Math.min(wait, poll, untilDue)), false); // a finishing handler wakes us
          continue;
        }
      }
      // a full limit: the settles alone, the claim a moment later, so another process may
      // take the place they free (Share); asked also for a flush of settles, which starts the wait
      if (share.yields(finished.length > 0) && want > 0) {
        if (finished.length > 0) await settleAndClaim(writes, finished.splice(0), null, []);
        await nap(Math.max(1, share.waitLeft()), false);
        continue;
      }
      const started = performance.now();
      const held = inflight.size + ahead.length; // leased, and not settled by this commit
      const runs = (await settleAndClaim(writes, finished.splice(0), want > 0 ? claimSql : null, claimArgs(want), share, held))
        .map((job) => new Run(db, job, writes, connections));
      pace.committed(performance.now() - started);
      if (want > 0) drained = runs.length < want;
      if (wanted > want && !drained) await new Promise((resolve) => setImmediate(resolve)); // the next part after a turn
      // in line behind the jobs claimed ahead before (handlers that ended meanwhile took some)
      for (const run of runs) {
        heartbeat.add(run);
        ahead.push(run);
      }
      while (inflight.size < concurrency && ahead.length > 0) start(ahead.shift());
      // idle places: sleep in the waiter's tq_wait (unless stop() came while the claim committed,
      // or a handler ended while the puts before it committed: its settle goes first)
      if (runs.length < want && inflight.size < concurrency && !queue._stopping && finished.length === 0) {
        await nap(null, true);
      }
    }
  } finally {
    forget();
    // Claim nothing more; wait for the work in flight, until stop()'s grace ends (a stop() during
    // the drain may set or shorten it: it wakes the nap), then abandon what still runs.
    for (let left = graceLeft(queue); inflight.size > 0; left = graceLeft(queue)) {
      if (left === 0) {
        for (const run of running) heartbeat.remove(run);
        abandon([...running]);
        break;
      }
      if (finished.length > 0) await settleAndClaim(writes, finished.splice(0), null, []); // leases end
      else await nap(left === null ? poll : Math.min(left, poll), false); // a finishing handler wakes it
    }
    // Jobs claimed ahead go back in line: a snooze of 0 does not use up a try.
    const back = ahead.splice(0).filter((run) => !run.cancelled).map((run) => [run, 'snooze', 0]);
    try {
      await settleAndClaim(writes, finished.splice(0).concat(back), null, []);
    } finally { // a last settle that fails still stops the heartbeat and the waiter
      clearInterval(keepAlive);
      heartbeat.close();
      connections.close();
      writes.close();
      close(db);
      await waiter.release();
    }
  }
  return handled;
}

/** How many of the `running` handlers (in the order they started) are expected to end within
 * the pace's lead (from their start and the average handler's time), and when to look again:
 * when the first one beyond the `covered` ones (as many as the jobs claimed ahead that no free
 * place takes) comes within that lead (null: no such handler). */
function predicted(running, covered, pace) {
  const lead = pace.lead();
  const horizon = performance.now() + lead - pace.average; // started by then: expected to end soon
  let due = 0;
  let seen = 0;
  for (const run of running) {
    if (run._startedAt <= horizon) due += 1;
    else if (seen >= covered) return [due, run._startedAt + pace.average - lead];
    seen += 1;
  }
  return [due, null];
}

/** The settles of every handler that ended since the last turn, and the claim of the free
 * places (claimSql null: none), as one write of the next group commit (with the step puts of
 * this turn). A busy store delays it (group.js), never drops it. `share` learns after the
 * claim, in its transaction, whether the queue's concurrency limit is full (`held`: the
 * worker's leases before it). */
async function settleAndClaim(writes, batch, claimSql, args, share = null, held = 0) {
  if (batch.length === 0 && claimSql === null) return [];
  return writes.writeNow((db) => {
    for (const [run, outcome, value] of batch) settleIn(db, run, outcome, value);
    if (claimSql === null) return [];
    const jobs = rows(db, claimSql, ...args);
    if (share !== null) share.claimedIn(db, args[2], jobs.length, held); // whether the limit is full
    return jobs;
  });
}

/** The queue whose handler is running (in a handler's async context): stop() called there
 * must not wait for the handler that called it. */
const inHandlerOf = new AsyncLocalStorage();

// handleSignals: one listener per signal for the whole process, shared by every work() and
// Worker (a listener each made Node warn of a leak past ten). The first SIGTERM or SIGINT
// calls every stop registered and removes the listeners, as process.once did: a second one
// ends the process as by default.
const SIGNALS = ['SIGTERM', 'SIGINT'];
const stops = new Set();

function onStopSignal() {
  const all = [...stops];
  stops.clear();
  for (const name of SIGNALS) process.removeListener(name, onStopSignal);
  for (const stop of all) stop();
}

/** Call `stop` on the next SIGTERM or SIGINT; returns what unregisters it. */
function stopOnSignal(stop) {
  const entry = () => stop(); // its own: the same function twice would be one entry
  if (stops.size === 0) for (const name of SIGNALS) process.on(name, onStopSignal);
  stops.add(entry);
  return () => {
    if (stops.delete(entry) && stops.size === 0) for (const name of SIGNALS) process.removeListener(name, onStopSignal);
  };
}

/** One claimed job: run the handler (its lease renewed by the heartbeat), then queue its
 * settle for the next claim (unless cancelled). */
async function runOne(queue, run, handler, errors, finished, heartbeat, pace) {
  heartbeat.add(run);
  // the attempt as an OpenTelemetry span (when the app has @opentelemetry/api), its status the outcome
  await otel.attempt(queue.name, run, async (span) => {
    const started = performance.now();
    let outcome, value;
    try {
      const result = await inHandlerOf.run(queue, () => handler(decode(run._payload), run));
      [outcome, value] = ['done', resultText(run, result)];
    } catch (err) {
      [outcome, value] = err instanceof Outcome ? [err.outcome, err.value] : ['error', errorText(err, errors)];
    } finally {
      heartbeat.remove(run);
      run._end('finished');
      pace.took(performance.now() - started);
    }
    if (run._releaseDb()) [outcome, value] = leftOpen(run, outcome, value);
    if (run.cancelled) outcome = null; // settles nothing
    span.ended(outcome, value);
    if (outcome) finished.push([run, outcome, value, Date.now()]); // settled with the next claim
  });
}

const LEFT_OPEN = 'tinyq: the handler ended with a transaction open on run.db: rolled back';

/** The outcome of an attempt whose handler ended with a transaction open on its run.db, now
 * rolled back (logged): what it returned is not kept, so a done job becomes an error (it runs
 * again while attempts remain), an error says so too; retry, snooze and fail stand. */
function leftOpen(run, outcome, value) {
  console.warn(`tinyq: job ${run.id} (attempt ${run.attempt}): the handler ended with a transaction open on run.db: `
    + 'rolled back (commit or roll back before the handler returns)');
  if (outcome === 'done') return ['error', `Error: ${LEFT_OPEN}`];
  if (outcome === 'error') return ['error', `${value}; ${LEFT_OPEN}`];
  return [outcome, value];
}

/** Ms left of stop({ timeout })'s grace (null: none was given). */
function graceLeft(queue) {
  return queue._graceEnds === null ? null : Math.max(queue._graceEnds - Date.now(), 0);
}

/** stop()'s grace has ended with `runs` still running: each is marked cancelled (its signal
 * aborts) and over (its later progress, steps and result are not written), and logged. One
 * that still held its job keeps its lease until it runs out (it is renewed no more): then the
 * job runs again, its attempt counted, as after a crash, rather than at once beside a handler
 * that may still be at work. */
function abandon(runs) {
  for (const run of runs) {
    const held = run._abandon();
    console.warn(`tinyq: stop(): job ${run.id} (attempt ${run.attempt}) still running when the grace ended: `
      + 'abandoned, its result will not be settled; '
      + (held ? 'it still holds its job until its lease runs out (no longer renewed), then runs again'
        : 'it no longer held its job (cancelled, timed out or taken by a later attempt)'));
  }
}

// The last argument is work()'s lease (null: the queue's): a renewal extends by the claim's
// lease, or a worker's longer lease would shrink to the queue's at its first renewal.
const RENEW_ALL = "SELECT tq_renew(json_extract(value, '$[0]'), json_extract(value, '$[1]'), ?) AS lease FROM json_each(?)";

/** The worker's heartbeat: when the earliest running job is at half its lease, every running
 * job is renewed, in one statement, a write of the group commit (which waits out a busy store
 * without dropping it). A NULL marks the run cancelled. */
function startHeartbeat(writes, lease) {
  const due = new Map(); // run -> time of its next renewal (ms)
  const every = (run) => (run._renewEvery = Math.max(run.leaseUntil - Date.now(), 100) / 2);
  let timer = null;
  let timerAt = Infinity; // when the timer fires
  let renewing = false; // a renewal waits for its commit: the next one after it
  const renew = (pairs) => writes.write((db) => rows(db, RENEW_ALL, lease, pairs).map((r) => r.lease));
  const schedule = () => {
    clearTimeout(timer);
    timer = null;
    timerAt = Infinity;
    if (due.size === 0) return;
    let earliest = Infinity;
    for (const at of due.values()) earliest = Math.min(earliest, at);
    timerAt = Math.max(earliest, Date.now() + 1); // not in the past: beat() measures how late it fired
    timer = setTimeout(beat, timerAt - Date.now());
  };
  const beat = () => {
    warnIfLate(due, Date.now() - timerAt);
    if (renewing) return; // schedule() again once it has committed
    const runs = [...due.keys()];
    renewing = true;
    renew(JSON.stringify(runs.map((run) => [run.id, run.attempt]))).then((leases) => {
      runs.forEach((run, i) => {
        if (leases[i] === null) {
          run._cancel(); // cancelled, timed out, or taken by a later attempt: stop renewing
          due.delete(run);
        } else {
          run.leaseUntil = leases[i];
          if (due.has(run)) due.set(run, Date.now() + every(run));
        }
      });
    }, (err) => {
      console.warn(`tinyq: renewing ${runs.length} leases failed: ${err.message}`);
      const soon = Date.now() + 250;
      for (const run of runs) if (due.has(run)) due.set(run, soon);
    }).finally(() => {
      renewing = false;
      schedule();
    });
  };
  return {
    add(run) {
      const at = Date.now() + every(run);
      due.set(run, at);
      if (at < timerAt) schedule(); // only then: most jobs have the same lease
    },
    remove(run) {
      due.delete(run); // a timer left for it renews the others a little early: harmless
      if (due.size === 0) schedule();
    },
    close() {
      due.clear();
      schedule();
    },
  };
}

/** Logs, once per job, a renewal that came more than half its interval (a quarter of the
 * lease) late because its timer fired `firedLate` ms late: the event loop was blocked (a
 * handler's synchronous loop, CPU work or synchronous I/O), starving the heartbeat, as
 * Python's asyncio worker warns. Past the lease another worker may take the job. */
function warnIfLate(due, firedLate) {
  const now = Date.now();
  for (const [run, at] of due) {
    if (run._warnedLate || now < at || firedLate <= run._renewEvery / 2) continue;
    run._warnedLate = true;
    console.warn(`tinyq: the lease renewal of job ${run.id} (attempt ${run.attempt}) came ${((now - at) / 1000).toFixed(2)} s `
      + 'late: a handler is blocking the event loop (a synchronous loop, CPU work or synchronous I/O without await); '
      + 'await between its parts or move the work to a worker_thread, or another worker may take the job once its '
      + 'lease runs out');
  }
}

/** tq_settle inside the caller's transaction. A settle the extension refuses (a bad delay,
 * say) is recorded as an error instead, so the job does not sit until its lease ends; but a
 * done job stays done, its result dropped (a result over the size limit). */
function settleIn(db, run, outcome, value) {
  const args = [run.id, run.attempt, outcome];
  if (value !== undefined && value !== null) args.push(value);
  try {
    return one(db, `SELECT tq_settle(${args.map(() => '?').join(', ')})`, ...args);
  } catch (err) {
    if (isBusy(err) || outcome === 'error') throw err;
    if (outcome === 'done' && args.length > 3) return settleIn(db, run, 'done', droppedResult(run, errorText(err)));
    return settleIn(db, run, 'error', errorText(err));
  }
}

/** A handler's return as stored text. One that cannot be stored (a BigInt, a circular
 * object) drops the result, not the job: its work is done and must not run again. */
function resultText(run, result) {
  if (result === undefined) return undefined;
  try {
    return encode(result);
  } catch (err) {
    return droppedResult(run, errorText(err));
  }
}

/** The result a done job keeps when its own could not be stored: why, logged too. */
function droppedResult(run, reason) {
  console.warn(`tinyq: job ${run.id} finished, but its result could not be stored (${reason}): dropped`);
  return JSON.stringify({ result_dropped: reason });
}

module.exports = { workLoop, inHandlerOf, stopOnSignal };
