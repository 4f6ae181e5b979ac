'use strict';
// OpenTelemetry in the Node helper (otel.js), through the SDK's in-memory exporter, as
// tests/test_otel.py does for Python: add()/addMany() under an active span carry its W3C
// `traceparent` in the job's meta; each attempt is a consumer span `<queue> process` whose
// parent is that context, with the messaging attributes, a kept step as its child span, and
// the outcome as its status. Without a span nothing goes into meta; without
// @opentelemetry/api installed (the rest of the suite) the helper works as before.
//
// The API and the SDK are not dependencies of tinyq: this test installs them with npm, from
// test/otel/package.json, into target/node-otel at the top of the repository the first time
// (skipped when npm cannot), then runs its script in a child process with NODE_PATH there.
// Once installed (target/node-otel/.ready) it needs no network.
const { test, before } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const { tempDb } = require('../test-support');

const ROOT = path.join(__dirname, '..', '..');
const PREFIX = path.join(ROOT, 'target', 'node-otel');

/** The folder holding node_modules/@opentelemetry/*, or a reason why npm could not install it. */
function installed() {
  if (fs.existsSync(path.join(PREFIX, '.ready'))) return { modules: path.join(PREFIX, 'node_modules') };
  fs.rmSync(PREFIX, { recursive: true, force: true });
  fs.mkdirSync(PREFIX, { recursive: true });
  fs.copyFileSync(path.join(__dirname, 'otel', 'package.json'), path.join(PREFIX, 'package.json'));
  const npm = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--no-package-lock'],
    { cwd: PREFIX, encoding: 'utf8', timeout: 300000 });
  if (npm.status !== 0) {
    const why = npm.error ? npm.error.message : (npm.stderr || '').split('\n').find((line) => line.trim()) || `exit ${npm.status}`;
    return { skip: `npm could not install @opentelemetry/api and the SDK from the registry (offline?): ${why}` };
  }
  fs.writeFileSync(path.join(PREFIX, '.ready'), '');
  return { modules: path.join(PREFIX, 'node_modules') };
}

const SCRIPT = `
const { trace, context, propagation } = require('@opentelemetry/api');
const { BasicTracerProvider, SimpleSpanProcessor, InMemorySpanExporter } = require('@opentelemetry/sdk-trace-base');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { W3CTraceContextPropagator } = require('@opentelemetry/core');
const tinyq = require(process.env.TINYQ_NODE);

const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
const tracer = trace.getTracer('app');

(async () => {
  const q = new tinyq.Queue(process.env.DB, 'mail');
  tracer.startActiveSpan('request', (span) => {
    q.add({ n: 1 }, { id: 'ok', meta: { tenant: 'acme' } });
    q.add({ n: 2 }, { id: 'bad', attempts: 1 });
    q.addMany([{ n: 3 }, { n: 4 }], { ids: ['many', 'failing'] });
    span.end();
  });
  q.add({ n: 5 }, { id: 'untraced' });
  await q.drain(async (payload, run) => {
    await run.step('render', async () => payload.n * 2);
    // a span the handler starts nests under the attempt's (the app's context manager)
    await tracer.startActiveSpan('http', async (span) => { await new Promise(setImmediate); span.end(); });
    if (payload.n === 2) throw new Error('no');
    if (payload.n === 4) run.fail('bad input');
    return 'sent';
  });
  const spans = exporter.getFinishedSpans().map((s) => ({
    name: s.name, kind: s.kind, trace: s.spanContext().traceId, span: s.spanContext().spanId,
    parent: (s.parentSpanContext ? s.parentSpanContext.spanId : s.parentSpanId) || null,
    attributes: s.attributes, status: s.status,
  }));
  const metas = Object.fromEntries(['ok', 'bad', 'many', 'failing', 'untraced'].map((id) => [id, q.get(id).meta]));
  q.close();
  console.log(JSON.stringify({ spans, metas }));
})().catch((err) => { console.error(err); process.exit(1); });
`;

let out = null;
let skip = null;

before(() => {
  const got = installed();
  if (got.skip) {
    skip = got.skip;
    return;
  }
  const env = { ...process.env, NODE_PATH: got.modules, TINYQ_NODE: path.join(__dirname, '..'), DB: tempDb() };
  const child = spawnSync(process.execPath, ['-e', SCRIPT], { env, encoding: 'utf8', timeout: 120000 });
  assert.equal(child.status, 0, child.stderr);
  out = JSON.parse(child.stdout);
});

const CONSUMER = 4; // SpanKind.CONSUMER
const OK = 1;
const ERROR = 2;

const roots = () => Object.fromEntries(out.spans.filter((s) => s.parent === null && s.kind !== CONSUMER).map((s) => [s.name, s]));
const traceparentOf = (span) => `00-${span.trace}-${span.span}-`;

function processSpan(id) {
  const found = out.spans.filter((s) => s.kind === CONSUMER && s.attributes['messaging.message.id'] === id);
  assert.equal(found.length, 1, `one attempt span for ${id}`);
  return found[0];
}

test('otel: add() under a span carries its traceparent in meta', (t) => {
  if (skip) return t.skip(skip);
  const { request } = roots();
  assert.ok(out.metas.ok.traceparent.startsWith(traceparentOf(request)), out.metas.ok.traceparent);
  assert.ok(parseInt(out.metas.ok.traceparent.slice(-2), 16) & 1, 'sampled');
  assert.equal(out.metas.ok.tenant, 'acme', "the caller's meta is kept beside it");
  assert.equal(out.metas.bad.traceparent, out.metas.ok.traceparent);
  assert.equal(out.metas.many.traceparent, out.metas.ok.traceparent, 'addMany too');
  assert.equal(out.metas.untraced, null, 'no active span: nothing added to meta');
});

test('otel: each attempt is a consumer span, child of the added context', (t) => {
  if (skip) return t.skip(skip);
  const { request } = roots();
  const ok = processSpan('ok');
  assert.equal(ok.name, 'mail process');
  assert.deepEqual([ok.trace, ok.parent], [request.trace, request.span]);
  assert.deepEqual(ok.attributes, {
    'messaging.system': 'tinyq', 'messaging.operation.type': 'process', 'messaging.operation.name': 'process',
    'messaging.destination.name': 'mail', 'messaging.message.id': 'ok', 'tinyq.attempt': 1, 'tinyq.outcome': 'done',
  });
  assert.equal(ok.status.code, OK);
  assert.equal(processSpan('many').parent, request.span);
  const untraced = processSpan('untraced');
  assert.equal(untraced.parent, null);
  assert.notEqual(untraced.trace, request.trace);
});

test('otel: an error or a fail is an error span', (t) => {
  if (skip) return t.skip(skip);
  const bad = processSpan('bad');
  assert.deepEqual(bad.status, { code: ERROR, message: 'Error: no' });
  assert.equal(bad.attributes['tinyq.outcome'], 'error');
  const failing = processSpan('failing');
  assert.deepEqual(failing.status, { code: ERROR, message: 'bad input' });
  assert.equal(failing.attributes['tinyq.outcome'], 'fail');
});

test("otel: a kept step and the handler's own spans are children of the attempt's span", (t) => {
  if (skip) return t.skip(skip);
  for (const id of ['ok', 'untraced']) {
    const attempt = processSpan(id);
    for (const name of ['step render', 'http']) {
      const children = out.spans.filter((s) => s.name === name && s.parent === attempt.span);
      assert.equal(children.length, 1, `${name} under ${id}`);
      assert.equal(children[0].trace, attempt.trace);
    }
    const [step] = out.spans.filter((s) => s.name === 'step render' && s.parent === attempt.span);
    assert.deepEqual(step.attributes, { 'tinyq.step': 'render' });
  }
});
