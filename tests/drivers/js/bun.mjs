// The driver scenario through Bun's bun:sqlite: bun bun.mjs SO SCENARIO DB
import { Database } from 'bun:sqlite';
import { runScenario } from './scenario.mjs';

runScenario('bun', (so, path) => {
  const db = new Database(path);
  db.loadExtension(so);
  return {
    rows: (sql, args) => db.query(sql).values(...args),
    driver: `bun:sqlite, Bun ${Bun.version}`,
  };
}, process.argv.slice(2));
