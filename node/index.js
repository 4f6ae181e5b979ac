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
 * Everything goes through tinyq's SQL functions over a synchronous driver (better-sqlite3,
 * node:sqlite or bun:sqlite, see drivers.js): each call is short, and the handlers, lease renewals and the claim loop share the event
 * loop. A handler that computes for a long time without awaiting delays its own renewals.
 */
const { close, decode, encode, extensionPath, load, one, open, options, rows, transaction } = require('./sql.js');
const { adapterOf } = require('./drivers.js');
const { Cancelled, Outcome, Run } = require('./run.js');
const { inHandlerOf, stopOnSignal, workLoop } = require('./worker.js');
const { drain } = require('./drain.js');
const otel = require('./otel.js');

/** A count or a flag as a number: a Database of yours may read integers as BigInt
 * (better-sqlite3's defaultSafeIntegers, node:sqlite's readBigInts). */
const int = (value) => (typeof value === 'bigint' ? Number(value) : value);

// -- the queue -------------------------------------------------------------------------

// Many adds, one statement: each element of the JSON array is a payload as stored (text), or
// [payload, id], the id joining the options every add shares.
const ADD_EACH = 'SELECT tq_add(?, value, ?) FROM json_each(?)';
const ADD_EACH_WITH_ID = "SELECT tq_add(?, value ->> 0, json_set(coalesce(?, '{}'), '$.id', value ->> 1)) FROM json_each(?)";

/** One named queue in one SQLite file. `dbOrPath` is a path (the Queue opens its own
 * Database, with `opts.driver` or the default driver) or a Database of yours with tinyq loaded:
 * better-sqlite3, node:sqlite's DatabaseSync or bun:sqlite's. Every method but work() runs on
 * that Database, in whatever transaction it is in: none begins or commits. */
class Queue {
  constructor(dbOrPath, name, opts = {}) {
    if (typeof dbOrPath === 'string') {
      this.path = dbOrPath;
      this.db = open(dbOrPath, { driver: opts.driver });
      this._ownsDb = true;
    } else {
      this.path = null;
      adapterOf(dbOrPath); // an error now for what is not a Database
      this.db = dbOrPath;
      this._ownsDb = false;
    }
    this.name = name;
    this._working = null; // the promise of a running work()
    this._stopping = false;
    this._graceEnds = null; // stop({ timeout }): when the drain ends (Date.now() ms)
    this._wake = () => {};
    this._addEach = null; // addMany's transaction function, made on first use
  }

  /** Add a job; returns its id. Options: id, delay, at, group, priority, attempts, meta,
   * expires, on_conflict ('keep', 'replace', 'debounce'), max_wait, and after (ids of jobs it
   * waits for: blocked until they have finished) with after_failed ('fail', 'run', 'cancel'). */
  add(payload, opts) {
    const o = options(otel.traced(opts), 'add'); // with the active span's traceparent in meta
    const id = o === null
      ? one(this.db, 'SELECT tq_add(?, ?)', this.name, encode(payload))
      : one(this.db, 'SELECT tq_add(?, ?, ?)', this.name, encode(payload), o);
    this._wake(); // a worker of this Queue claims it without waiting for its next poll
    return id;
  }

  /** Add one job per payload, with the same options (add's; `ids`: each job's own id), in one
   * transaction and one statement; returns their ids in order. All or nothing: an add that
   * fails rolls the others back (a transaction of its own, or a savepoint inside yours). */
  addMany(payloads, opts = {}) {
    const { ids, ...shared } = otel.traced(opts) ?? {};
    if (ids !== undefined && ids.length !== payloads.length) {
      throw new Error(`addMany: ${ids.length} ids for ${payloads.length} payloads`);
    }
    if (payloads.length === 0) return [];
    const items = ids === undefined ? payloads.map(encode) : payloads.map((p, i) => [encode(p), ids[i]]);
    // BEGIN IMMEDIATE, or a savepoint inside the caller's transaction (sql.js, transaction).
    this._addEach ||= transaction(this.db, (sql, o, json) => rows(this.db, sql, this.name, o, json)
      .map((row) => Object.values(row)[0]));
    const added = this._addEach(ids === undefined ? ADD_EACH : ADD_EACH_WITH_ID, options(shared, 'addMany'), JSON.stringify(items));
    this._wake();
    return added;
  }

  /** The job (tq_get) as an object, or null when there is no such job. */
  get(id) {
    const text = one(this.db, 'SELECT tq_get(?)', id);
    return text === null ? null : JSON.parse(text);
  }

  /** The jobs `id` waits or waited for (tq_deps), each as {id, state, result, error}. */
  deps(id) {
    return rows(this.db, 'SELECT id, state, result, error FROM tq_deps(?)', id)
      .map((dep) => ({ ...dep, result: decode(dep.result) }));
  }

  /** Send the signal `name` (tq_signal): every job waiting for it (run.waitSignal) gets
   * `payload` and runs again; a wait that begins later, within `keep` (default 7d), gets it
   * at once. Returns how many jobs it woke. A signal's name is the whole store's. */
  signal(name, payload = null, opts) {
    const o = options(opts, 'signal');
    const args = [name, encode(payload)].concat(o === null ? [] : [o]);
    const woken = one(this.db, `SELECT tq_signal(${args.map(() => '?').join(', ')})`, ...args);
    this._wake(); // a worker of this Queue claims the jobs it woke without waiting for its poll
    return int(woken);
  }

  /** Remove a scheduled, waiting, blocked or running job; false when there was nothing to cancel. */
  cancel(id) {
    return int(one(this.db, 'SELECT tq_cancel(?)', id)) === 1;
  }

  /** Make a failed job waiting again with a fresh attempt budget. */
  retry(id) {
    return int(one(this.db, 'SELECT tq_retry(?)', id)) === 1;
  }

  /** This queue's state changes with seq > since, oldest first. */
  watch(since = 0) {
    return rows(this.db, 'SELECT seq, id, queue, state, attempt, at, detail FROM tq_watch(?, ?)', since, this.name);
  }

  /** Read (no argument) or set the queue's settings; returns the effective settings. */
  settings(opts) {
    const o = options(opts, 'settings');
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
    const o = options(opts, 'schedule');
    const args = [name, this.name, when, encode(payload)].concat(o === null ? [] : [o]);
    const text = one(this.db, `SELECT tq_schedule(${args.map(() => '?').join(', ')})`, ...args);
    this._wake(); // a worker of this Queue waits for the new due time
    return JSON.parse(text);
  }

  /** Remove the schedule `name`; false when there was none. Its jobs already added stay. */
  unschedule(name) {
    return int(one(this.db, 'SELECT tq_unschedule(?)', name)) === 1;
  }

  /** This queue's schedules (tq_schedules), by name. */
  schedules() {
    return rows(this.db, 'SELECT name, queue, "when", tz, next_at, last_at, last_id, paused FROM tq_schedules WHERE queue = ?',
      this.name).map((s) => ({ ...s, paused: int(s.paused) === 1 }));
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
    // A stop() is never lost: one asked before work() makes it resolve at once (with 0), as
    // in Python's two helpers; each work() then leaves the next one unstopped.
    this._working = workLoop(this, handler, opts).finally(() => {
      this._working = null;
      this._stopping = false;
      this._graceEnds = null;
      this._wake = () => {};
    });
    return this._working;
  }

  /**
   * work(handler, opts) until no job of this queue is running and none is due now; resolves
   * with { done, failed, retried }, how the attempts it ran ended (an error or run.retry is
   * retried while the job had tries left, else failed). For scripts, cron runs and tests: it
   * runs the jobs that are due and those that become due while it runs (jobs the handlers
   * add, dependents a finished job unblocks, retries and scheduled jobs whose time comes while
   * other jobs still run). It does not wait for a job due later once nothing else runs (a
   * retry's backoff, delay, at): that job stays scheduled. A paused queue's waiting jobs are
   * not waited for. The same options as work(); stop() and signals end it early.
   */
  drain(handler, opts = {}) {
    if (this._working) throw new Error('this Queue is already working'); // else it would stop that work()
    return drain(this, handler, opts);
  }

  /** Claim nothing more; the promise resolves once work() has finished its jobs in flight
   * (before work(), the next work() claims nothing and resolves with 0).
   * Called from one of this queue's handlers it resolves at once (with 0): waiting would
   * wait for the handler itself; work()'s own promise tells when everything has settled.
   * `timeout` (ms; none: as long as it takes) bounds the wait: once it has passed, the
   * handlers still running are abandoned (logged, their run.signal aborted) and work()
   * resolves. An abandoned attempt settles nothing, whenever its handler returns; one that
   * still held its job keeps it until its lease runs out (no longer renewed), then the job
   * runs again. A later stop({ timeout }) during the drain can shorten the grace, never
   * lengthen it. */
  stop({ timeout } = {}) {
    if (timeout !== undefined) {
      if (!Number.isSafeInteger(timeout) || timeout < 0) {
        throw new Error(`stop: timeout must be a whole number of ms >= 0, not ${String(timeout)}`);
      }
      const ends = Date.now() + timeout;
      this._graceEnds = this._graceEnds === null ? ends : Math.min(this._graceEnds, ends);
    }
    this._stopping = true;
    this._wake();
    if (inHandlerOf.getStore() === this) return Promise.resolve(0);
    return this._working || Promise.resolve(0);
  }

  close() {
    if (this._ownsDb) close(this.db);
  }
}

// -- several queues in one work() ---------------------------------------------------------

const QUEUE_OPTIONS = ['concurrency', 'lease', 'errors', 'prefetch'];

/** Serves several queues of one SQLite file in one work():
 *
 *   const worker = new tinyq.Worker('app.db', {
 *     emails: send,                                        // concurrency 1
 *     pdfs: [render, { concurrency: 4, lease: '5m' }],
 *   }, { handleSignals: true });
 *   await worker.work();   // until worker.stop(), SIGTERM or SIGINT
 *
 * `queues`: queue name -> handler, or [handler, options], the options those of Queue.work
 * that belong to one queue (concurrency, lease, errors, prefetch); `opts` are the call's
 * (worker, poll, handleSignals, driver). Each queue keeps its own loop, concurrency, lease
 * and limits; the process's one waiter thread for the file wakes them all; one stop() or
 * signal ends them all, and a failure in one stops the others and rejects work(). */
class Worker {
  constructor(dbOrPath, queues, opts = {}) {
    if (queues === null || typeof queues !== 'object' || Array.isArray(queues) || Object.keys(queues).length === 0) {
      throw new Error('Worker: queues must be a non-empty object of queue name -> handler or [handler, options]');
    }
    this.specs = Object.entries(queues).map(([name, spec]) => {
      const [handler, options = {}] = Array.isArray(spec) ? spec : [spec];
      if (typeof handler !== 'function' || options === null || typeof options !== 'object') {
        throw new TypeError(`Worker: queue '${name}': expected a handler or [handler, options], not ${String(spec)}`);
      }
      const unknown = Object.keys(options).find((key) => !QUEUE_OPTIONS.includes(key));
      if (unknown !== undefined) {
        throw new Error(`Worker: queue '${name}': unknown option '${unknown}' (one of ${QUEUE_OPTIONS.join(', ')})`);
      }
      return { name, handler, options };
    });
    this.opts = opts;
    this._ownsDb = typeof dbOrPath === 'string';
    this.db = this._ownsDb ? open(dbOrPath, { driver: opts.driver }) : dbOrPath;
    this.path = this._ownsDb ? dbOrPath : null;
    // the queues share the Worker's Database (each work() opens its own connections)
    this.queues = this.specs.map(({ name }) => new Queue(this.db, name));
    this._working = null;
  }

  /** Resolves, with how many jobs each queue handled ({ name: count }), once stopped and
   * every job in flight has finished and settled; rejects with the first failure. */
  work() {
    if (this._working) throw new Error('this Worker is already working');
    const { handleSignals, driver, ...shared } = this.opts; // the driver is the Worker's Database's
    let failure = null;
    const works = this.specs.map(({ handler, options }, i) => this.queues[i].work(handler, { ...shared, ...options })
      .catch((err) => {
        failure = failure || err;
        for (const q of this.queues) q.stop();
        return 0;
      }));
    const forget = handleSignals ? stopOnSignal(() => this.stop()) : () => {};
    this._working = Promise.all(works).then((counts) => {
      if (failure) throw failure;
      return Object.fromEntries(this.specs.map(({ name }, i) => [name, counts[i]]));
    }).finally(() => {
      forget();
      this._working = null;
    });
    return this._working;
  }

  /** stop() for every queue (as Queue.stop: `timeout`, its grace in ms); resolves once all
   * have finished (at once, with 0, from inside one of their handlers). */
  stop(opts = {}) {
    for (const q of this.queues) q.stop(opts).catch(() => {}); // work() rejects with a failure
    if (this.queues.some((q) => inHandlerOf.getStore() === q)) return Promise.resolve(0);
    return this._working || Promise.resolve(0);
  }

  close() {
    if (this._ownsDb) close(this.db);
  }
}

module.exports = { load, open, extensionPath, Queue, Worker, Run, Outcome, Cancelled };
