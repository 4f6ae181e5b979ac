'use strict';
// Queue.drain: work() until nothing of the queue is due or running, as Python's _drain.py.
// A watcher beside the work() calls stop() once the queue's tq_stats row says no job runs
// and none waits (is due now), and a tally counts how the attempts it ran ended. The store
// says when the queue is idle, not the worker: a job that a handler adds, a dependent that a
// done job unblocks, a retry whose backoff has ended, all show as waiting before the attempt
// that made them is settled (it shows as running until then).
const { adapterOf } = require('./drivers.js');
const { close, fileOf, one, open, rows } = require('./sql.js');
const { Cancelled, Outcome } = require('./run.js');

const CHECK_EVERY_MS = 20; // between two looks at tq_stats while the drain runs

const IDLE_SQL = 'SELECT running, waiting, paused FROM tq_stats(?)';

/** Nothing of `queue` runs, and nothing is due now (or the queue is paused). */
function idle(db, queue) {
  const [row] = rows(db, IDLE_SQL, queue);
  if (row === undefined) return true; // no job, no setting: nothing ever ran
  return Number(row.running) === 0 && (Number(row.waiting) === 0 || Boolean(Number(row.paused)));
}

/** How the attempts of one drain ended: returned (done), run.fail (failed), or an error or
 * run.retry, which is a retry while the job has tries left, else failed (the store says
 * which, once the drain is over). A snooze, a wait or a cancelled attempt counts nothing. */
class Tally {
  constructor() {
    this.done = 0;
    this.failed = 0;
    this.errors = []; // [id, attempt] of the attempts that ended in an error or run.retry
  }

  /** `handler`, counting how each of its attempts ended. */
  counting(handler) {
    return async (payload, run) => {
      let result;
      try {
        result = await handler(payload, run);
      } catch (err) {
        if (!run.cancelled) this.thrown(run, err);
        throw err;
      }
      if (!run.cancelled) this.done += 1;
      return result;
    };
  }

  thrown(run, err) {
    if (err instanceof Cancelled) return;
    const outcome = err instanceof Outcome ? err.outcome : 'error';
    if (outcome === 'fail') this.failed += 1;
    else if (outcome === 'error' || outcome === 'retry') this.errors.push([run.id, run.attempt]);
  }

  /** { done, failed, retried }: an attempt that ended in an error is counted failed when it
   * was the job's last (the job failed at that attempt). */
  summary(db) {
    let { failed } = this;
    let retried = 0;
    for (const [id, attempt] of this.errors) {
      const text = one(db, 'SELECT tq_get(?)', id);
      const job = text ? JSON.parse(text) : {};
      if (job.state === 'failed' && Number(job.attempt) === attempt) failed += 1;
      else retried += 1;
    }
    return { done: this.done, failed, retried };
  }
}

/** Looks at the queue every CHECK_EVERY_MS on a connection of its own and calls stop() once
 * it is idle. A failure to look stops the drain too; close() then throws it. */
function watch(queue, file) {
  let db = null;
  let timer = null;
  let failure = null;
  const look = () => {
    try {
      db ??= open(file, { driver: adapterOf(queue.db).name });
      if (idle(db, queue.name)) return queue.stop();
    } catch (err) {
      failure = err;
      return queue.stop();
    }
    timer = setTimeout(look, CHECK_EVERY_MS);
  };
  timer = setTimeout(look, 0);
  return {
    close() {
      clearTimeout(timer);
      if (db !== null) close(db);
      if (failure !== null) throw failure;
    },
  };
}

/** Queue.drain (index.js): work(handler, opts) until idle; resolves with the summary. */
async function drain(queue, handler, opts) {
  if (typeof handler !== 'function') throw new TypeError(`drain: the handler must be a function, not ${String(handler)}`);
  const tally = new Tally();
  const working = queue.work(tally.counting(handler), opts);
  const file = queue.path || fileOf(queue.db);
  if (!file) return working.then(() => tally.summary(queue.db)); // work() rejects: it needs a file
  const watcher = watch(queue, file);
  try {
    await working;
  } finally {
    watcher.close();
  }
  return tally.summary(queue.db);
}

module.exports = { drain, idle };
