'use strict';
// Workflows in a handler (run.waitFor, run.waitSignal, run.sleep, in run.js): each returns
// what it waited for, or ends the attempt with a 'wait' or 'snooze' outcome; the job runs
// again from the top later, and its kept steps bring it back to the same call, which then
// returns. The decisions are here, as in Python's _waits.py.

// Each id of a JSON array with its job (tq_get: NULL when there is none).
const JOBS_OF = 'SELECT value AS id, tq_get(value) AS job FROM json_each(?)';
const NOW = 'SELECT tq_now()';
// The jobs a job waits or waited for: linked to it by an edge.
const LINKED = 'SELECT id FROM tq_deps(?)';
// A step as a row: a signal sent without a payload keeps the step with a NULL value, which
// tq_step_get cannot tell from no step at all (a timeout).
const STEP_ROW = 'SELECT value FROM tq_steps(?) WHERE name = ?';

const UNITS_MS = { ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000 };

/** A duration as integer ms: a number of ms, or text such as '30s' or '1.5h'. */
function durationMs(value, what) {
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return Math.floor(value);
  const match = typeof value === 'string' && /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(value);
  if (!match) throw new TypeError(`${what}: not a duration: ${JSON.stringify(value)} (ms, or text such as '30s', '10m', '7d')`);
  return Math.floor(Number(match[1]) * UNITS_MS[match[2]]);
}

/** waitFor's ids as an array of text (one id alone is an array of one). */
function waitIds(ids) {
  const list = typeof ids === 'string' ? [ids] : [...ids];
  if (!list.every((id) => typeof id === 'string')) throw new TypeError(`waitFor: job ids are text, not ${JSON.stringify(list)}`);
  return list;
}

/** The results of `ids` (in order) once all are done and linked to this job; else the
 * outcome that ends the attempt: ['wait', ...] for those not finished or not linked yet, or
 * ['fail', ...] (a dependency's default after_failed) when one failed for good or is gone (a
 * cancelled job is removed, with its edges: it cannot be told from an id never added).
 * `found`: id -> tq_get text; `linked`: the ids of tq_deps(this job). A job waited for is
 * kept while this one has not finished only through its edge (DEP-01), so jobs done before
 * the first waitFor are linked too by a 'wait' for them: the extension links done jobs and
 * makes this job due again at once, and the replay finds them linked and returns. */
function afterResults(ids, found, linked) {
  const jobs = new Map([...found].map(([id, text]) => [id, text === null ? null : JSON.parse(text)]));
  for (const id of ids) {
    const job = jobs.get(id);
    if (job === null) return { outcome: ['fail', `dependency '${id}' is gone: cancelled, or never added`] };
    if (job.state === 'failed') return { outcome: ['fail', `dependency '${id}' failed: ${job.error}`] };
  }
  const waited = [...new Set(ids.filter((id) => jobs.get(id).state !== 'done' || !linked.has(id)))];
  if (waited.length) return { outcome: ['wait', JSON.stringify({ after: waited })] };
  return { results: ids.map((id) => jobs.get(id).result ?? null) };
}

/** The steps of a signal wait: the payload (tq_signal keeps it as `signal:<name>`), and when
 * the wait ends (kept before it waits, so that a replay knows it waited). */
function signalSteps(name) {
  if (typeof name !== 'string' || name === '') throw new TypeError(`waitSignal: a signal's name is text, not ${JSON.stringify(name)}`);
  return [`signal:${name}`, `until:signal:${name}`];
}

/** With no payload kept: null (timed out) once `until` has passed, else the 'wait' outcome
 * for the signal, for what is left of the timeout (`until` null: no timeout). */
function signalWait(name, until, now) {
  if (until === null) return ['wait', JSON.stringify({ signal: name })];
  if (now >= until) return null;
  return ['wait', JSON.stringify({ signal: name, timeout: until - now })];
}

function sleepStep(name) {
  if (typeof name !== 'string' || name === '') throw new TypeError(`sleep: a sleep's name is text, not ${JSON.stringify(name)}`);
  return `sleep:${name}`;
}

module.exports = { JOBS_OF, LINKED, NOW, STEP_ROW, durationMs, waitIds, afterResults, signalSteps, signalWait, sleepStep };
