'use strict';
// Shared by node/test/*.test.js (kept outside test/, where node --test would run it as a test):
// temporary database files, removed when the test file ends.
const { after } = require('node:test');
const fs = require('fs');
const os = require('os');
const path = require('path');

const dirs = [];
after(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

/** A path for a new database file in a fresh temporary folder. */
function tempDb() {
  dirs.push(fs.mkdtempSync(path.join(os.tmpdir(), 'tinyq-node-')));
  return path.join(dirs[dirs.length - 1], 'q.db');
}

module.exports = { tempDb };
