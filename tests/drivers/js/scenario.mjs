// The driver scenario (tests/drivers/scenario.json), shared by the JavaScript runners: each one
// only opens its driver and says how to run a statement (better-sqlite3.mjs, bun.mjs, deno.mjs).
import { readFileSync } from 'node:fs';
import process from 'node:process';

// A cell as the scenario writes it; a driver that hands back BigInts means the same integer.
const cell = (v) => (typeof v === 'bigint' ? Number(v) : v);
const same = (want, got) =>
  want.length === got.length &&
  want.every((row, i) => row.length === got[i].length && row.every((c, j) => c === cell(got[i][j])));

// The first step that does not answer as written, as a reason; null when all do.
function play(db, steps) {
  for (const step of steps) {
    let rows;
    try {
      rows = db.rows(step.sql, step.args);
    } catch (e) {
      if (step.error !== undefined && String(e.message).includes(step.error)) continue;
      return `${step.name}: unexpected error ${e.message}`;
    }
    if (step.error !== undefined) return `${step.name}: no error, got ${JSON.stringify(rows)}`;
    if (!same(step.rows, rows)) {
      return `${step.name}: expected ${JSON.stringify(step.rows)}, got ${JSON.stringify(rows.map((r) => r.map(cell)))}`;
    }
  }
  return null;
}

// open(so, db) returns { rows(sql, args) -> arrays of cells, driver: its name and version }.
export function runScenario(name, open, [so, scenario, path]) {
  let reason;
  let db;
  try {
    db = open(so, path);
    reason = play(db, JSON.parse(readFileSync(scenario, 'utf8')).steps);
  } catch (e) {
    reason = `${e.name}: ${e.message}`;
  }
  if (reason) {
    console.log(`${name}: failed: ${reason}`);
    process.exitCode = 1;
  } else {
    console.log(`${name}: passed (SQLite ${db.rows('SELECT sqlite_version()', [])[0][0]}; ${db.driver})`);
  }
}
