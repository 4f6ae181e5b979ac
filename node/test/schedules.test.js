'use strict';
// Periodic jobs from Node (CRON-01): Queue.schedule / unschedule / schedules, and work()
// running a schedule's jobs.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const tinyq = require('..');

const { all, tempDb, value } = require('../test-support');

const ms = (iso) => Date.parse(iso);

test('schedule, schedules, unschedule: a Monday 09:00 Europe/Paris digest', () => {
  const q = new tinyq.Queue(tempDb(), 'mail');
  value(q.db, 'SELECT tq_clock(?)', ms('2026-11-30T07:00:00Z'));
  const s = q.schedule('digest', '0 9 * * mon', { kind: 'weekly-digest' },
    { tz: 'Europe/Paris', meta: { team: 'growth' }, missed: 'all' });
  assert.deepEqual([s.queue, s.tz, s.missed, s.next_at], ['mail', 'Europe/Paris', 'all', ms('2026-11-30T08:00:00Z')]);
  assert.deepEqual(s.payload, { kind: 'weekly-digest' });
  assert.deepEqual(s.meta, { team: 'growth' });
  new tinyq.Queue(q.db, 'other').schedule('elsewhere', '@hourly', {});
  assert.deepEqual(q.schedules().map((x) => [x.name, x.when, x.paused]), [['digest', '0 9 * * mon', false]]);

  value(q.db, 'SELECT tq_clock(?)', ms('2026-11-30T08:00:00Z'));
  const claimed = all(q.db, "SELECT id, meta FROM tq_claim('mail', 'w', 10)");
  assert.deepEqual(claimed, [{ id: 'digest@2026-11-30T08:00:00Z', meta: '{"team":"growth"}' }]);
  assert.equal(q.schedules()[0].last_id, 'digest@2026-11-30T08:00:00Z');

  assert.throws(() => q.schedule('digest', '0 9 * * mon', {}, { tz: 'Paris' }),
    { message: /^tq_schedule: option "tz": unknown time zone 'Paris'/ });
  assert.equal(q.unschedule('digest'), true);
  assert.equal(q.unschedule('digest'), false);
  assert.deepEqual(q.schedules(), []);
  q.close();
});

test('work() runs the jobs of an @every schedule as they come due', async () => {
  const q = new tinyq.Queue(tempDb(), 'ticks');
  q.schedule('tick', '@every 200ms', { n: 1 });
  const seen = [];
  const handled = await Promise.race([
    q.work(async (payload, run) => {
      seen.push([run.id, payload]);
      if (seen.length >= 3) q.stop();
    }, { poll: 5000 }),
    new Promise((_, reject) => setTimeout(() => reject(new Error('no three scheduled jobs in 20 s')), 20000).unref()),
  ]);
  assert.ok(handled >= 3);
  assert.ok(seen.every(([id, p]) => id.startsWith('tick@') && p.n === 1));
  assert.equal(new Set(seen.map(([id]) => id)).size, seen.length);
  q.close();
});
