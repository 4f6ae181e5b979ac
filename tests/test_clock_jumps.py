"""Clock jumps: the wall clock of every worker and producer steps an hour forward, back, and
forward again while they work (tests/support/clockshift.c, LD_PRELOADed: CLOCK_REALTIME moves, the
monotonic clock does not, as with an NTP step or `date -s`).

The processes are the soak's (tests/support/soak.py: Python and Node producers, 5 Python and 3
Node workers; no SIGKILLs here, and this process, on the real clock, only reads tq_watch).
Phases, each of PHASE seconds and STARTS job starts at least (so a slow machine stretches
them rather than leaving one without work): real time; +1 h (a forward step: every lease and
every attempt's 1 h timeout looks expired, scheduled jobs fall due); back to real time (a
backward step: whatever was dated during the hour ahead - jobs added, retries scheduled, rate
starts - now lies an hour in the future); +1 h again (the clock has "caught up" with those
dates); then the producers stop and the backlog drains.

Checked (docs/guarantees.md, "Clock jumps"): every job added ends done, exactly once, none
stuck once the clock is past the dates it wrote; no step is done again by a later attempt;
the limits hold as counted in the claimers' clock (tq_watch replayed); handlers really
running at once (the workers' monotonic clocks) stay within concurrency plus the jobs a
forward step took from their live holders (those attempts are fenced: they settle nothing).
"""
import os
import shutil
import struct
import subprocess
import tempfile
import time

import pytest

from support.soak import Soak

HERE = os.path.dirname(os.path.abspath(__file__))
HOUR_MS = 3_600_000
PHASE = 5.0             # seconds, at least, of each clock
STARTS = 20             # jobs started, at least, under each clock
PHASE_DEADLINE = 120    # seconds: a phase short of STARTS by then fails the test
SKIP = float(os.environ.get("TINYQ_SOAK_SECONDS", "60")) <= 0
# A lease of 10 s: long enough that here the steps end leases, not a busy machine's delays.
SETTINGS = {"lease": "10s", "concurrency": 4, "rate": "30/1s", "group_concurrency": 2,
            "backoff": "100ms", "backoff_max": "1s", "dedupe": "2h", "keep": "2h"}


@pytest.fixture(scope="module")
def clockshift(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clockshift")
    so = str(folder / "clockshift.so")
    built = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", so, os.path.join(HERE, "support", "clockshift.c"), "-ldl"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return so


class Shift:
    """The shift file every process maps: writing it moves their wall clocks at once."""

    def __init__(self, path):
        self.path = path
        with open(path, "wb") as f:
            f.write(struct.pack("<q", 0))
        self.fd = os.open(path, os.O_WRONLY)
        self.now = 0

    def set(self, ms):
        if ms != self.now:
            os.pwrite(self.fd, struct.pack("<q", ms), 0)
            self.now = ms


def run_with_jumps(folder, so, phases):
    """Each phase lasts PHASE seconds and until STARTS jobs started in it, so that on a slow
    machine too every clock sees work (the workers may take longer than a phase to start)."""
    shift = Shift(os.path.join(folder, "shift"))
    env = {"LD_PRELOAD": so, "TINYQ_CLOCK_SHIFT_FILE": shift.path,
           "TINYQ_SOAK_KINDS": "ok,ok,ok,steps,steps,retry,snooze,error,slow", "TINYQ_SOAK_CANCELS": "0"}
    soak = Soak(PHASE * len(phases), folder, seed=23, settings=SETTINGS, env=env, kill=False, operator=False)
    began, starts_in, ticks_in = [0.0], [0], [0]   # per phase begun: its start, counts at its end

    def tick(t):
        starts_in[-1] = sum(1 for e in soak.events if e[2] == "running") - sum(starts_in[:-1])
        ticks_in[-1] = len(soak.ticks()) - sum(ticks_in[:-1])
        if t - began[-1] < PHASE or starts_in[-1] < STARTS:
            return False
        if len(began) == len(phases):
            return True             # the last phase is over
        shift.set(phases[len(began)])
        began.append(t)
        starts_in.append(0)
        ticks_in.append(0)
        return False

    try:
        soak.start()
        soak.loop(PHASE_DEADLINE * len(phases), tick)
        began.append(time.monotonic() - soak.t0)
        soak.drain(timeout=PHASE_DEADLINE)
    finally:
        soak.shutdown()
    report = soak.audit()
    report["phase_seconds"] = [round(b - a, 1) for a, b in zip(began, began[1:])]
    report["starts_by_phase"] = starts_in
    report["schedule_jobs_by_phase"] = ticks_in
    report["leases_expired"] = sum(1 for e in soak.events if e[2] == "waiting" and e[5] == "lease expired")
    return report


@pytest.mark.skipif(SKIP, reason="TINYQ_SOAK_SECONDS=0")
def test_clock_steps_an_hour_forward_and_back_nothing_lost_or_stuck_limits_as_documented(clockshift):
    folder = tempfile.mkdtemp(prefix="tinyq-jump-")
    try:
        report = run_with_jumps(folder, clockshift, [0, HOUR_MS, 0, HOUR_MS])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nclock jumps (phases 0, +1h, 0, +1h of {PHASE:.0f} s or more): {report}")
    # Jobs kept starting whatever the clock did (a step back stalls nothing for its length).
    assert len(report["starts_by_phase"]) == 4 and min(report["starts_by_phase"]) >= STARTS, report
    assert report["done"] == report["added"]
    # The forward steps were felt: live leases looked expired, their jobs were claimed again
    # while the first attempt still ran; so, briefly, more handlers ran than the concurrency,
    # by at most the leases that ended (each step ends at most `concurrency` of them; on a
    # starved machine a lease can also run out on its own, which the bound counts too).
    assert report["leases_expired"] > 0
    concurrency = SETTINGS["concurrency"]
    assert report["most_handlers_at_once"] <= concurrency + report["leases_expired"], report


def test_clock_back_a_rate_limited_queue_keeps_starting_jobs(db):
    """Starts recorded while the clock was an hour ahead count as starts made when the clock
    came back: the queue starts again one window later, not an hour later."""
    from helpers import add, claim, one, pin, setq, settle
    t = 1_800_000_000_000
    pin(db, t + HOUR_MS)
    setq(db, "r", rate="2/1s")
    for _ in range(6):
        add(db, "r")
    started = claim(db, "r", n=5)
    assert len(started) == 2                    # the rate holds
    for job in started:
        settle(db, job["id"], job["attempt"])
    pin(db, t + 5_000)                          # the clock is stepped back an hour
    now_job = one(db, "SELECT tq_add('r', '{}')")  # due now (the other four are due in an hour)
    assert claim(db, "r", n=5) == []               # two starts a moment ago fill the window
    pin(db, t + 6_001)                             # one window later, not an hour
    assert [j["id"] for j in claim(db, "r", n=5)] == [now_job]
    assert one(db, "SELECT started_in_window FROM tq_stats('r')") == 1
