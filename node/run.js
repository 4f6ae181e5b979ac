'use strict';
// What a handler gets besides its payload (Run) and what it throws to end an attempt
// (Outcome, Cancelled).
const { adapterOf } = require('./drivers.js');
const { decode, encode, errorText, isBusy, one, rows } = require('./sql.js');
const waits = require('./waits.js');
const otel = require('./otel.js');

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

// Why an attempt is over for its worker while code of the handler may still run (a callback
// it started, or the handler itself once abandoned): what run.progress / run.step say.
const ENDED = {
  finished: 'its handler has finished, so the job is settled',
  abandoned: "stop()'s grace ended while it ran: abandoned, the job runs again once its lease has run out",
};

class Run {
  constructor(db, job, writes, connections) {
    this._db = db; // the worker's connection: tinyq's reads, and progress
    this._writes = writes; // the worker's group commit (group.js), on that connection
    this._connections = connections; // where run.db comes from (connections.js)
    this._own = null; // run.db, once the handler asked for it
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
    this._ended = null; // why this attempt is over for the worker (ENDED)
    this._toldEnded = false;
    this._steps = new Map(); // answers this attempt read or kept, as stored
    this._waitNames = new Set(); // the sleep: and signal: steps this attempt's waits used
  }

  /** A connection of this handler's own, for its SQL (opened on first use): a transaction it
   * opens there holds its own writes only (its step puts and progress go in it while it is
   * open); the worker's writes never do. */
  get db() {
    if (this._own === null) this._own = this._connections.acquire();
    return this._own;
  }

  /** run.db, when the handler has a transaction open on it (else null). */
  _inOwnTransaction() {
    return this._own !== null && adapterOf(this._own).inTransaction(this._own) ? this._own : null;
  }

  /** The handler has ended: run.db goes back to the worker. True when a transaction was left
   * open on it, now rolled back. */
  _releaseDb() {
    const own = this._own;
    this._own = null;
    return own !== null && this._connections.release(own);
  }

  /** The stored answer of the step `name` when it is known without asking the store, else
   * undefined: an answer this attempt read or kept never changes (the first one kept wins),
   * and on a job's first attempt none is kept but by the attempt itself (an earlier
   * attempt's, a signal's or a kept wait's steps go to a job that is then claimed again, so
   * at attempt 2 or later). */
  _keptHere(name) {
    if (this._steps.has(name)) return this._steps.get(name);
    return this.attempt === 1 ? null : undefined;
  }

  /** stop()'s grace ended while this attempt ran: the worker renews it no more and settles
   * nothing of it. Returns whether it still held its job. */
  _abandon() {
    const held = !this.cancelled;
    this._cancel();
    this._end('abandoned');
    return held;
  }

  _end(why) {
    if (this._ended === null) this._ended = why;
  }

  /** True when the attempt is over (ENDED): progress is not written; said once. */
  _progressAfterEnd() {
    if (this._ended === null) return false;
    if (!this._toldEnded) {
      this._toldEnded = true;
      console.warn(`tinyq: run.progress for job ${this.id} (attempt ${this.attempt}) after the attempt ended: `
        + `${ENDED[this._ended]}; not recorded, returns false`);
    }
    return true;
  }

  _cancel() {
    if (!this.cancelled) {
      this.cancelled = true;
      this._abort.abort();
    }
  }

  /** The answer kept under `name` by any attempt; else `await fn()`, kept as JSON (an
   * answer JSON cannot hold fails the job for good: stepText). */
  async step(name, fn) {
    if (this._ended !== null) throw this._over(name);
    let kept = this._keptHere(name);
    if (kept === undefined) kept = one(this._inOwnTransaction() || this._db, 'SELECT tq_step_get(?, ?)', this.id, name);
    if (kept === null) {
      const value = stepText(name, await otel.step(this, name, fn)); // a child span of the attempt's
      // abandoned by stop({ timeout }) meanwhile: the worker's connections may be closed
      if (this._ended !== null) throw this._over(name);
      const own = this._inOwnTransaction(); // the handler's transaction: the put is in it
      kept = own !== null
        ? one(own, 'SELECT tq_step_put(?, ?, ?, ?)', this.id, this.attempt, name, value)
        : await this._writes.call('tq_step_put', this.id, this.attempt, name, value).catch((err) => {
          throw this._ended !== null ? this._over(name) : err; // the worker stopped before it committed
        }); // once committed
      if (kept === null) {
        this._cancel();
        throw new Cancelled(`step "${name}" not kept: attempt ${this.attempt} of ${this.id} no longer holds the job`);
      }
    }
    this._steps.set(name, kept);
    return decode(kept);
  }

  /** What run.step throws once the attempt is over (ENDED). */
  _over(name) {
    return new Cancelled(`step "${name}" not kept: attempt ${this.attempt} of ${this.id} is over (${ENDED[this._ended]})`);
  }

  /** Record progress (text as is, anything else as JSON); false when the job is gone
   * (cancelled: run.cancelled), or when the attempt is over (code the handler started calling
   * it after the handler returned: a warning says so; cancelled stays as it was). */
  progress(value) {
    if (this._progressAfterEnd()) return false;
    const args = [this.id, this.attempt, encode(value)];
    let ok;
    try {
      ok = one(this._inOwnTransaction() || this._db, 'SELECT tq_progress(?, ?, ?)', ...args) === 1;
    } catch (err) {
      if (!isBusy(err)) throw err;
      // the store is locked (the worker's connection waits a few ms at most): written with the
      // worker's next group commit instead, and true meanwhile, as far as the attempt knows
      this._writes.call('tq_progress', ...args).then((n) => n === 1 || this._cancel(), () => {});
      return !this.cancelled;
    }
    if (!ok) this._cancel();
    return ok;
  }

  // Workflows (waits.js): each returns what it waited for, or ends the attempt ('wait' or
  // 'snooze', the worker's place freed) and the next attempt's replay returns it here.

  /** The results of the jobs `ids`, in order, once every one is done; until then the job
   * waits for them (blocked) and runs again when they have finished. One that failed for
   * good or was cancelled fails this job, its error naming it. Jobs already done the first
   * time are linked to this job (a 'wait' that makes it due again at once), so that they
   * are kept until it has finished (DEP-01). */
  async waitFor(ids) {
    const list = waits.waitIds(ids);
    const found = new Map(rows(this._db, waits.JOBS_OF, JSON.stringify(list)).map((r) => [r.id, r.job]));
    const linked = new Set(rows(this._db, waits.LINKED, this.id).map((r) => r.id));
    const { outcome, results } = waits.afterResults(list, found, linked);
    if (outcome) throw new Outcome(...outcome);
    return results;
  }

  /** The payload of the signal `name` (tq_signal); until it comes the job waits for it
   * (blocked), at most `timeout` (a duration; omitted: for ever), then null. A second wait
   * of one name in a job throws (_newWait). */
  async waitSignal(name, timeout) {
    const [payloadStep, untilStep] = waits.signalSteps(name);
    this._newWait('waitSignal', payloadStep, name);
    const [kept] = rows(this._db, waits.STEP_ROW, this.id, payloadStep);
    if (kept) return decode(kept.value);
    const now = one(this._db, waits.NOW);
    const until = await this.step(untilStep, () => (timeout == null ? null : now + waits.durationMs(timeout, 'waitSignal')));
    const outcome = waits.signalWait(name, until, now);
    if (outcome) throw new Outcome(...outcome);
    return null;
  }

  /** A durable sleep: resolves once `duration` has passed since the first attempt that
   * reached it (its wake time is the step `sleep:<name>`); until then the job snoozes. A
   * second sleep of one name in a job throws (_newWait). */
  async sleep(name, duration) {
    const now = one(this._db, waits.NOW);
    const step = waits.sleepStep(name);
    this._newWait('sleep', step, name);
    const until = await this.step(step, () => now + waits.durationMs(duration, 'sleep'));
    if (now < until) throw new Outcome('snooze', until - now);
  }

  /** A sleep or signal wait keeps its state in steps named after it, so a second one of
   * the same name in a job would return at once (the first one's wake time or timeout):
   * refused. Counted per attempt: a replay makes the same calls again, each once. */
  _newWait(call, step, name) {
    if (this._waitNames.has(step)) {
      throw new Error(`run.${call}: the name '${name}' was used already by this job: each sleep and signal wait `
        + `needs a name of its own (e.g. '${name}-' + n)`);
    }
    this._waitNames.add(step);
  }

  /** End this attempt; run again after `delay` (default: the backoff). Counts. */
  retry(delay) {
    throw new Outcome('retry', checkedDelay('retry', delay));
  }

  /** End this attempt; run again after `delay`. Does not count against the budget. */
  snooze(delay) {
    throw new Outcome('snooze', checkedDelay('snooze', delay));
  }

  /** Fail the job for good now, with `reason` as its error. */
  fail(reason) {
    throw new Outcome('fail', String(reason));
  }
}

/** A step's answer as stored JSON. One that has none (a BigInt, a circular object) fails the
 * job for good: its function has run, and a retry would run it (and its side effect) again;
 * a placeholder kept instead would give a replay something else than this attempt got. */
function stepText(name, answer) {
  try {
    return JSON.stringify(answer ?? null) ?? 'null'; // a function or a symbol: null, as in an array
  } catch (err) {
    throw new Outcome('fail', `run.step '${name}': its answer cannot be stored as JSON (${errorText(err)}): `
      + 'the job fails rather than run the step again (return what JSON can hold: a BigInt as text, no cycles)');
  }
}

/** A delay as tq_settle takes it (integer ms or text such as '2.5s'), refused here, where the
 * handler's author sees it, when it is not: 0.5 is surely seconds, and tinyq's numbers are ms. */
function checkedDelay(name, delay) {
  if (delay === undefined || delay === null || typeof delay === 'string' || Number.isInteger(delay)) return delay;
  throw new TypeError(`run.${name}(delay): delay must be integer ms or text such as '2.5s', not ${String(delay)}`);
}

module.exports = { Run, Outcome, Cancelled };
