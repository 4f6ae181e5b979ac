// Types for tinyq's Node helper (index.js). Checked by test/types.test.js with tsc.
import type { Database as BetterDatabase, Options as DatabaseOptions } from 'better-sqlite3';

/** node:sqlite's DatabaseSync (Node 22.13 and later, Bun), as tinyq uses it: open it with
 * `{ allowExtension: true }` to load tinyq into it. */
export interface NodeSqliteDatabase {
  prepare(sql: string): unknown;
  exec(sql: string): void;
  enableLoadExtension(allow: boolean): void;
  loadExtension(path: string): void;
  close(): void;
}

/** bun:sqlite's Database, as tinyq uses it. */
export interface BunDatabase {
  readonly filename: string;
  query(sql: string): unknown;
  exec(sql: string): unknown;
  transaction(fn: (...args: any[]) => unknown): unknown;
  loadExtension(path: string): void;
  close(throwOnError?: boolean): void;
}

/** A Database of any driver tinyq runs on. */
export type SqliteDatabase = BetterDatabase | NodeSqliteDatabase | BunDatabase;
/** The drivers, by the name `driver` options and $TINYQ_DRIVER take. */
export type DriverName = 'better-sqlite3' | 'node:sqlite' | 'bun:sqlite';

export interface QueueOptions {
  /** The driver of the Database a Queue opens from a path (default: better-sqlite3 when it is
   * installed and loads, else node:sqlite; in Bun, bun:sqlite; $TINYQ_DRIVER overrides). */
  driver?: DriverName;
}

/** A duration: integer milliseconds, or text such as '500ms', '30s', '10m', '1.5h', '7d'. */
export type Duration = number | string;
/** A time: milliseconds since the Unix epoch, ISO-8601 text, or a Date. */
export type Time = number | string | Date;
/** What tq_get and tq_jobs call a job's state. */
export type JobState = 'scheduled' | 'waiting' | 'running' | 'done' | 'failed' | 'blocked';

export interface AddOptions {
  /** Your id for the job: the same id again adds nothing while it is present (dedupe). */
  id?: string;
  delay?: Duration;
  at?: Time;
  /** Higher first; default 0. */
  priority?: number;
  /** A tenant, a user, an API key: its own limits inside the queue. */
  group?: string;
  /** This job's attempt budget. */
  attempts?: number;
  /** Kept beside the payload (a correlation id, a tenant, tags); handlers see it as run.meta. */
  meta?: Record<string, unknown>;
  /** A job not started by then never starts: it fails with the error 'expired'. A time (ms
   * since the epoch, ISO-8601 text or a Date) or a duration from now as text ('15m'). */
  expires?: Time;
  /** What an add of a present id does: 'keep' (the default: nothing), 'replace' (a job not
   * started yet takes this add's payload and options) or 'debounce' (as replace, and its time
   * becomes now + delay, never later than max_wait after the first add). Needs an id. */
  on_conflict?: 'keep' | 'replace' | 'debounce';
  /** With on_conflict 'debounce': the latest the job runs, counted from the add that created it. */
  max_wait?: Duration;
  /** Ids of jobs this one waits for: it is blocked until every one has finished (each must exist). */
  after?: string[];
  /** What a job of `after` that failed for good or was cancelled does to this one: 'fail' (the
   * default: it fails, its error naming that job), 'run' (it runs anyway) or 'cancel'. */
  after_failed?: 'fail' | 'run' | 'cancel';
}

export interface SignalOptions {
  /** How long the signal is kept for waits that begin later (default '7d'). */
  keep?: Duration;
}

/** A job that `id` waits or waited for (tq_deps). */
export interface Dependency<R = unknown> {
  id: string;
  state: JobState | 'cancelled';
  result: R | null;
  error: string | null;
}

/** addMany's options: add's for every job, and each job's own id. */
export interface AddManyOptions extends Omit<AddOptions, 'id'> {
  /** One id per payload, in order (as many as payloads). */
  ids?: string[];
}

export interface Job<P = unknown, R = unknown> {
  id: string;
  queue: string;
  state: JobState;
  group: string | null;
  priority: number;
  attempt: number;
  run_at: number | null;
  lease_until: number | null;
  worker: string | null;
  payload: P;
  /** How the payload is stored: 'json' (parsed into `payload`), 'text' (a string that is not
   * JSON), 'integer', 'real', 'null' or 'blob'. */
  payload_type: 'json' | 'text' | 'integer' | 'real' | 'null' | 'blob';
  meta: Record<string, unknown> | null;
  result: R | null;
  error: string | null;
  progress: unknown;
  /** How many jobs start before it (only while waiting). */
  ahead?: number;
  created_at: number;
  settled_at: number | null;
  /** Its `expires` (ms), or null. */
  expires: number | null;
  /** Only while blocked: the jobs it still waits for, or the signal and until when. */
  blocked_on?: { after: string[] } | { signal: string; until: number | null };
  [key: string]: unknown;
}

export interface JobEvent {
  seq: number;
  id: string;
  queue: string;
  state: JobState | 'cancelled' | 'progress';
  attempt: number | null;
  at: number;
  detail: string | null;
}

export interface QueueSettings {
  lease?: Duration;
  timeout?: Duration;
  attempts?: number;
  backoff?: Duration;
  backoff_max?: Duration;
  concurrency?: number | null;
  rate?: string | null;
  group_concurrency?: number | null;
  group_rate?: string | null;
  dedupe?: Duration;
  keep?: Duration;
  paused?: boolean;
}

export interface ScheduleOptions {
  /** An IANA zone such as 'Europe/Paris' (default 'UTC'). */
  tz?: string;
  /** After a gap: 'latest' (default) adds one job, 'skip' none, 'all' one per due time. */
  missed?: 'latest' | 'skip' | 'all';
  paused?: boolean;
  priority?: number;
  group?: string;
  attempts?: number;
  meta?: Record<string, unknown>;
}

export interface Schedule {
  name: string;
  queue: string;
  when: string;
  tz: string;
  next_at: number | null;
  last_at: number | null;
  last_id: string | null;
  paused: boolean;
  [key: string]: unknown;
}

export interface WorkOptions {
  /** Handlers running at once (1). */
  concurrency?: number;
  /** The worker's name in tq_claim (host:pid). */
  worker?: string;
  /** Lease length of this worker's claims (the queue's). */
  lease?: Duration;
  /** When the waiter meets a busy store: how long before the idle workers claim anyway, in
   * ms (1000). Idle, a worker claims only once tq_wait_any says a job may be claimable. */
  poll?: number;
  /** SIGTERM and SIGINT call stop() (false). */
  handleSignals?: boolean;
  /** What a thrown error records: 'message' ("Name: message", the default) or 'class' ("Name"). */
  errors?: 'message' | 'class';
  /** Jobs claimed ahead of the running handlers, in the same transaction, leased and renewed
   * while they wait, put back (a snooze of 0, no try used up) on stop: 'auto' (the default)
   * claims 7 ahead while the handlers take under 1 ms, none after slow ones; a whole number
   * is fixed; 0 never claims ahead. */
  prefetch?: 'auto' | number;
}

/** What Queue.drain resolves with: `done` and `failed` count jobs that ended so, `retried`
 * the attempts that ended in an error or run.retry while the job had tries left. */
export interface DrainSummary {
  done: number;
  failed: number;
  retried: number;
}

export interface StopOptions {
  /** How long to wait for the jobs in flight, in ms (as long as they run). */
  timeout?: number;
}

/** Thrown by run.retry / run.snooze / run.fail: the worker settles the job with it. */
export class Outcome {
  constructor(outcome: 'retry' | 'snooze' | 'fail' | 'wait' | null, value?: unknown);
  outcome: 'retry' | 'snooze' | 'fail' | 'wait' | null;
  value: unknown;
}

/** The attempt no longer holds its job: thrown by run.step when its answer cannot be kept. */
export class Cancelled extends Outcome {
  constructor(reason?: string);
}

/** What a handler gets besides its payload. */
export class Run {
  /** A connection of the handler's own (of the Queue's driver, opened on first use), for its
   * SQL: a transaction on it holds this handler's writes only; one left open when the handler
   * ends is rolled back and the attempt ends as an error. */
  readonly db: SqliteDatabase;
  readonly id: string;
  readonly attempt: number;
  readonly group: string | null;
  leaseUntil: number;
  readonly deadline: number | null;
  /** The job's meta (tq_add's `meta` option); {} when it has none. */
  readonly meta: Record<string, unknown>;
  /** True once the job was cancelled, timed out, or taken by a later attempt. */
  cancelled: boolean;
  /** Aborts when `cancelled` becomes true. */
  readonly signal: AbortSignal;
  /** The answer kept under `name` by any attempt; else `await fn()`, kept as JSON. */
  step<T>(name: string, fn: () => T | Promise<T>): Promise<T>;
  /** Records progress; false when the job is gone. */
  progress(value: unknown): boolean;
  /** The results of the jobs `ids`, in order, once every one is done. Until then the attempt
   * ends (the job is blocked, its worker's place free) and the job runs again from the top
   * when they have finished: its steps bring it back here. One that failed for good or was
   * cancelled fails this job. */
  waitFor<R = unknown>(ids: string | string[]): Promise<R[]>;
  /** The payload of the signal `name` (Queue.signal, tq_signal), or null once `timeout` has
   * passed (omitted: waits for ever). Until it comes the job is blocked, as in waitFor.
   * A second waitSignal of one name in a job throws (its steps would answer it at once). */
  waitSignal<T = unknown>(name: string, timeout?: Duration): Promise<T | null>;
  /** A durable sleep: resolves once `duration` has passed since the first attempt that reached
   * it (its wake time is the step 'sleep:<name>'); until then the job snoozes without its worker.
   * A second sleep of one name in a job throws (its wake time has passed): number them. */
  sleep(name: string, duration: Duration): Promise<void>;
  /** Ends this attempt; runs again after `delay` (default: the backoff). Counts. */
  retry(delay?: Duration): never;
  /** Ends this attempt; runs again after `delay`. Does not count. */
  snooze(delay: Duration): never;
  /** Fails the job for good now, with `reason` as its error. */
  fail(reason: unknown): never;
}

export type Handler<P = any, R = unknown> = (payload: P, run: Run) => R | Promise<R>;

/** One named queue in one SQLite file; D: the type of its Database. */
/** The options of one queue of a Worker: those of WorkOptions that belong to one queue. */
export type QueueWorkOptions = Pick<WorkOptions, 'concurrency' | 'lease' | 'errors' | 'prefetch'>;

/** One work() for several queues of one file: name -> handler, or [handler, options]. */
export type WorkerQueues = Record<string, Handler<any, unknown> | [Handler<any, unknown>, QueueWorkOptions]>;

/** Serves several queues in one work(), one waiter thread for the file, one stop() for all. */
export class Worker<D extends SqliteDatabase = SqliteDatabase> {
  constructor(dbOrPath: string | D, queues: WorkerQueues,
    options?: Omit<WorkOptions, keyof QueueWorkOptions> & { driver?: DriverName });
  /** Resolves with how many jobs each queue handled, once stopped and settled. */
  work(): Promise<Record<string, number>>;
  stop(options?: StopOptions): Promise<Record<string, number> | 0>;
  close(): void;
}

export class Queue<P = any, D extends SqliteDatabase = SqliteDatabase> {
  /** A path (the Queue opens its own Database, with `options.driver`) or a Database with tinyq
   * loaded: better-sqlite3, node:sqlite's DatabaseSync or bun:sqlite's. */
  constructor(dbOrPath: string | D, name: string, options?: QueueOptions);
  readonly name: string;
  readonly db: D;
  readonly path: string | null;
  add(payload: P, options?: AddOptions): string;
  /** Adds one job per payload in one transaction and one statement; returns their ids in order. */
  addMany(payloads: P[], options?: AddManyOptions): string[];
  get<R = unknown>(id: string): Job<P, R> | null;
  /** The jobs `id` waits or waited for, with their results (tq_deps). */
  deps<R = unknown>(id: string): Dependency<R>[];
  /** Sends the signal `name` to every job waiting for it; returns how many it woke. */
  signal(name: string, payload?: unknown, options?: SignalOptions): number;
  cancel(id: string): boolean;
  retry(id: string): boolean;
  watch(since?: number): JobEvent[];
  settings(options?: QueueSettings): Record<string, unknown>;
  /** Creates or replaces the schedule `name`: a cron expression, '@every 10m', '@daily'... */
  schedule(name: string, when: string, payload: P, options?: ScheduleOptions): Schedule;
  /** Removes the schedule `name`; false when there was none. */
  unschedule(name: string): boolean;
  /** This queue's schedules. */
  schedules(): Schedule[];
  /** Runs `handler` for this queue's jobs until stop(); resolves with how many it handled. */
  work<R = unknown>(handler: Handler<P, R>, options?: WorkOptions): Promise<number>;
  /** work() until no job of this queue is running and none is due now (one scheduled later
   * is not waited for); resolves with how the attempts it ran ended. Throws when this Queue
   * is already working. */
  drain<R = unknown>(handler: Handler<P, R>, options?: WorkOptions): Promise<DrainSummary>;
  /** Claims nothing more; resolves once the jobs in flight have settled (with 0 at once,
   * called from one of this queue's handlers: it would wait for that handler). `timeout` (ms)
   * bounds the wait: then the handlers still running are abandoned (logged, signal aborted;
   * nothing of theirs is settled, and a job still held runs again once its lease runs out). */
  stop(options?: StopOptions): Promise<number>;
  close(): void;
}

/** Where the extension is: $TINYQ_EXT, else tinyq.so next to index.js, else ../dist/tinyq.so. */
export function extensionPath(): string;
/** Loads tinyq into a Database of any of the drivers; returns it. */
export function load<D extends SqliteDatabase>(db: D): D;
/** A Database with tinyq loaded, WAL, synchronous=FULL and a 5 s busy timeout, of the driver
 * named by `options.driver` (the other options go to its constructor), else the default one. */
export function open(file: string, options: DatabaseOptions & { driver: 'better-sqlite3' }): BetterDatabase;
export function open(file: string, options: { driver: 'node:sqlite'; [option: string]: unknown }): NodeSqliteDatabase;
export function open(file: string, options: { driver: 'bun:sqlite'; [option: string]: unknown }): BunDatabase;
export function open(file: string, options?: DatabaseOptions): SqliteDatabase;
