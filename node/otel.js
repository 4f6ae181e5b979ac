'use strict';
// OpenTelemetry, when the application has installed `@opentelemetry/api`: trace context in
// meta, attempt spans, as python/tinyq/_otel.py. Only the API: spans go to whatever tracer
// provider the application set up (none: the API's no-op one), never an SDK or exporter of
// tinyq's own. Without the package every function here does nothing.
//
// - traced(opts): add()'s options with the active span's trace context in their meta
//   (W3C `traceparent`, and `tracestate` when there is one);
// - attempt(queue, run, fn): fn() run inside the consumer span `<queue> process`, child of
//   the context the add carried; ended(outcome, value) then gives it its status;
// - step(run, name, fn): a kept step's computation as a child span `step <name>`.

let api = null;
try {
  api = require('@opentelemetry/api'); // optional: tinyq works the same without it
} catch (err) {
  if (err.code !== 'MODULE_NOT_FOUND') throw err;
}

const VERSION = require('./package.json').version;
const FAILED = ['error', 'fail'];

const tracer = () => api.trace.getTracer('tinyq', VERSION);

/** add()'s options with the active span's context in their meta (the application's
 * propagator: W3C `traceparent`, and `tracestate` when there is one); a `traceparent` the
 * caller put there stays. Unchanged without an active span, or options add() refuses anyway. */
function traced(opts) {
  if (api === null || !api.trace.getSpanContext(api.context.active())) return opts;
  const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);
  if (opts != null && !isObject(opts)) return opts;
  if (opts?.meta != null && !isObject(opts.meta)) return opts;
  const carrier = {};
  api.propagation.inject(api.context.active(), carrier);
  if (Object.keys(carrier).length === 0) return opts; // no propagator registered
  return { ...opts, meta: { ...carrier, ...opts?.meta } };
}

const NO_ATTEMPT = { ended() {} };

/** `await fn(span)` inside the span of `run`'s attempt, the current span while the handler
 * runs; the span ends once fn has, its status set by span.ended(outcome, value) before. */
async function attempt(queue, run, fn) {
  if (api === null) return fn(NO_ATTEMPT);
  const meta = run.meta;
  const parent = typeof meta.traceparent === 'string'
    ? api.propagation.extract(api.ROOT_CONTEXT, meta) : api.ROOT_CONTEXT;
  const attributes = {
    'messaging.system': 'tinyq',
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.destination.name': queue,
    'messaging.message.id': run.id,
    'tinyq.attempt': run.attempt,
  };
  const span = tracer().startSpan(`${queue} process`, { kind: api.SpanKind.CONSUMER, attributes }, parent);
  const active = api.trace.setSpan(parent, span);
  run._otelContext = active; // a step's parent when the app has no context manager
  const attemptSpan = {
    /** The outcome as the span's status: ERROR (with the error) for an error or a fail; OK
     * for done; unset for the rest (retry, snooze, waits, nothing settled). */
    ended(outcome, value) {
      span.setAttribute('tinyq.outcome', outcome || 'none');
      if (FAILED.includes(outcome)) span.setStatus({ code: api.SpanStatusCode.ERROR, message: String(value) });
      else if (outcome === 'done') span.setStatus({ code: api.SpanStatusCode.OK });
    },
  };
  try {
    return await api.context.with(active, () => fn(attemptSpan));
  } finally {
    span.end();
  }
}

/** `await fn()`, a step's computation (its answer not kept yet), as a child span of the
 * current one (the attempt's, or one the handler started). */
async function step(run, name, fn) {
  if (api === null) return fn();
  const current = api.context.active();
  const parent = api.trace.getSpan(current) ? current : (run._otelContext ?? current);
  const span = tracer().startSpan(`step ${name}`, { attributes: { 'tinyq.step': name } }, parent);
  try {
    return await api.context.with(api.trace.setSpan(parent, span), fn);
  } catch (err) {
    if (err instanceof Error) span.setStatus({ code: api.SpanStatusCode.ERROR, message: String(err.message) });
    throw err;
  } finally {
    span.end();
  }
}

module.exports = { traced, attempt, step };
