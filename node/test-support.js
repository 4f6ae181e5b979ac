'use strict';
// Shared by node/test/*.test.js (kept outside test/, where node --test would run it as a test):
// temporary database files, removed when the test file ends, and SQL on a Database of whichever
// driver the tests run on ($TINYQ_DRIVER, else the default: drivers.js).
const { after } = require('node:test');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { openWith } = require('./drivers.js');
const { exec, one, rows, transaction } = require('./sql.js');

const dirs = [];
after(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

/** A path for a new database file in a fresh temporary folder. */
function tempDb() {
  dirs.push(fs.mkdtempSync(path.join(os.tmpdir(), 'tinyq-node-')));
  return path.join(dirs[dirs.length - 1], 'q.db');
}

/** A Database of the tests' driver, without tinyq. */
const plainDb = (file) => openWith(process.env.TINYQ_DRIVER, file);

module.exports = { tempDb, plainDb, value: one, all: rows, exec, transaction };
