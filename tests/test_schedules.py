"""Periodic jobs (CRON-01): tq_schedule, tq_unschedule, tq_schedules.

Each due time of a schedule becomes exactly one job, `<name>@<due time ISO-8601 UTC>`,
added by the next claim on the schedule's queue; `missed` says what a gap adds; times are
computed in the schedule's zone the way cron does. The clock is pinned with tq_clock
unless a test needs real time.
"""
import json
import os
import sqlite3
import subprocess
import time
from datetime import datetime, timezone

import pytest

from helpers import ROOT, claim, connect, get, one, pin, setq, settle, snapshot


def ms(iso):
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def iso(t):
    """A due time as occurrence ids show it: to the second, or to the ms when it has some."""
    text = datetime.fromtimestamp(t // 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{t % 1000:03d}Z" if t % 1000 else "Z")


def schedule(db, name, queue, when, payload="{}", **options):
    args = (name, queue, when, payload) + ((json.dumps(options),) if options else ())
    marks = ", ".join("?" * len(args))
    return json.loads(one(db, f"SELECT tq_schedule({marks})", *args))


def schedules(db):
    cur = db.execute("SELECT * FROM tq_schedules")
    cols = [c[0] for c in cur.description]
    return {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}


def job_ids(db, queue):
    return [r[0] for r in db.execute("SELECT id FROM tq_jobs WHERE queue = ? ORDER BY run_at, id", (queue,))]


def take(db, queue):
    """Claims what is due on `queue` and settles it done (so no lease comes back later)."""
    rows = claim(db, queue, "w", 100)
    for row in rows:
        settle(db, row["id"], row["attempt"])
    return rows


def taken(db, queue):
    return [r["id"] for r in take(db, queue)]


def walk(db, queue, start, end, step_min=10):
    """Claims (and settles) on `queue` every `step_min` minutes of pinned time from start to end.
    Done jobs are kept long enough for job_ids to list them all afterwards."""
    setq(db, queue, dedupe="60d")
    t = ms(start)
    while t <= ms(end):
        pin(db, t)
        take(db, queue)
        t += step_min * 60_000


# --------------------------------------------------------------------------- ids and options

def test_CRON_01_ids_are_name_at_due_time_and_jobs_carry_the_schedule(db):
    pin(db, ms("2026-11-30T07:30:00Z"))
    s = schedule(db, "digest", "mail", "0 8 * * *", '{"kind": "digest"}',
                 priority=5, group="acme", attempts=3, meta={"team": "growth"})
    assert (s["name"], s["queue"], s["when"], s["tz"], s["missed"], s["paused"]) == \
        ("digest", "mail", "0 8 * * *", "UTC", "latest", False)
    assert s["next_at"] == ms("2026-11-30T08:00:00Z") and s["last_id"] is None
    assert claim(db, "mail") == []            # not due yet: nothing added
    assert job_ids(db, "mail") == []
    pin(db, ms("2026-11-30T08:00:00Z"))
    (row,) = take(db, "mail")
    assert row["id"] == "digest@2026-11-30T08:00:00Z"
    assert (json.loads(row["payload"]), row["group_key"]) == ({"kind": "digest"}, "acme")
    job = get(db, row["id"])
    assert (job["priority"], job["attempts"], job["meta"], job["run_at"]) == \
        (5, 3, {"team": "growth"}, ms("2026-11-30T08:00:00Z"))
    assert schedules(db)["digest"] == {
        "name": "digest", "queue": "mail", "when": "0 8 * * *", "tz": "UTC",
        "next_at": ms("2026-12-01T08:00:00Z"), "last_at": ms("2026-11-30T08:00:00Z"),
        "last_id": "digest@2026-11-30T08:00:00Z", "paused": 0}
    # The next claim the same day adds nothing more.
    pin(db, ms("2026-11-30T20:00:00Z"))
    assert taken(db, "mail") == []
    pin(db, ms("2026-12-01T08:00:05Z"))
    assert taken(db, "mail") == ["digest@2026-12-01T08:00:00Z"]


def test_CRON_01_every_duration_and_seconds_field(db):
    t0 = ms("2026-12-01T10:00:00Z")
    pin(db, t0)
    schedule(db, "tick", "q", "@every 90s")
    schedule(db, "sec", "q2", "*/20 * * * * *")   # 6 fields: seconds first
    pin(db, t0 + 90_000)
    assert taken(db, "q") == ["tick@2026-12-01T10:01:30Z"]
    pin(db, t0 + 180_000)
    assert taken(db, "q") == ["tick@2026-12-01T10:03:00Z"]
    pin(db, t0 + 25_000)
    assert taken(db, "q2") == ["sec@2026-12-01T10:00:20Z"]
    assert schedules(db)["sec"]["next_at"] == t0 + 40_000


def test_CRON_01_names_ranges_steps_lists_and_nicknames(db):
    pin(db, ms("2026-12-01T00:00:00Z"))   # a Tuesday
    cases = {
        "weekdays": ("0 9 * * mon-fri", "2026-12-01T09:00:00Z"),
        "months": ("0 0 1 jan,jul *", "2027-01-01T00:00:00Z"),
        "steps": ("*/15 9-17 * * *", "2026-12-01T09:00:00Z"),
        "hourly": ("@hourly", "2026-12-01T01:00:00Z"),
        "daily": ("@daily", "2026-12-02T00:00:00Z"),
        "weekly": ("@weekly", "2026-12-06T00:00:00Z"),
        "monthly": ("@monthly", "2027-01-01T00:00:00Z"),
        "yearly": ("@yearly", "2027-01-01T00:00:00Z"),
    }
    for name, (when, first) in cases.items():
        assert schedule(db, name, "q", when)["next_at"] == ms(first), name


# --------------------------------------------------------------------------- time zones and DST

def test_CRON_01_digest_every_monday_0900_europe_paris(db):
    """The example of docs/reference.md: 09:00 in Paris is 08:00 UTC in winter, 07:00 in summer."""
    pin(db, ms("2026-11-30T06:00:00Z"))   # a Monday
    schedule(db, "digest", "mail", "0 9 * * mon", '{"kind": "weekly-digest"}', tz="Europe/Paris")
    walk(db, "mail", "2026-11-30T06:00:00Z", "2026-12-14T12:00:00Z", step_min=60)
    assert job_ids(db, "mail") == ["digest@2026-11-30T08:00:00Z", "digest@2026-12-07T08:00:00Z",
                                   "digest@2026-12-14T08:00:00Z"]
    pin(db, ms("2027-06-01T00:00:00Z"))
    s = schedule(db, "summer", "mail", "0 9 * * mon", tz="Europe/Paris")
    assert iso(s["next_at"]) == "2027-06-07T07:00:00Z"


def test_CRON_01_spring_forward_time_runs_once_at_first_valid_time_after_the_gap(db):
    # Paris, 2026-03-29: at 02:00 local the clock jumps to 03:00, so 02:30 does not exist.
    pin(db, ms("2026-03-28T12:00:00Z"))
    schedule(db, "nightly", "q", "30 2 * * *", tz="Europe/Paris")
    walk(db, "q", "2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z")
    assert job_ids(db, "q") == ["nightly@2026-03-29T01:00:00Z",   # 03:00 CEST, once
                                "nightly@2026-03-30T00:30:00Z"]   # 02:30 CEST again


def test_CRON_01_fall_back_time_runs_once_at_its_first_occurrence(db):
    # New York, 2026-11-01: at 02:00 EDT the clock goes back to 01:00 EST: 01:30 occurs twice
    # (05:30 and 06:30 UTC).
    pin(db, ms("2026-10-31T12:00:00Z"))
    schedule(db, "nightly", "q", "30 1 * * *", tz="America/New_York")
    walk(db, "q", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z")
    assert job_ids(db, "q") == [
        "nightly@2026-11-01T05:30:00Z",   # 01:30 EDT, the first; not 06:30Z (01:30 EST)
        "nightly@2026-11-02T06:30:00Z"]   # 01:30 EST


def test_CRON_01_a_skipped_local_day_runs_once_at_its_end_and_the_schedule_goes_on(db):
    # Apia skipped 2011-12-30: 23:59:59 on the 29th (UTC-10) was followed by the 31st (UTC+14).
    pin(db, ms("2011-12-29T21:00:00Z"))
    schedule(db, "noon", "q", "0 12 * * *", tz="Pacific/Apia")
    walk(db, "q", "2011-12-29T21:00:00Z", "2011-12-31T12:00:00Z")
    assert job_ids(db, "q") == ["noon@2011-12-29T22:00:00Z",   # noon on the 29th
                                "noon@2011-12-30T10:00:00Z",   # the 30th's, at 00:00 on the 31st
                                "noon@2011-12-30T22:00:00Z"]   # noon on the 31st
    assert one(db, "SELECT next_at FROM tq_schedules") == ms("2011-12-31T22:00:00Z")


def test_CRON_01_hourly_patterns_follow_real_hours_through_both_transitions(db):
    """A pattern that runs every hour runs once per real hour, as cron does: it skips the
    hour that does not exist and runs in both halves of the hour that occurs twice."""
    for queue, tz, start, end in [("spring", "Europe/Paris", "2026-03-28T22:00:00Z", "2026-03-29T04:00:00Z"),
                                  ("fall", "America/New_York", "2026-11-01T03:00:00Z", "2026-11-01T09:00:00Z")]:
        pin(db, ms(start))
        schedule(db, queue, queue, "15 * * * *", tz=tz)
        walk(db, queue, start, end)
        times = [get(db, i)["run_at"] for i in job_ids(db, queue)]
        assert len(times) == 6, (queue, [iso(t) for t in times])
        assert all(b - a == 3_600_000 for a, b in zip(times, times[1:])), (queue, [iso(t) for t in times])


# --------------------------------------------------------------------------- missed

@pytest.mark.parametrize("missed,expected", [
    ("latest", ["m@2026-12-01T10:05:00Z"]),
    ("skip", []),
    ("all", [f"m@2026-12-01T10:0{k}:00Z" for k in range(1, 6)]),
])
def test_CRON_01_missed_policies_after_a_gap(db, missed, expected):
    pin(db, ms("2026-12-01T10:00:00Z"))
    options = {} if missed == "latest" else {"missed": missed}
    assert schedule(db, "m", "q", "* * * * *", **options)["missed"] == missed
    pin(db, ms("2026-12-01T10:05:30Z"))       # every worker was down for five due times
    assert taken(db, "q") == expected   # in time order
    s = schedules(db)["m"]
    assert s["next_at"] == ms("2026-12-01T10:06:00Z")   # then the next time after now
    assert s["last_id"] == (expected[-1] if expected else None)
    pin(db, ms("2026-12-01T10:06:00Z"))
    assert taken(db, "q") == ["m@2026-12-01T10:06:00Z"]


def test_CRON_01_missed_all_adds_the_latest_1000_at_most(db):
    t0 = ms("2026-12-01T10:00:00Z")
    pin(db, t0)
    schedule(db, "s", "q", "@every 1s", missed="all")
    pin(db, t0 + 2500 * 1000)
    assert claim(db, "q", "w", 1)[0]["id"] == "s@" + iso(t0 + 1501 * 1000)
    assert one(db, "SELECT count(*) FROM tq_jobs WHERE queue = 'q'") == 1000
    assert one(db, "SELECT max(run_at) FROM tq_jobs WHERE queue = 'q'") == t0 + 2500 * 1000


def test_CRON_01_a_gap_with_latest_on_every_counts_from_its_first_due_time(db):
    t0 = ms("2026-12-01T10:00:00Z")
    pin(db, t0)
    schedule(db, "e", "q", "@every 10m")
    pin(db, t0 + 47 * 60_000)
    assert taken(db, "q") == ["e@2026-12-01T10:40:00Z"]
    assert schedules(db)["e"]["next_at"] == t0 + 50 * 60_000


# --------------------------------------------------------------------------- replace, remove, pause

def test_CRON_01_replaced_schedule_adds_nothing_more_of_the_old_one(db):
    t0 = ms("2026-12-01T10:00:00Z")
    pin(db, t0)
    schedule(db, "r", "q", "0 * * * *", '{"v": 1}')
    pin(db, t0 + 3_600_000)
    assert taken(db, "q") == ["r@2026-12-01T11:00:00Z"]
    # Same timing, new payload: the next due time is kept, the payload is the new one.
    assert schedule(db, "r", "q", "0 * * * *", '{"v": 2}')["next_at"] == t0 + 2 * 3_600_000
    pin(db, t0 + 2 * 3_600_000)
    (row,) = take(db, "q")
    assert (row["id"], json.loads(row["payload"])) == ("r@2026-12-01T12:00:00Z", {"v": 2})
    # New timing: hourly no more; every 45 minutes from now, on another queue.
    pin(db, t0 + 2 * 3_600_000 + 60_000)
    s = schedule(db, "r", "q2", "@every 45m", '{"v": 3}')
    assert s["next_at"] == t0 + 2 * 3_600_000 + 60_000 + 45 * 60_000
    pin(db, t0 + 5 * 3_600_000)
    assert taken(db, "q") == []
    assert taken(db, "q2") == ["r@2026-12-01T14:16:00Z"]   # 12:46, 13:31, 14:16: the latest
    assert one(db, "SELECT count(*) FROM tq_schedules") == 1


def test_CRON_01_redeclaring_after_the_clock_was_set_back_starts_from_now(db):
    """A schedule made while the clock was a year ahead would wait that year; declaring it
    again (as an application does at start-up) starts from the clock as it is now."""
    pin(db, ms("2027-12-01T10:00:00Z"))
    schedule(db, "d", "q", "0 8 * * *")
    pin(db, ms("2026-12-01T10:00:00Z"))
    assert schedule(db, "d", "q", "0 8 * * *")["next_at"] == ms("2026-12-02T08:00:00Z")
    # With the clock going forward, a redeclaration keeps the due time (no run lost).
    pin(db, ms("2026-12-02T09:00:00Z"))
    assert schedule(db, "d", "q", "0 8 * * *")["next_at"] == ms("2026-12-02T08:00:00Z")
    assert taken(db, "q") == ["d@2026-12-02T08:00:00Z"]


def test_CRON_01_removed_schedule_adds_nothing_and_its_jobs_stay(db):
    t0 = ms("2026-12-01T10:00:00Z")
    pin(db, t0)
    schedule(db, "gone", "q", "@every 1m")
    pin(db, t0 + 60_000)
    assert len(take(db, "q")) == 1
    assert one(db, "SELECT tq_unschedule('gone')") == 1
    assert one(db, "SELECT tq_unschedule('gone')") == 0
    assert schedules(db) == {}
    pin(db, t0 + 3_600_000)
    assert taken(db, "q") == []
    assert get(db, "gone@2026-12-01T10:01:00Z")["state"] == "done"


def test_CRON_01_paused_schedule_adds_nothing_and_resumes_at_its_next_time(db):
    t0 = ms("2026-12-01T10:00:00Z")
    pin(db, t0)
    s = schedule(db, "p", "q", "@every 1m", paused=True)
    assert s["paused"] is True and s["next_at"] is None
    assert schedules(db)["p"]["paused"] == 1 and schedules(db)["p"]["next_at"] is None
    pin(db, t0 + 10 * 60_000 + 1)
    assert taken(db, "q") == []
    s = schedule(db, "p", "q", "@every 1m")           # resumed: no catch-up of paused times
    assert s["next_at"] == t0 + 11 * 60_000 + 1
    pin(db, t0 + 11 * 60_000 + 1)
    assert taken(db, "q") == ["p@2026-12-01T10:11:00.001Z"]


def test_CRON_01_a_job_of_a_due_time_still_present_is_not_added_again(db):
    """The ids guard as well as the write lock: a job already there under the occurrence id
    (here put there by hand: tq_add refuses such an id) is kept, and the schedule moves on."""
    t0 = ms("2026-12-01T10:00:00Z")
    pin(db, t0)
    one(db, "SELECT tq_add('q', '\"by hand\"', '{\"id\": \"by-hand\", \"delay\": \"1h\"}')")
    db.execute("UPDATE tinyq_jobs SET id = 'h@2026-12-01T10:01:00Z' WHERE id = 'by-hand'")
    schedule(db, "h", "q", "@every 1m")
    pin(db, t0 + 60_000)
    assert taken(db, "q") == []
    assert get(db, "h@2026-12-01T10:01:00Z")["payload"] == "by hand"
    assert schedules(db)["h"]["next_at"] == t0 + 120_000
    assert schedules(db)["h"]["last_id"] is None          # it added nothing


# --------------------------------------------------------------------------- exactly once, processes

CLAIMER = r"""
import json, os, sys, time
from helpers import connect, one, claim, settle
db_path, gate, t0, slots, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
db = connect(db_path, 30000)
open(f"{gate}.ready.{os.getpid()}", "w").close()
while not os.path.exists(gate):            # every process is ready: the test opens the gate
    time.sleep(0.001)
start = float(open(gate).read())
got, k = [], 0
while True:
    if t0:
        # Slot k is the pinned instant t0 + k minutes, entered once every process has been
        # through slot k - 1: all of them claim at every instant, however slow the machine.
        if k >= slots:
            break
        if k and one(db, "SELECT count(*) FROM visits WHERE k = ?", k - 1) < n:
            time.sleep(0.001)
            continue
        one(db, "SELECT tq_clock(?)", t0 + k * 60_000)
    else:
        # Real time is cut in 20 ms slots, the same for every process (time.monotonic is
        # system-wide).
        k = int((time.monotonic() - start) * 50)
        if k >= slots:
            break
    for row in claim(db, "q", "w", 50):
        got.append(row["id"])
        settle(db, row["id"], row["attempt"])
    if t0:
        one(db, "INSERT INTO visits VALUES (?, ?)", k, os.getpid())
        k += 1
    time.sleep(0.001)
print(json.dumps(got))
"""


def run_claimers(db_path, t0, slots, n=4):
    """n real processes claiming on queue 'q' through the same slots (pinned instants with
    t0, else 20 ms of real time); their claimed ids."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests"))
    gate = db_path + ".gate"
    if t0:
        conn = connect(db_path)
        conn.execute("CREATE TABLE visits (k INTEGER, pid INTEGER, PRIMARY KEY (k, pid))")
        conn.close()
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", CLAIMER, db_path, gate, str(t0), str(slots), str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(n)]
    deadline = time.monotonic() + 60
    while len([f for f in os.listdir(os.path.dirname(gate)) if ".gate.ready." in f]) < n:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a claimer did not start"
        time.sleep(0.01)
    with open(gate + ".tmp", "w") as f:
        f.write(str(time.monotonic() + 0.05))
    os.rename(gate + ".tmp", gate)
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    return outs


def test_CRON_01_four_processes_claiming_at_the_same_instants_add_each_due_time_once(db, db_path):
    t0 = ms("2026-12-01T10:00:00Z")
    pin(db, t0)
    # The processes go through the pinned instants together, one may be a slot ahead of
    # another: a long lease, so that it does not take back a job another one holds (JOB-04).
    setq(db, "q", lease="1d")
    schedule(db, "every-minute", "q", "* * * * *", missed="all")
    schedule(db, "every-2m", "q", "*/2 * * * *", missed="all")
    outs = run_claimers(db_path, t0, 40)
    # All four claimed at every instant (what makes the race), and left nothing due.
    assert one(db, "SELECT count(*) FROM visits") == 4 * 40
    pin(db, t0 + 39 * 60_000)
    assert taken(db, "q") == []
    claimed = [i for out in outs for i in out]
    expected = {f"every-minute@{iso(t0 + k * 60_000)}" for k in range(1, 40)} | \
               {f"every-2m@{iso(t0 + k * 60_000)}" for k in range(2, 40, 2)}
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    assert set(claimed) == expected
    assert set(job_ids(db, "q")) == expected


def test_CRON_01_four_processes_on_the_real_clock_add_each_due_time_once(db, db_path):
    start = int(time.time() * 1000)
    s = schedule(db, "fast", "q", "@every 100ms", missed="all")
    first = s["next_at"]
    outs = run_claimers(db_path, 0, 75)        # 1.5 s of claiming, every millisecond or so each
    claimed = [i for out in outs for i in out]
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    times = sorted(get(db, i)["run_at"] for i in job_ids(db, "q"))
    assert len(times) >= 10 and times[0] == first >= start
    assert times == [first + 100 * k for k in range(len(times))], "a due time was skipped or added twice"
    assert set(claimed) == set(job_ids(db, "q"))


# --------------------------------------------------------------------------- tq_wait

def test_CRON_01_tq_wait_wakes_for_the_next_due_time(db):
    s = schedule(db, "soon", "q", "@every 1s")
    assert one(db, "SELECT tq_wait('q', '10s')") == 1     # nothing else happens: the due time woke it
    assert int(time.time() * 1000) >= s["next_at"]
    assert taken(db, "q") == ["soon@" + iso(s["next_at"])]


# --------------------------------------------------------------------------- errors, flags

BAD = [
    (("d", "q", "61 * * * *", "{}"), "tq_schedule: when: bad cron expression '61 * * * *'"),
    (("d", "q", "* * *", "{}"), "tq_schedule: when: bad cron expression '* * *'"),
    (("d", "q", "@every 5 minutes", "{}"), "'5 minutes'"),
    (("d", "q", "@every 0s", "{}"), "tq_schedule: when: bad '@every' in '@every 0s'"),
    (("d", "q", "@fortnightly", "{}"), "'@fortnightly'"),
    (("d", "q", "0 0 30 2 *", "{}"), "tq_schedule: when '0 0 30 2 *' matches no time"),
    (("d", "q", "@daily", "{}", '{"tz": "Mars/Olympus"}'), "tq_schedule: option \"tz\": unknown time zone 'Mars/Olympus'"),
    (("d", "q", "@daily", "{}", '{"missed": "some"}'), "tq_schedule: option \"missed\": unknown value 'some'"),
    (("d", "q", "@daily", "{}", '{"colour": "red"}'), "tq_schedule: unknown option \"colour\""),
    (("d", "q", "@daily", "{}", '{"paused": "yes"}'), "tq_schedule: option \"paused\" must be true or false"),
    (("d", "q", "@daily", "{}", '{"priority": "high"}'), "tq_schedule: option \"priority\" must be an integer"),
    (("d", "q", "@daily", "{}", '{"meta": [1]}'), "tq_schedule: option \"meta\" must be a JSON object"),
    (("d", "q", "@daily", "{}", "not json"), "tq_schedule: options are not valid JSON"),
    (("d", "q", 5, "{}"), "tq_schedule: when must be text"),
    (("d", "q", "@daily", None), "tq_schedule: payload must not be NULL"),
    ((None, "q", "@daily", "{}"), "tq_schedule: name must be text"),
    (("tq_x", "q", "@daily", "{}"), "tq_schedule: name must not start with 'tq_'"),
    (("d", "", "@daily", "{}"), "tq_schedule: queue must not be empty"),
    (("n" * 976, "q", "@daily", "{}"), "tq_schedule: name is longer than 975 bytes"),
    (("d", "q", "@daily"), "tq_schedule: expects (name, queue, when, payload [, options])"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[m[13:60] for _, m in BAD])
def test_CRON_01_bad_input_is_an_error_naming_it_and_changes_nothing(db, args, message):
    pin(db, ms("2026-12-01T10:00:00Z"))
    schedule(db, "d", "q", "@hourly", '{"v": 1}')
    before = snapshot(db)
    marks = ", ".join("?" * len(args))
    with pytest.raises(sqlite3.OperationalError) as e:
        one(db, f"SELECT tq_schedule({marks})", *args)
    assert str(e.value).startswith(message) or (message in str(e.value) and str(e.value).startswith("tq_schedule: ")), \
        e.value
    assert snapshot(db) == before


def test_CRON_01_the_longest_name_makes_jobs_a_worker_can_settle(db):
    """The id '<name>@<time with ms>' of a schedule with the longest name still fits an id."""
    pin(db, ms("2026-12-01T10:00:00Z"))
    schedule(db, "n" * 975, "q", "@every 1500ms", "{}")
    pin(db, ms("2026-12-01T10:00:01.500Z"))
    [(jid, attempt)] = db.execute("SELECT id, attempt FROM tq_claim('q', 'w', 5)").fetchall()
    assert jid == "n" * 975 + "@2026-12-01T10:00:01.500Z"
    assert one(db, "SELECT tq_settle(?, ?, 'done')", jid, attempt) == 1


def test_CRON_01_unschedule_bad_input(db):
    for args, message in [((), "tq_unschedule: expects (name)"), ((5,), "tq_unschedule: name must be text")]:
        with pytest.raises(sqlite3.OperationalError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
            one(db, f"SELECT tq_unschedule({', '.join('?' * len(args))})", *args)
    assert one(db, "SELECT tq_unschedule('none')") == 0


def test_CRON_01_schedule_functions_are_directonly_and_the_table_innocuous(db):
    db.executescript("""
        PRAGMA trusted_schema = ON;
        CREATE TABLE plans(name TEXT);
        CREATE TABLE gone(name TEXT);
    """)
    for sql in ["CREATE TRIGGER plans_add AFTER INSERT ON plans BEGIN "
                "SELECT tq_schedule(NEW.name, 'q', '@daily', '{}'); END",
                "CREATE TRIGGER plans_del AFTER INSERT ON gone BEGIN SELECT tq_unschedule(NEW.name); END"]:
        db.execute(sql)
    with pytest.raises(sqlite3.OperationalError, match="unsafe use of tq_schedule"):
        db.execute("INSERT INTO plans VALUES ('x')")
    with pytest.raises(sqlite3.OperationalError, match="unsafe use of tq_unschedule"):
        db.execute("INSERT INTO gone VALUES ('x')")
    db.execute("DROP TRIGGER plans_add")
    db.execute("DROP TRIGGER plans_del")
    db.execute("CREATE VIEW v AS SELECT tq_schedule('v', 'q', '@daily', '{}') AS s")
    with pytest.raises(sqlite3.OperationalError, match="unsafe use of tq_schedule"):
        db.execute("SELECT * FROM v").fetchall()
    assert one(db, "SELECT count(*) FROM tq_schedules") == 0
    schedule(db, "ok", "q", "@daily")
    db.execute("PRAGMA trusted_schema = OFF")
    db.execute("CREATE VIEW listed AS SELECT name, \"when\" FROM tq_schedules")
    assert db.execute("SELECT * FROM listed").fetchall() == [("ok", "@daily")]


def test_CRON_01_readers_on_a_database_without_a_store_create_nothing(db):
    assert db.execute("SELECT * FROM tq_schedules").fetchall() == []
    assert one(db, "SELECT tq_unschedule('x')") == 0
    assert one(db, "SELECT count(*) FROM sqlite_master") == 0


# --------------------------------------------------------------------------- replay

REPLAY = [
    ("SELECT tq_clock(?)", (ms("2026-12-01T10:00:00Z"),)),
    ("SELECT tq_schedule('a', 'q', '*/5 * * * *', '{\"n\": 1}', '{\"missed\": \"all\", \"meta\": {\"t\": 1}}')", ()),
    ("SELECT tq_schedule('b', 'q', '@every 7m', '{}', '{\"group\": \"g\", \"priority\": 2}')", ()),
    ("SELECT tq_schedule('c', 'q', '0 11 * * *', '{}', '{\"tz\": \"Europe/Paris\", \"missed\": \"skip\"}')", ()),
    ("SELECT tq_add('q', '{}')", ()),
    ("SELECT tq_clock(?)", (ms("2026-12-01T10:31:00Z"),)),
    ("SELECT id FROM tq_claim('q', 'w', 3)", ()),
    ("SELECT tq_schedule('b', 'q', '@every 3m', '{}')", ()),
    ("SELECT tq_clock(?)", (ms("2026-12-01T12:02:00Z"),)),
    ("SELECT id FROM tq_claim('q', 'w', 100)", ()),
    ("SELECT tq_unschedule('a')", ()),
    ("SELECT tq_clock(?)", (ms("2026-12-02T10:00:00Z"),)),
    ("SELECT id FROM tq_claim('q', 'w', 100)", ()),
]


def test_CRON_01_REP_01_two_stores_running_the_same_statements_stay_identical(tmp_path):
    stores = [connect(str(tmp_path / f"s{k}.db")) for k in (1, 2)]
    results = [[s.execute(sql, args).fetchall() for sql, args in REPLAY] for s in stores]
    assert results[0] == results[1]
    assert len(results[0][9]) > 10     # the gap added jobs
    assert snapshot(stores[0]) == snapshot(stores[1])
    assert len(snapshot(stores[0])["tinyq_schedules"]) == 2


# --------------------------------------------------------------------------- helpers

def tinyq_module():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tinyq
    return tinyq


def test_CRON_01_python_helper_schedule_unschedule_schedules(db_path):
    tinyq = tinyq_module()
    q = tinyq.Queue(db_path, "mail")
    pin(q.conn, ms("2026-11-30T07:00:00Z"))
    s = q.schedule("digest", "0 9 * * mon", {"kind": "weekly-digest"}, tz="Europe/Paris",
                   meta={"team": "growth"}, priority=3)
    assert (s["queue"], s["tz"], s["payload"], s["meta"], s["priority"]) == \
        ("mail", "Europe/Paris", {"kind": "weekly-digest"}, {"team": "growth"}, 3)
    tinyq.Queue(q.conn, "other").schedule("elsewhere", "@hourly", "{}")
    assert [(x["name"], x["when"], x["next_at"], x["paused"]) for x in q.schedules()] == \
        [("digest", "0 9 * * mon", ms("2026-11-30T08:00:00Z"), False)]
    pin(q.conn, ms("2026-11-30T08:00:00Z"))
    (row,) = claim(q.conn, "mail", "w", 10)
    assert row["id"] == "digest@2026-11-30T08:00:00Z"
    with pytest.raises(sqlite3.OperationalError, match="^tq_schedule: option \"tz\": unknown time zone 'Paris'"):
        q.schedule("digest", "0 9 * * mon", {}, tz="Paris")
    assert q.unschedule("digest") is True and q.unschedule("digest") is False
    assert q.schedules() == []
    q.close()


def test_CRON_01_python_worker_runs_a_schedules_jobs(db_path):
    """End to end on the real clock: a schedule and Queue.work, which wakes for due times."""
    import threading
    tinyq = tinyq_module()
    q = tinyq.Queue(db_path, "ticks")
    q.schedule("tick", "@every 200ms", {"n": 1}, meta={"source": "cron"})
    seen = []

    def handler(payload, run):
        seen.append((run.id, payload))
        if len(seen) >= 3:
            q.stop()

    thread = threading.Thread(target=q.work, args=(handler,), kwargs={"poll": 5.0}, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the worker did not get three scheduled jobs"
    assert all(i.startswith("tick@") and p == {"n": 1} for i, p in seen)
    assert len({i for i, _ in seen}) == len(seen)
    assert q.get(seen[0][0])["meta"] == {"source": "cron"}
    q.close()


# --------------------------------------------------------------------------- claim cost

def test_CRON_01_the_claims_schedule_lookup_is_an_index_search(db):
    """What a claim adds for schedules is one statement; it must seek the index on
    (queue, next_at), not scan the schedules, so a claim does not slow down with the
    schedules of other queues. The statement is read back from tq_statements (the SQL this
    connection keeps prepared), as the claim ran it."""
    for k in range(200):
        schedule(db, f"s{k}", f"other{k % 7}", "@hourly")
    claim(db, "q", "w", 1)
    (lookup,) = [sql for sql, _ in db.execute("SELECT sql, cached FROM tq_statements")
                 if "FROM tinyq_schedules" in sql and "next_at <= ?2" in sql]
    plan = " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + lookup, ("q", 0)))
    assert "USING INDEX tinyq_schedules_due (queue=? AND next_at<?)" in plan, plan
    assert "SCAN" not in plan, plan


@pytest.mark.parametrize("tz,when,created,claimed,expected", [
    ("America/New_York", "30 1 * * *", "2026-10-30T12:00:00Z", "2026-11-03T12:00:00Z",
     ["2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", "2026-11-03T06:30:00Z"]),
    ("Europe/Paris", "30 2 * * *", "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z",
     ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]),
])
def test_CRON_01_missed_all_across_a_transition_adds_what_the_days_would_have(db, tz, when, created, claimed,
                                                                            expected):
    """A gap over a DST change, caught up with missed='all', adds the same due times as
    claims on every day would have (the walk back from now agrees with the walk forward)."""
    pin(db, ms(created))
    schedule(db, "n", "q", when, tz=tz, missed="all")
    pin(db, ms(claimed))
    assert taken(db, "q") == ["n@" + t for t in expected]
