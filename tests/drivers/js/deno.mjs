// The driver scenario through node:sqlite under Deno:
//   deno run --allow-read --allow-write --allow-ffi deno.mjs SO SCENARIO DB
import { DatabaseSync } from 'node:sqlite';
import { runScenario } from './scenario.mjs';

runScenario('deno', (so, path) => {
  const db = new DatabaseSync(path, { allowExtension: true });
  db.loadExtension(so);
  return {
    rows: (sql, args) => {
      const stmt = db.prepare(sql);
      const names = stmt.columns().map((c) => c.name);
      return stmt.all(...args).map((row) => names.map((n) => row[n]));
    },
    driver: `node:sqlite, Deno ${Deno.version.deno}`,
  };
}, Deno.args);
