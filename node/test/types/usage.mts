// Type-checked (never run) by test/types.test.js: what a TypeScript user writes, from ESM.
import { Queue, open, Outcome, type Run, type Job, type DrainSummary } from 'tinyq';

interface Reply { messageId: number }

const replies = new Queue<Reply>('app.db', 'replies');
const id: string = replies.add({ messageId: 41 }, { id: 'reply:41', delay: '10m', meta: { correlation_id: 'r1' } });
const job: Job<Reply, { sent: boolean }> | null = replies.get(id);
if (job) {
  const n: number = job.payload.messageId;
  const sent: boolean | undefined = job.result?.sent;
  void n; void sent;
}
replies.settings({ lease: '30s', attempts: 5, concurrency: null });
const handled: Promise<number> = replies.work(async (payload, run: Run) => {
  const text: string = await run.step('answer', async () => `hello ${payload.messageId}`);
  const correlation = run.meta.correlation_id;
  run.progress({ stage: 'sending', correlation });
  if (run.cancelled) run.snooze('30s');
  return { sent: text.length > 0 };
}, { concurrency: 4, handleSignals: true, errors: 'class', prefetch: 'auto' });
void handled;
const drained: Promise<DrainSummary> = replies.drain(async (payload) => payload.messageId, { concurrency: 8 });
void drained.then((s) => s.done + s.failed + s.retried);
const db = open('app.db');
new Queue(db, 'other').watch(0).forEach((e) => e.state === 'progress');
const digest = replies.schedule('digest', '0 9 * * mon', { messageId: 0 }, { tz: 'Europe/Paris', missed: 'skip' });
const next: number | null = digest.next_at;
void next;
replies.schedules().map((s) => s.paused);
// @ts-expect-error: missed is 'latest', 'skip' or 'all'
replies.schedule('d', '@daily', { messageId: 0 }, { missed: 'sometimes' });
replies.add({ messageId: 7 }, { id: 'doc:7', on_conflict: 'debounce', delay: '30s', max_wait: '5m', expires: new Date() });
const many: string[] = replies.addMany([{ messageId: 1 }, { messageId: 2 }], { ids: ['a', 'b'], expires: '1h' });
void many;
const bound: number | null = replies.get('doc:7')?.expires ?? null;
void bound;
// @ts-expect-error: on_conflict is 'keep', 'replace' or 'debounce'
replies.add({ messageId: 1 }, { id: 'x', on_conflict: 'merge' });
// @ts-expect-error: addMany takes ids, not one id
replies.addMany([{ messageId: 1 }], { id: 'x' });
// @ts-expect-error: addMany's payloads keep their type
replies.addMany([{ messageId: 'one' }]);
const o = new Outcome('retry', 1000);
void o;

// @ts-expect-error: a payload of the wrong shape
replies.add({ messageId: 'forty-one' });
// @ts-expect-error: an unknown add option
replies.add({ messageId: 1 }, { retries: 3 });
// @ts-expect-error: errors is 'message' or 'class'
replies.work(async () => {}, { errors: 'stack' });
replies.work(async () => {}, { prefetch: 0 });
// @ts-expect-error: prefetch is 'auto' or a number
replies.work(async () => {}, { prefetch: '7' });
// @ts-expect-error: step's answer keeps its type
const wrong: number = await new Queue<Reply>('app.db', 'q').get('x')!.payload.messageId.toFixed();
void wrong;

// Each driver's Database, by the driver named
const better = open('app.db', { driver: 'better-sqlite3' });
better.pragma('journal_mode', { simple: true });
const viaNode = new Queue(open('app.db', { driver: 'node:sqlite' }), 'replies', { driver: 'node:sqlite' });
viaNode.db.enableLoadExtension(false);
const viaBun = new Queue<Reply>('app.db', 'replies', { driver: 'bun:sqlite' });
void viaBun.db;
// @ts-expect-error: a driver tinyq does not know
open('app.db', { driver: 'sqlite3' });
// @ts-expect-error: not a Database
new Queue({ prepare: 1 }, 'q');

// Workflows: after / after_failed, signals, and a handler that waits
const page = replies.add({ messageId: 2 }, { id: 'page:2' });
replies.add({ messageId: 3 }, { after: [page], after_failed: 'run' });
// @ts-expect-error: after_failed is 'fail', 'run' or 'cancel'
replies.add({ messageId: 3 }, { after: [page], after_failed: 'skip' });
const woken: number = replies.signal('approve:ticket-1', { by: 'lee' }, { keep: '1d' });
void woken;
const deps = replies.deps<{ summary: string }>('collect');
const firstSummary: string | undefined = deps[0]?.result?.summary;
void firstSummary;
replies.work(async (_payload, run) => {
  const summaries: string[] = await run.waitFor<string>(['page:1', 'page:2']);
  const approval = await run.waitSignal<{ by: string }>('approve:ticket-1', '7d');
  const by: string | undefined = approval?.by;
  await run.sleep('cool-off', '10m');
  // @ts-expect-error: a sleep needs its name
  await run.sleep('10m');
  return { summaries, by };
});
