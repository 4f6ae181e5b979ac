'use strict';
// The three SQLite drivers tinyq's Node helper runs on, behind one small interface, so the
// rest of the helper never asks which one it has: better-sqlite3 (Node), node:sqlite's
// DatabaseSync (Node 22.13 and later, Bun) and bun:sqlite's Database (Bun).
//
// Each adapter: open(file, options), load(db, path), prepare(db, sql), get(stmt, args) (the first
// row as a plain object, or undefined), all(stmt, args), run(stmt, args),
// exec(db, sql), transaction(db, fn) (a function running fn in BEGIN IMMEDIATE, or in a
// savepoint inside the caller's transaction), inTransaction(db), close(db), file(db) (null for
// :memory:).

const NAMES = ['better-sqlite3', 'node:sqlite', 'bun:sqlite'];

/** Rows as plain objects: node:sqlite gives objects without a prototype. */
const plain = (row) => (row === undefined || row === null ? undefined : { ...row });
const memory = (file) => (!file || file === ':memory:' || file.startsWith('file::memory:') ? null : file);

const betterSqlite3 = {
  name: 'better-sqlite3',
  module: () => require('better-sqlite3'),
  owns: (db) => typeof db.pragma === 'function' && typeof db.transaction === 'function',
  open(file, options) {
    const Database = this.module();
    return new Database(file, options);
  },
  load: (db, file) => db.loadExtension(file),
  prepare: (db, sql) => db.prepare(sql),
  get: (stmt, args) => stmt.get(...args),
  all: (stmt, args) => stmt.all(...args),
  run: (stmt, args) => stmt.run(...args),
  exec: (db, sql) => db.exec(sql),
  transaction: (db, fn) => db.transaction(fn).immediate,
  inTransaction: (db) => db.inTransaction,
  close: (db) => db.close(),
  file: (db) => (db.memory ? null : memory(db.name)),
};

// bun:sqlite has better-sqlite3's transaction(); its get() answers null for no row. Its
// close() leaves the file open while a prepare()d statement lives: query() statements are
// the Database's own, finalized by close().
const bunSqlite = {
  ...betterSqlite3,
  name: 'bun:sqlite',
  module: () => require('bun:sqlite').Database,
  owns: (db) => typeof db.query === 'function' && 'filename' in db,
  prepare: (db, sql) => db.query(sql),
  get: (stmt, args) => plain(stmt.get(...args)),
  file: (db) => memory(db.filename),
};

// node:sqlite: extensions only with { allowExtension: true }; transactions by hand.
const nodeSqlite = {
  name: 'node:sqlite',
  module: () => require('node:sqlite').DatabaseSync,
  owns: (db) => typeof db.enableLoadExtension === 'function' && typeof db.prepare === 'function',
  open(file, options) {
    const DatabaseSync = this.module();
    return new DatabaseSync(file, { allowExtension: true, ...options });
  },
  load(db, file) {
    try {
      db.loadExtension(file);
    } catch (err) {
      if (/not allowed|allowExtension/i.test(err.message)) {
        err.message = `${err.message}: open the DatabaseSync with { allowExtension: true } to load tinyq`;
      }
      throw err;
    }
  },
  prepare: (db, sql) => db.prepare(sql),
  get: (stmt, args) => plain(stmt.get(...args)),
  all: (stmt, args) => stmt.all(...args).map(plain),
  run: (stmt, args) => stmt.run(...args),
  exec: (db, sql) => db.exec(sql),
  transaction(db, fn) {
    let depth = 0; // a savepoint when already inside one of ours or the caller's transaction
    return (...args) => {
      const nested = depth > 0 || !beginImmediate(db);
      if (nested) db.exec(`SAVEPOINT tinyq_${depth}`);
      depth += 1;
      try {
        const result = fn(...args);
        db.exec(nested ? `RELEASE tinyq_${depth - 1}` : 'COMMIT');
        return result;
      } catch (err) {
        if (nested) db.exec(`ROLLBACK TO tinyq_${depth - 1}; RELEASE tinyq_${depth - 1}`);
        else if (nodeInTransaction(db)) db.exec('ROLLBACK');
        throw err;
      } finally {
        depth -= 1;
      }
    };
  },
  inTransaction: (db) => nodeInTransaction(db),
  close: (db) => db.close(),
  file: (db) => memory(typeof db.location === 'function' ? db.location() : mainFile(db)),
};

// node:sqlite before Node 22.16 has neither isTransaction nor location(): SQLite itself
// answers both. BEGIN fails with this message, and changes nothing, only when a
// transaction is open.
const WITHIN = /cannot start a transaction within a transaction/;

/** BEGIN IMMEDIATE on a node:sqlite DatabaseSync: false when the caller has a transaction open. */
function beginImmediate(db) {
  if ('isTransaction' in db && db.isTransaction) return false;
  try {
    db.exec('BEGIN IMMEDIATE');
    return true;
  } catch (err) {
    if (WITHIN.test(err.message)) return false;
    throw err;
  }
}

/** Whether a node:sqlite DatabaseSync has a transaction open. Without isTransaction: a
 * deferred BEGIN takes no lock, and its COMMIT with nothing done in it changes nothing. */
function nodeInTransaction(db) {
  if ('isTransaction' in db) return db.isTransaction;
  try {
    db.exec('BEGIN');
  } catch (err) {
    if (WITHIN.test(err.message)) return true;
    throw err;
  }
  db.exec('COMMIT');
  return false;
}

/** The file of a DatabaseSync's main database ('' for an in-memory one), from SQLite. */
const mainFile = (db) => {
  const row = db.prepare('PRAGMA database_list').all().find((r) => r.name === 'main');
  return row ? row.file : null;
};

const ADAPTERS = { 'better-sqlite3': betterSqlite3, 'node:sqlite': nodeSqlite, 'bun:sqlite': bunSqlite };

/** The adapter of a driver named by `name` (one of NAMES), else an error naming it. */
function named(name) {
  const adapter = ADAPTERS[name];
  if (!adapter) throw new Error(`tinyq: driver must be one of ${NAMES.join(', ')}, not ${JSON.stringify(name)}`);
  return adapter;
}

/** True when the driver's module loads and opens a database here (better-sqlite3 loads in
 * Bun but refuses to open, and its native build is for one Node ABI). */
function usable(adapter) {
  try {
    adapter.close(adapter.open(':memory:'));
    return true;
  } catch {
    return false;
  }
}

let chosen = null;

/** The driver used when none is named: $TINYQ_DRIVER, else in Bun bun:sqlite, else
 * better-sqlite3 when it is installed and loads, else node:sqlite. */
function defaultAdapter() {
  if (chosen) return chosen;
  if (process.env.TINYQ_DRIVER) return (chosen = named(process.env.TINYQ_DRIVER));
  const order = process.versions.bun ? [bunSqlite] : [betterSqlite3, nodeSqlite];
  chosen = order.find(usable);
  if (!chosen) throw new Error('tinyq: no SQLite driver: npm install better-sqlite3, or use Node 22.13+ (node:sqlite) or Bun');
  return chosen;
}

const byDb = new WeakMap(); // Database -> its adapter, once recognised

/** The adapter of a Database object of any of the three drivers, else an error. */
function adapterOf(db) {
  let adapter = byDb.get(db);
  if (adapter) return adapter;
  if (db === null || typeof db !== 'object') throw new Error(`tinyq: not a Database: ${String(db)}`);
  // bun:sqlite's Database has better-sqlite3's transaction(), so it is asked first.
  adapter = [bunSqlite, betterSqlite3, nodeSqlite].find((a) => a.owns(db));
  if (!adapter) {
    throw new Error(`tinyq: not a Database of ${NAMES.join(', ')}: ${db.constructor && db.constructor.name}`);
  }
  byDb.set(db, adapter);
  return adapter;
}

/** A new connection with `driver` (a name; the default when undefined). */
function openWith(driver, file, options) {
  const adapter = driver === undefined ? defaultAdapter() : named(driver);
  const db = adapter.open(file, options);
  byDb.set(db, adapter);
  return db;
}

module.exports = { NAMES, adapterOf, openWith, named };
