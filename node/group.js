'use strict';
// Group commit (docs/design.md): the writes that a worker's handlers make in one turn of the
// event loop (their step puts, the settles of those that ended, the next claim) go to the
// store in one transaction, one synced commit for all of them. Each write runs in a savepoint
// of its own: one that fails is rolled back alone and its caller's promise rejects, while the
// others commit. A promise resolves only once the transaction that holds its write has
// committed: a kept step is on disk before the handler goes on.
//
// Calls of one tinyq function that follow each other in a group go to the store as one
// statement over a JSON array of their arguments (one statement instead of hundreds); if it
// fails, it is rolled back and its calls run one by one, each in its savepoint.
//
// A busy store never holds the event loop: the worker's connection has a busy timeout of a few
// ms (worker.js), and a group that meets a lock held elsewhere (another process, the app's
// transaction in this process, a handler's transaction on its run.db) stays pending and is
// tried again after a backoff, the event loop turning meanwhile. Its writes are never dropped
// for a busy store, however long; the writes asked for meanwhile join it.
const { adapterOf } = require('./drivers.js');
const { exec, isBusy, one, rows, transaction } = require('./sql.js');

const BACKOFF_MAX_MS = 50; // a busy group is tried again after 1, 2, 4 ... 50 ms
const WARN_AFTER_MS = 5000; // ... and a warning says so once it has waited this long

/** The writes of one connection, committed together once per turn of the event loop
 * (setImmediate: after the timers and I/O callbacks of this turn have asked for theirs). */
class GroupCommit {
  constructor(db) {
    this.db = db;
    this.pending = [];
    this.scheduled = false;
    this.retry = null; // the timer of a busy group's next try
    this.tries = 0; // busy tries of the pending group
    this.busySince = null; // when the store was first found busy (Date.now())
  }

  /** `fn(db)` in the next group: resolves with its value once the group has committed. */
  write(fn) {
    return this._add({ fn, name: null, args: null });
  }

  /** `fn(db)` committed now (the worker loop's settles and claim: its turn is when it
   * commits). The handlers' writes already pending (step puts) commit first, on their own,
   * and their handlers go on before `fn`'s commit (one turn of the event loop): a claim of a
   * thousand jobs holds the thread for a while, and the handlers waiting for their puts would
   * wait for it too, while the claim waits for nobody. */
  async writeNow(fn) {
    if (this.pending.length > 0) {
      this.flush();
      await new Promise((resolve) => setImmediate(resolve));
    }
    const done = this.write(fn);
    this.flush();
    return done;
  }

  /** `SELECT name(args...)`'s value, in the next group, beside the calls of its neighbours. */
  call(name, ...args) {
    return this._add({ fn: (db) => callAlone(db, name, args), name, args });
  }

  _add(write) {
    return new Promise((resolve, reject) => {
      Object.assign(write, { resolve, reject });
      this.pending.push(write);
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Commits every pending write now, and settles their promises; when the store is busy,
   * they stay pending for the next try. */
  flush() {
    this.scheduled = false;
    if (this.closed || this.retry !== null || this.pending.length === 0) return; // a busy group waits for its timer
    const group = this.pending.splice(0);
    if (!commitGroup(this.db, group)) {
      this.pending.unshift(...group);
      this._later();
      return;
    }
    this.tries = 0;
    this.busySince = null;
    for (const write of group) {
      if (write.error !== undefined) write.reject(write.error);
      else write.resolve(write.value);
    }
  }

  /** Before the connection closes: a write still pending fails (the worker has stopped). */
  close() {
    this.closed = true;
    clearTimeout(this.retry);
    for (const write of this.pending.splice(0)) write.reject(new Error('tinyq: the worker has stopped'));
  }

  _later() {
    const now = Date.now();
    if (this.busySince === null) this.busySince = now;
    const waited = now - this.busySince;
    if (waited >= WARN_AFTER_MS && this.busySince !== this.warnedFor) {
      this.warnedFor = this.busySince; // once per busy spell
      console.warn(`tinyq: the store has been locked by another connection for ${waited} ms: `
        + `${this.pending.length} writes of the worker wait for it (none is dropped)`);
    }
    const backoff = Math.min(BACKOFF_MAX_MS, 2 ** Math.min(this.tries++, 6));
    this.retry = setTimeout(() => {
      this.retry = null;
      this.flush();
    }, backoff);
  }
}

/** A write's error that ended the whole transaction (a full disk, say): nothing of the
 * group is kept, so every write of it gets the error. */
class TransactionEnded extends Error {
  constructor(cause) {
    super(cause && cause.message);
    this.cause = cause;
  }
}

/** Every write in a savepoint of one transaction; sets each write's value or error, and
 * returns true. When the store is busy, nothing is written (the driver's transaction() has
 * rolled it back) and it returns false: the caller tries again later. When the
 * transaction itself fails otherwise (the commit, or a write's error that ended it), every
 * write gets that error: none of them was committed. */
function commitGroup(db, group) {
  const body = transaction(db, () => {
    for (const run of runsOf(group)) {
      if (run.length > 1) runMerged(db, run);
      else runInSavepoint(db, run[0]);
    }
  });
  for (const write of group) write.value = write.error = undefined;
  try {
    body();
    return true;
  } catch (err) {
    const ended = err instanceof TransactionEnded;
    if (!ended && isBusy(err)) return false;
    for (const write of group) {
      write.value = undefined;
      write.error = ended ? err.cause : err;
    }
    return true;
  }
}

function runInSavepoint(db, write) {
  exec(db, 'SAVEPOINT tinyq_write');
  try {
    write.value = write.fn(db);
  } catch (err) {
    rollBackTo(db, err);
    write.error = err;
    return;
  }
  exec(db, 'RELEASE tinyq_write');
}

/** Calls of one function in one statement, in a savepoint; if it fails, one by one. */
function runMerged(db, run) {
  exec(db, 'SAVEPOINT tinyq_write');
  let values;
  try {
    values = rows(db, mergedSql(run[0].name, run[0].args.length), JSON.stringify(run.map((w) => w.args)))
      .map((row) => row.value);
  } catch (err) {
    rollBackTo(db, err);
    for (const write of run) runInSavepoint(db, write);
    return;
  }
  exec(db, 'RELEASE tinyq_write');
  run.forEach((write, i) => { write.value = values[i]; });
}

function rollBackTo(db, err) {
  if (!adapterOf(db).inTransaction(db)) throw new TransactionEnded(err);
  exec(db, 'ROLLBACK TO tinyq_write');
  exec(db, 'RELEASE tinyq_write');
}

/** The writes in order, neighbours that call the same function together. */
function runsOf(group) {
  const runs = [];
  for (const write of group) {
    const last = runs[runs.length - 1];
    if (last && write.name !== null && last[0].name === write.name) last.push(write);
    else runs.push([write]);
  }
  return runs;
}

function callAlone(db, name, args) {
  return one(db, `SELECT ${name}(${args.map(() => '?').join(', ')})`, ...args);
}

/** One call per element of a JSON array of argument lists, in the array's order. */
function mergedSql(name, arity) {
  const args = Array.from({ length: arity }, (_, i) => `json_extract(value, '$[${i}]')`).join(', ');
  return `SELECT ${name}(${args}) AS value FROM json_each(?) ORDER BY key`;
}

module.exports = { GroupCommit, commitGroup };
