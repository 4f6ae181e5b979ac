// The driver scenario through better-sqlite3 (node/node_modules): node better-sqlite3.mjs SO SCENARIO DB
import { createRequire } from 'node:module';
import { runScenario } from './scenario.mjs';

const require = createRequire(new URL('../../../node/', import.meta.url));
const Database = require('better-sqlite3');
const { version } = require('better-sqlite3/package.json');

runScenario('better-sqlite3', (so, path) => {
  const db = new Database(path);
  db.loadExtension(so);
  return {
    rows: (sql, args) => db.prepare(sql).raw(true).all(...args),
    driver: `better-sqlite3 ${version}, Node ${process.versions.node}`,
  };
}, process.argv.slice(2));
