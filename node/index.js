'use strict';
/**
 * tinyq for Node: load the extension, add jobs, and run workers.
 *
 *   const tinyq = require('tinyq');
 *   const replies = new tinyq.Queue('app.db', 'replies');
 *   replies.add({ messageId: 41 }, { id: 'reply:41' });
 *
 *   await replies.work(async (payload, run) => {
 *     const text = await run.step('answer', () => model.answer(payload.messageId));
 *     await send(text);
 *     return { sent: true };
 *   }, { concurrency: 4, handleSignals: true });   // until replies.stop(), SIGTERM or SIGINT
 *
 * Everything goes through tinyq's SQL functions over better-sqlite3, which is synchronous:
 * each call is short, and the handlers, lease renewals and the claim loop share the event
 * loop. A handler that computes for a long time without awaiting delays its own renewals.
 */
const fs = require('fs');
const os = require('os');
const path = require('path');
const util = require('util');
const Database = require('better-sqlite3');

// -- loading ---------------------------------------------------------------------------

/** Where the extension is: $TINYQ_EXT, else a tinyq.so packaged next to this file,
 * else the repository's ../dist/tinyq.so. */
function extensionPath() {
  if (process.env.TINYQ_EXT) return process.env.TINYQ_EXT;
  for (const folder of [__dirname, path.join(__dirname, '..', 'dist')]) {
    for (const suffix of ['.so', '.dylib', '.dll']) {
      const candidate = path.join(folder, 'tinyq' + suffix);
      if (fs.existsSync(candidate)) return candidate;
    }
  }
  throw new Error('tinyq extension not found: set TINYQ_EXT, or build dist/tinyq.so (make)');
}

/** Load tinyq into a better-sqlite3 Database; returns the Database. */
function load(db) {
  db.loadExtension(extensionPath());
  return db;
}

/** A Database the way a worker wants one: tinyq loaded, WAL, synchronous=FULL,
 * busy_timeout 5000 ms. */
function open(file, options) {
  const db = new Database(file, options);
  try {
    load(db);
    db.pragma('busy_timeout = 5000');
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL'); // power-safe commits: docs/guarantees.md
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}

// -- values ----------------------------------------------------------------------------

// better-sqlite3 binds every JS number as a REAL (10 arrives as 10.0), and tinyq's integer
// arguments (n, attempt, since) accept only INTEGER. So whole numbers are bound as BigInt.
function arg(value) {
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  if (typeof value === 'boolean') return value ? 1n : 0n;
  if (value instanceof Date) return BigInt(value.getTime());
  return value === undefined ? null : value;
}

// Prepared statements, kept per Database (a prepare costs more than most of tinyq's calls).
const statements = new WeakMap();

function prepared(db, sql, pluck) {
  let cache = statements.get(db);
  if (!cache) statements.set(db, (cache = new Map()));
  const key = (pluck ? '1' : '0') + sql;
  let stmt = cache.get(key);
  if (!stmt) {
    stmt = pluck ? db.prepare(sql).pluck() : db.prepare(sql);
    cache.set(key, stmt);
  }
  return stmt;
}

function one(db, sql, ...args) {
  return prepared(db, sql, true).get(...args.map(arg));
}

function rows(db, sql, ...args) {
  return prepared(db, sql, false).all(...args.map(arg));
}

/** Text is stored as is; anything else (object, array, number, boolean, null) as JSON. */
function encode(value) {
  if (typeof value === 'string') return value;
  return JSON.stringify(value === undefined ? null : value);
}

/** JSON text back to a value; text that is not JSON (and numbers) come back as they are. */
function decode(value) {
  if (typeof value !== 'string') return value;
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}

/** A JSON options object of the keys that are set (Dates as ms), or null when none is. */
function options(object) {
  const out = {};
  for (const [key, value] of Object.entries(object || {})) {
    if (value !== undefined && value !== null) out[key] = value instanceof Date ? value.getTime() : value;
  }
  return Object.keys(out).length ? JSON.stringify(out) : null;
}

/** "Name: message" for a thrown Error (the class name when `name` was left as "Error");
 * only "Name" with errors = 'class', for messages that should not travel with the job. */
function errorText(err, errors = 'message') {
  if (!(err instanceof Error)) return errors === 'class' ? typeof err : String(err);
  let name = err.name || 'Error';
  if (name === 'Error' && err.constructor && err.constructor.name) name = err.constructor.name;
  return err.message && errors !== 'class' ? `${name}: ${err.message}` : name;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// -- a run: what a handler gets besides its payload ------------------------------------

/** Thrown by run.retry / run.snooze / run.fail: the loop settles the job with it. Not an
 * Error, so `catch (e) { if (e instanceof Error) ... }` in a handler lets it through. */
class Outcome {
  constructor(outcome, value) {
    this.outcome = outcome; // 'retry' | 'snooze' | 'fail', or null: settle nothing
    this.value = value;
  }
}

/** This attempt no longer holds its job (cancelled, timed out, or taken by a later
 * attempt): thrown by run.step when its answer could not be kept. Nothing is settled. */
class Cancelled extends Outcome {
  constructor(reason) {
    super(null, reason);
  }
}

class Run {
  constructor(db, job) {
    this.db = db; // the worker's connection, for the handler's own SQL
    this.id = job.id;
    this.attempt = job.attempt;
    this.group = job.group_key;
    this.leaseUntil = job.lease_until;
    this.deadline = job.deadline;
    const meta = decode(job.meta ?? null);
    this.meta = meta !== null && typeof meta === 'object' && !Array.isArray(meta) ? meta : {}; // tq_add's meta
    this.cancelled = false; // true once the job was cancelled or timed out
    this._abort = new AbortController();
    this.signal = this._abort.signal; // aborted when `cancelled` becomes true (for fetch etc.)
    this._payload = job.payload;
  }

  _cancel() {
    if (!this.cancelled) {
      this.cancelled = true;
      this._abort.abort();
    }
  }

  /** The answer kept under `name` by any attempt; else `await fn()`, kept as JSON. */
  async step(name, fn) {
    let kept = one(this.db, 'SELECT tq_step_get(?, ?)', this.id, name);
    if (kept === null) {
      const value = JSON.stringify((await fn()) ?? null);
      kept = one(this.db, 'SELECT tq_step_put(?, ?, ?, ?)', this.id, this.attempt, name, value);
      if (kept === null) {
        this._cancel();
        throw new Cancelled(`step "${name}" not kept: attempt ${this.attempt} of ${this.id} no longer holds the job`);
      }
    }
    return decode(kept);
  }

  /** Record progress (text as is, anything else as JSON); false when the job is gone. */
  progress(value) {
    const ok = one(this.db, 'SELECT tq_progress(?, ?, ?)', this.id, this.attempt, encode(value)) === 1;
    if (!ok) this._cancel();
    return ok;
  }

  /** End this attempt; run again after `delay` (default: the backoff). Counts. */
  retry(delay) {
    throw new Outcome('retry', delay);
  }

  /** End this attempt; run again after `delay`. Does not count against the budget. */
  snooze(delay) {
    throw new Outcome('snooze', delay);
  }

  /** Fail the job for good now, with `reason` as its error. */
  fail(reason) {
    throw new Outcome('fail', String(reason));
  }
}

// -- the queue -------------------------------------------------------------------------

/** One named queue in one SQLite file. `dbOrPath` is a path (the Queue opens its own
 * Database) or a better-sqlite3 Database of yours with tinyq loaded. Every method but
 * work() runs on that Database, in whatever transaction it is in: none begins or commits. */
class Queue {
  constructor(dbOrPath, name) {
    if (typeof dbOrPath === 'string') {
      this.path = dbOrPath;
      this.db = open(dbOrPath);
      this._ownsDb = true;
    } else {
      this.path = null;
      this.db = dbOrPath;
      this._ownsDb = false;
    }
    this.name = name;
    this._working = null; // the promise of a running work()
    this._stopping = false;
    this._wake = () => {};
  }

  /** Add a job; returns its id. Options: id, delay, at, group, priority, attempts, meta. */
  add(payload, opts) {
    const o = options(opts);
    const id = o === null
      ? one(this.db, 'SELECT tq_add(?, ?)', this.name, encode(payload))
      : one(this.db, 'SELECT tq_add(?, ?, ?)', this.name, encode(payload), o);
    this._wake(); // a worker of this Queue claims it without waiting for its next poll
    return id;
  }

  /** The job (tq_get) as an object, or null when there is no such job. */
  get(id) {
    const text = one(this.db, 'SELECT tq_get(?)', id);
    return text === null ? null : JSON.parse(text);
  }

  /** Remove a scheduled, waiting or running job; false when there was nothing to cancel. */
  cancel(id) {
    return one(this.db, 'SELECT tq_cancel(?)', id) === 1;
  }

  /** Make a failed job waiting again with a fresh attempt budget. */
  retry(id) {
    return one(this.db, 'SELECT tq_retry(?)', id) === 1;
  }

  /** This queue's state changes with seq > since, oldest first. */
  watch(since = 0) {
    return rows(this.db, 'SELECT seq, id, queue, state, attempt, at, detail FROM tq_watch(?, ?)', since, this.name);
  }

  /** Read (no argument) or set the queue's settings; returns the effective settings. */
  settings(opts) {
    const o = options(opts);
    const text = o === null
      ? one(this.db, 'SELECT tq_queue(?)', this.name)
      : one(this.db, 'SELECT tq_queue(?, ?)', this.name, o);
    return text === null ? null : JSON.parse(text);
  }

  // -- periodic jobs (CRON-01) ------------------------------------------------------------

  /**
   * Create or replace the schedule `name` of this queue; returns it as an object. `when`: a
   * cron expression ('0 9 * * mon'; 6 fields with seconds first), '@every 10m', or '@hourly',
   * '@daily', '@weekly', '@monthly', '@yearly'. Options: tz ('Europe/Paris'), missed ('latest',
   * 'skip', 'all'), paused, priority, group, attempts, meta. Each due time becomes the job
   * '<name>@<ISO-8601 UTC time>', added by the next claim on this queue.
   */
  schedule(name, when, payload, opts) {
    const o = options(opts);
    const args = [name, this.name, when, encode(payload)].concat(o === null ? [] : [o]);
    const text = one(this.db, `SELECT tq_schedule(${args.map(() => '?').join(', ')})`, ...args);
    this._wake(); // a worker of this Queue waits for the new due time
    return JSON.parse(text);
  }

  /** Remove the schedule `name`; false when there was none. Its jobs already added stay. */
  unschedule(name) {
    return one(this.db, 'SELECT tq_unschedule(?)', name) === 1;
  }

  /** This queue's schedules (tq_schedules), by name. */
  schedules() {
    return rows(this.db, 'SELECT name, queue, "when", tz, next_at, last_at, last_id, paused FROM tq_schedules WHERE queue = ?',
      this.name).map((s) => ({ ...s, paused: s.paused === 1 }));
  }

  /**
   * Run `await handler(payload, run)` for this queue's jobs until stop() (or SIGTERM/SIGINT
   * with handleSignals). Up to `concurrency` handlers run at once. Resolves, with how many
   * jobs it handled, once stopped and every job in flight has finished and settled.
   * Options: concurrency (1), worker (host:pid), lease (the queue's), poll (1000 ms),
   * handleSignals (false), errors ('message'; 'class' records only the error's class),
   * prefetch ('auto': how many jobs to claim ahead of the running handlers, see Pace).
   */
  work(handler, opts = {}) {
    if (this._working) throw new Error('this Queue is already working');
    this._stopping = false;
    this._working = workLoop(this, handler, opts).finally(() => {
      this._working = null;
      this._wake = () => {};
    });
    return this._working;
  }

  /** Claim nothing more; the promise resolves once work() has finished its jobs in flight. */
  stop() {
    this._stopping = true;
    this._wake();
    return this._working || Promise.resolve(0);
  }

  close() {
    if (this._ownsDb) this.db.close();
  }
}

// -- the worker loop -------------------------------------------------------------------

// An idle worker sleeps in tq_wait on a worker_thread of its own (waiter.js), which posts a
// message when a job may be claimable: better-sqlite3 is synchronous, so tq_wait on the main
// thread would freeze the event loop. The loop also claims every `poll` ms whatever happens.

/** The claim statement: with the job's meta when this build's tq_claim has its hidden
 * `meta` column (store schema 3 and later), NULL in its place before. */
function claimStatement(db, claimOpts) {
  const hasMeta = db.prepare("SELECT 1 FROM pragma_table_xinfo('tq_claim') WHERE name = 'meta'").pluck().get();
  return `SELECT id, attempt, payload, group_key, lease_until, deadline, ${hasMeta ? 'meta' : 'NULL AS meta'}`
    + ` FROM tq_claim(?, ?, ?${claimOpts === null ? ')' : ', ?)'}`;
}

/** The waiter thread, and `arm()`: wake me (the promise resolves) when a job may be claimable. */
function startWaiter(file, queueName) {
  const { Worker } = require('worker_threads');
  const stop = new Int32Array(new SharedArrayBuffer(4)); // 1: the worker stopped (waiter.js)
  const worker = new Worker(path.join(__dirname, 'waiter.js'), {
    workerData: { file, queue: queueName, extension: extensionPath(), stop },
  });
  worker.unref(); // never what keeps a process alive
  let waiting = false; // a tq_wait is under way
  const resolvers = [];
  worker.on('message', () => {
    waiting = false;
    for (const resolve of resolvers.splice(0)) resolve();
  });
  let dead = false; // the thread failed or exited: wake-ups fall back to timers
  let exited;
  const exit = new Promise((resolve) => { exited = resolve; });
  const died = () => {
    dead = true;
    exited();
    for (const resolve of resolvers.splice(0)) resolve();
  };
  worker.on('error', (err) => {
    console.warn(`tinyq: the wake-up thread failed: ${err.message}`);
    died();
  });
  worker.on('exit', died);
  return {
    /** Resolves when the waiter's tq_wait returns (after `poll` ms at most). */
    arm(poll) {
      if (dead) return new Promise((resolve) => setTimeout(resolve, poll).unref());
      if (!waiting) {
        waiting = true;
        worker.postMessage({ poll });
      }
      return new Promise((resolve) => resolvers.push(resolve));
    },
    /** Stops the thread; resolves once it has closed its connection (CLOSE_MS at most), so
     * nothing of the worker touches the database after work() returns. */
    async close() {
      Atomics.store(stop, 0, 1);
      worker.postMessage({ close: true });
      let timer;
      await Promise.race([exit, new Promise((resolve) => { timer = setTimeout(resolve, CLOSE_MS); })]);
      clearTimeout(timer);
    },
  };
}

const CLOSE_MS = 2000; // the longest work() waits for its wake-up thread to end
const AUTO_AHEAD = 7; // what prefetch 'auto' claims ahead, while handlers are fast
const FAST_MS = 1; // ... that is, while they took under 1 ms (a moving average)
const FLUSH_MS = 20; // a settle waits at most this long for the next claim
const MAX_CLAIM = 1000; // tq_claim's largest n

/** How many jobs the worker claims ahead of its running handlers (the `prefetch` option),
 * as Python's threads do. A whole number is fixed. 'auto' claims AUTO_AHEAD ahead only while
 * the recent handlers (a moving average) took under FAST_MS: then a job claimed ahead waits a
 * few milliseconds at most, and a backlog of tiny jobs costs one commit per AUTO_AHEAD + 1
 * jobs instead of one per job. The first claim, and every claim after slow handlers, takes
 * only the free places. */
class Pace {
  constructor(prefetch) {
    this.fixed = wholeNumber('prefetch', prefetch, 0, 'auto') === 'auto' ? null : prefetch;
    this.average = null; // ms
  }

  took(ms) {
    this.average = this.average === null ? ms : 0.7 * this.average + 0.3 * ms;
  }

  ahead() {
    if (this.fixed !== null) return this.fixed;
    return this.average !== null && this.average < FAST_MS ? AUTO_AHEAD : 0;
  }
}

/** The option `value` when it is a whole number >= `least` (or `other`), else an error
 * naming the option and the value. */
function wholeNumber(option, value, least, other) {
  if ((other !== undefined && value === other) || (Number.isSafeInteger(value) && value >= least)) return value;
  const also = other === undefined ? '' : `${util.inspect(other)} or `;
  throw new Error(`${option} must be ${also}a whole number >= ${least}, not ${util.inspect(value)}`);
}

async function workLoop(queue, handler, opts) {
  const concurrency = wholeNumber('concurrency', opts.concurrency ?? 1, 1);
  const errors = opts.errors ?? 'message';
  if (errors !== 'message' && errors !== 'class') throw new Error(`errors must be 'message' or 'class', not ${errors}`);
  const pace = new Pace(opts.prefetch ?? 'auto');
  const worker = opts.worker || `${os.hostname()}:${process.pid}`;
  const poll = opts.poll ?? 1000;
  const claimOpts = options({ lease: opts.lease });

  const file = queue.path || queue.db.name;
  if (!file || file === ':memory:' || queue.db.memory) {
    throw new Error('Queue.work needs a database file (not :memory:)');
  }
  const db = open(file); // the worker's own connection: never inside the caller's transaction
  const claimSql = claimStatement(db, claimOpts);
  const waiter = startWaiter(file, queue.name);
  const inflight = new Set();
  const heartbeat = startHeartbeat(db);
  let handled = 0;
  let wake = null; // ends the current nap: a handler finished, stop(), or the waiter
  queue._wake = () => wake && wake();
  const nap = (ms, idle) => new Promise((resolve) => {
    const timer = setTimeout(() => { wake = null; resolve(); }, ms);
    wake = () => { clearTimeout(timer); wake = null; resolve(); };
    if (idle) waiter.arm(ms).then(() => wake && wake());
  });

  const onSignal = () => queue.stop();
  if (opts.handleSignals) {
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
  }
  // [run, outcome, value, when] of handlers that ended, to settle with the next claim
  const finished = [];
  // Runs claimed ahead (prefetch), not started: leased, and renewed by the heartbeat
  const ahead = [];
  const claimArgs = (n) => (claimOpts === null ? [queue.name, worker, n] : [queue.name, worker, n, claimOpts]);
  const start = (run) => {
    if (run.cancelled) return heartbeat.remove(run); // cancelled while it waited, claimed ahead
    const p = runOne(run, handler, errors, finished, heartbeat, pace).finally(() => {
      inflight.delete(p);
      queue._wake();
    });
    inflight.add(p);
    handled += 1;
  };
  try {
    while (!queue._stopping) {
      while (inflight.size < concurrency && ahead.length > 0) start(ahead.shift());
      const free = concurrency - inflight.size;
      if (free <= 0) { // every place busy: the settles wait for the next claim, FLUSH_MS at most
        const wait = finished.length === 0 ? poll : FLUSH_MS - (Date.now() - finished[0][3]);
        if (wait > 0) {
          await nap(Math.min(wait, poll), false); // a finishing handler wakes us
          continue;
        }
      }
      const want = free > 0 ? Math.min(free + pace.ahead(), MAX_CLAIM) : 0;
      const runs = settleAndClaim(db, finished.splice(0), want > 0 ? claimSql : null, claimArgs(want))
        .map((job) => new Run(db, job));
      for (const run of runs.slice(free)) {
        heartbeat.add(run);
        ahead.push(run);
      }
      runs.slice(0, free).forEach(start);
      if (free > 0 && runs.length < free) await nap(poll, true); // idle places: sleep in the waiter's tq_wait
    }
  } finally {
    process.removeListener('SIGTERM', onSignal);
    process.removeListener('SIGINT', onSignal);
    await Promise.allSettled(inflight); // claim nothing more; wait for the work in flight
    // Jobs claimed ahead go back in line: a snooze of 0 does not use up a try.
    const back = ahead.splice(0).filter((run) => !run.cancelled).map((run) => [run, 'snooze', 0]);
    try {
      settleAndClaim(db, finished.splice(0).concat(back), null, []);
    } finally { // a last settle that fails still stops the heartbeat and the waiter
      heartbeat.close();
      db.close();
      await waiter.close();
    }
  }
  return handled;
}

/** The settles of every handler that ended since the last turn, and the claim of the free
 * places (claimSql null: none), in one transaction: one commit for several jobs. Busy: tried
 * three times, then the settles are dropped (their leases run out and the jobs run again). */
function settleAndClaim(db, batch, claimSql, args) {
  if (batch.length === 0 && claimSql === null) return [];
  const body = db.transaction(() => {
    for (const [run, outcome, value] of batch) settleIn(db, run, outcome, value);
    return claimSql === null ? [] : rows(db, claimSql, ...args);
  });
  for (let attempt = 1; ; attempt++) {
    try {
      return body.immediate();
    } catch (err) {
      if (!isBusy(err)) throw err;
      if (attempt === 3) {
        console.error(`tinyq: settling ${batch.length} jobs / claiming failed: ${err.message}`);
        return [];
      }
    }
  }
}

function isBusy(err) {
  return /SQLITE_BUSY|SQLITE_LOCKED/.test(err && err.code) || /locked|busy/i.test(err && err.message);
}

/** One claimed job: run the handler (its lease renewed by the heartbeat), then queue its
 * settle for the next claim (unless cancelled). */
async function runOne(run, handler, errors, finished, heartbeat, pace) {
  heartbeat.add(run);
  const started = performance.now();
  let outcome, value;
  try {
    const result = await handler(decode(run._payload), run);
    [outcome, value] = ['done', result === undefined ? undefined : encode(result)];
  } catch (err) {
    [outcome, value] = err instanceof Outcome ? [err.outcome, err.value] : ['error', errorText(err, errors)];
  } finally {
    heartbeat.remove(run);
    pace.took(performance.now() - started);
  }
  if (outcome && !run.cancelled) finished.push([run, outcome, value, Date.now()]); // settled with the next claim
}

const RENEW_ALL = "SELECT tq_renew(json_extract(value, '$[0]'), json_extract(value, '$[1]')) AS lease FROM json_each(?)";

/** The worker's heartbeat: when the earliest running job is at half its lease, every running
 * job is renewed, in one statement of one transaction. A NULL marks the run cancelled. */
function startHeartbeat(db) {
  const due = new Map(); // run -> time of its next renewal (ms)
  const every = (run) => Math.max(run.leaseUntil - Date.now(), 100) / 2;
  let timer = null;
  let timerAt = Infinity; // when the timer fires
  const renew = db.transaction((pairs) => rows(db, RENEW_ALL, pairs).map((r) => r.lease));
  const schedule = () => {
    clearTimeout(timer);
    timer = null;
    timerAt = Infinity;
    if (due.size === 0) return;
    let earliest = Infinity;
    for (const at of due.values()) earliest = Math.min(earliest, at);
    timerAt = earliest;
    timer = setTimeout(beat, Math.max(earliest - Date.now(), 1));
  };
  const beat = () => {
    const runs = [...due.keys()];
    try {
      const leases = renew.immediate(JSON.stringify(runs.map((run) => [run.id, run.attempt])));
      runs.forEach((run, i) => {
        if (leases[i] === null) {
          run._cancel(); // cancelled, timed out, or taken by a later attempt: stop renewing
          due.delete(run);
        } else {
          run.leaseUntil = leases[i];
          if (due.has(run)) due.set(run, Date.now() + every(run));
        }
      });
    } catch (err) {
      console.warn(`tinyq: renewing ${runs.length} leases failed: ${err.message}`);
      const soon = Date.now() + 250; // busy, most likely: try again soon
      for (const run of runs) if (due.has(run)) due.set(run, soon);
    }
    schedule();
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

/** tq_settle inside the caller's transaction. A settle the extension refuses (a bad delay,
 * say) is recorded as an error instead, so the job does not sit until its lease ends. */
function settleIn(db, run, outcome, value) {
  const args = [run.id, run.attempt, outcome];
  if (value !== undefined && value !== null) args.push(value);
  try {
    return one(db, `SELECT tq_settle(${args.map(() => '?').join(', ')})`, ...args);
  } catch (err) {
    if (isBusy(err) || outcome === 'error') throw err;
    return settleIn(db, run, 'error', errorText(err));
  }
}

module.exports = { load, open, extensionPath, Queue, Run, Outcome, Cancelled };
