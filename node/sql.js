'use strict';
// Loading tinyq into a Database of any driver of drivers.js, and the small SQL helpers every
// part of the Node helper uses: values bound as SQLite wants them, statements prepared once per
// Database, transactions.
const fs = require('fs');
const path = require('path');
const util = require('util');
const { adapterOf, openWith } = require('./drivers.js');

// -- loading ---------------------------------------------------------------------------

/** The build the npm package carries for a platform and architecture (process.platform,
 * process.arch: linux-x64, linux-arm64; linux-x64-musl where the C library is musl, whose
 * Node reports no glibc version; win32-x64, whose build is tinyq.dll). */
function packagedPath(platform, arch) {
  const report = platform === 'linux' && process.report ? process.report.getReport() : null;
  const musl = report !== null && !report.header.glibcVersionRuntime;
  const file = platform === 'win32' ? 'tinyq.dll' : 'tinyq.so';
  return path.join(__dirname, 'prebuilds', `${platform}-${arch}${musl ? '-musl' : ''}`, file);
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

/** Load tinyq into a Database (better-sqlite3, node:sqlite or bun:sqlite); returns it. */
function load(db) {
  adapterOf(db).load(db, extensionPath());
  return db;
}

/** A Database the way a worker wants one: tinyq loaded, WAL, synchronous=FULL,
 * busy_timeout 5000 ms. `options.driver` names the driver (drivers.js: the default is the
 * one installed); the other options go to the driver's constructor. */
function open(file, options) {
  const { driver, ...driverOptions } = options || {};
  const db = openWith(driver, file, driverOptions);
  try {
    load(db);
    exec(db, 'PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL');
    exec(db, 'PRAGMA synchronous = FULL'); // power-safe commits: docs/guarantees.md
  } catch (err) {
    close(db);
    throw err;
  }
  return db;
}

const exec = (db, sql) => adapterOf(db).exec(db, sql);
const close = (db) => adapterOf(db).close(db);
/** The database file of a Database, or null for an in-memory one. */
const fileOf = (db) => adapterOf(db).file(db);
/** `fn` as a function that runs in a BEGIN IMMEDIATE transaction (a savepoint when nested). */
const transaction = (db, fn) => adapterOf(db).transaction(db, fn);

// -- values ----------------------------------------------------------------------------

// better-sqlite3 and node:sqlite bind every JS number as a REAL (10 arrives as 10.0), and
// tinyq's integer arguments (n, attempt, since) accept only INTEGER. So whole numbers are bound as BigInt.
function arg(value) {
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  if (typeof value === 'boolean') return value ? 1n : 0n;
  if (value instanceof Date) return BigInt(value.getTime());
  return value === undefined ? null : value;
}

// Prepared statements, kept per Database (a prepare costs more than most of tinyq's calls).
const statements = new WeakMap();

function prepared(db, adapter, sql) {
  let cache = statements.get(db);
  if (!cache) statements.set(db, (cache = new Map()));
  let stmt = cache.get(sql);
  if (!stmt) cache.set(sql, (stmt = adapter.prepare(db, sql)));
  return stmt;
}

/** The first column of the first row (undefined when there is none). */
function one(db, sql, ...args) {
  const adapter = adapterOf(db);
  const row = adapter.get(prepared(db, adapter, sql), args.map(arg));
  return row === undefined ? undefined : Object.values(row)[0];
}

/** Every row, as plain objects. */
function rows(db, sql, ...args) {
  const adapter = adapterOf(db);
  return adapter.all(prepared(db, adapter, sql), args.map(arg));
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

/** A JSON options object of the keys that are set (Dates as ms), or null when none is. An
 * invalid Date or a number that is not finite (NaN, Infinity: JSON would make them null,
 * "absent") is an error naming `what` (the method), the option and the value. */
function options(object, what = 'options') {
  if (object === undefined || object === null) return null;
  if (typeof object !== 'object' || Array.isArray(object)) {
    throw new TypeError(`${what}: options must be an object, not ${util.inspect(object)}`);
  }
  const out = {};
  for (const [key, value] of Object.entries(object)) {
    if (value === undefined || value === null) continue;
    if (value instanceof Date && Number.isNaN(value.getTime())) {
      throw new TypeError(`${what}: option ${key} is an invalid Date`);
    }
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new TypeError(`${what}: option ${key} must be a finite number, not ${value}`);
    }
    out[key] = value instanceof Date ? value.getTime() : value;
  }
  return Object.keys(out).length ? JSON.stringify(out) : null;
}

/** "Name: message" for a thrown Error (the class name when `name` was left as "Error");
 * only "Name" with errors = 'class', for messages that should not travel with the job.
 * Anything else thrown (`throw {code: 42}`) is shown as JSON, not as "[object Object]". */
function errorText(err, errors = 'message') {
  if (!(err instanceof Error)) return errors === 'class' ? typeof err : thrownText(err);
  let name = err.name || 'Error';
  if (name === 'Error' && err.constructor && err.constructor.name) name = err.constructor.name;
  return err.message && errors !== 'class' ? `${name}: ${err.message}` : name;
}

/** A thrown value that is not an Error, as text: JSON where it has one, else String(). */
function thrownText(value) {
  if (value !== null && typeof value === 'object') {
    try {
      const text = JSON.stringify(value);
      if (text !== undefined) return text;
    } catch (_) { /* a cycle or a BigInt: String() below */ }
  }
  return String(value);
}

/** A busy or locked store (another connection holds the write lock). */
function isBusy(err) {
  return /SQLITE_BUSY|SQLITE_LOCKED/.test(err && err.code) || /locked|busy/i.test(err && err.message);
}

module.exports = {
  extensionPath, packagedPath, load, open, exec, close, fileOf, transaction, one, rows, encode, decode, options, errorText,
  isBusy,
};
