'use strict';
// The handlers' own connections (run.db): one per running handler that uses run.db, opened on
// its first use and kept for the next handlers once it ends. A handler's transaction on its
// run.db therefore holds its own writes only: the worker's settles, claims and renewals, and
// the other handlers' writes, go on the worker's connection (group.js) and wait for the lock
// without holding the event loop (docs/design.md, "A handler's transaction").
const { adapterOf } = require('./drivers.js');
const { close, exec, open } = require('./sql.js');

// run.db waits this long at most for a lock held elsewhere, synchronously (tinyq.open's 5 s
// would freeze the event loop, also for a lock that another handler of this very thread holds
// in its transaction, which cannot end meanwhile); then the handler's statement fails busy. A
// handler that wants to wait longer sets PRAGMA busy_timeout on it, or retries.
const BUSY_MS = 50;

class Connections {
  constructor(file, driver) {
    this.file = file;
    this.driver = driver;
    this.idle = [];
    this.closed = false;
  }

  /** A connection for one handler: an idle one, else a new one (tinyq loaded, as open()). */
  acquire() {
    const idle = this.idle.pop();
    if (idle) return idle;
    const db = open(this.file, { driver: this.driver });
    exec(db, `PRAGMA busy_timeout = ${BUSY_MS}`);
    return db;
  }

  /** The handler has ended: its connection goes back to the idle ones (closed once the worker
   * has stopped). Returns true when a transaction was still open on it: it is rolled back. */
  release(db) {
    let rolledBack = adapterOf(db).inTransaction(db);
    if (rolledBack) {
      try {
        exec(db, 'ROLLBACK');
      } catch (_) {
        rolledBack = false; // there was none (node:sqlite before 22.16 cannot tell)
      }
    }
    if (this.closed) close(db);
    else this.idle.push(db);
    return rolledBack;
  }

  close() {
    this.closed = true;
    for (const db of this.idle.splice(0)) close(db);
  }
}

module.exports = { Connections };
