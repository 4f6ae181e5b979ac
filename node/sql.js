'use strict';
// Loading tinyq into better-sqlite3, and the small SQL helpers every part of the Node helper
// uses: values bound as SQLite wants them, statements prepared once per Database.
const fs = require('fs');
const path = require('path');
const Database = require('better-sqlite3');

// -- loading ---------------------------------------------------------------------------

/** The build the npm package carries for a platform and architecture (process.platform,
 * process.arch: linux-x64, linux-arm64). */
function packagedPath(platform, arch) {
  return path.join(__dirname, 'prebuilds', `${platform}-${arch}`, 'tinyq.so');
}

/** Where the extension is: $TINYQ_EXT, else the build packaged for this machine
 * (prebuilds/, in the npm package), else the repository's ../dist/tinyq.so. */
function extensionPath() {
  if (process.env.TINYQ_EXT) return process.env.TINYQ_EXT;
  const prebuilds = path.join(__dirname, 'prebuilds');
  if (fs.existsSync(prebuilds)) {
    const packaged = packagedPath(process.platform, process.arch);
    if (fs.existsSync(packaged)) return packaged;
    throw new Error(`tinyq has no build for ${process.platform}-${process.arch} (this package has ` +
      `${fs.readdirSync(prebuilds).join(', ')}): build tinyq from source and set TINYQ_EXT to it`);
  }
  for (const suffix of ['.so', '.dylib', '.dll']) {
    const candidate = path.join(__dirname, '..', 'dist', 'tinyq' + suffix);
    if (fs.existsSync(candidate)) return candidate;
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

module.exports = { extensionPath, packagedPath, load, open, one, rows, encode, decode, options, errorText };
