"""A queue's settings (tq_queue): the defaults, reading and setting them, durations, pause,
and how they apply to claims and the attempt budget.
"""
import json

import pytest

from helpers import (DAY, HOUR, MIN, SEC, T0, add, claim, claim_one, connect, get, ids, one, pin, settle,
                     snapshot)
from helpers import setq as set_queue


# --------------------------------------------------------------------------- helpers

def read_queue(conn, name):
    text = one(conn, "SELECT tq_queue(?)", name)
    return None if text is None else json.loads(text)


# ---------------------------------------------------------------- tq_queue settings

DEFAULTS = {
    "lease": 30 * SEC, "timeout": HOUR, "attempts": 20, "backoff": SEC,
    "backoff_max": HOUR, "paused": False, "dedupe": DAY, "keep": 7 * DAY,
}
NONE_BY_DEFAULT = ("concurrency", "rate", "group_concurrency", "group_rate")


def test_queue_reads_defaults(db):
    add(db, "dq")
    settings = read_queue(db, "dq")
    for key, value in DEFAULTS.items():
        assert settings[key] == value, key
    for key in NONE_BY_DEFAULT:
        assert settings.get(key) is None, key


def test_queue_read_of_unused_queue_gives_defaults_and_changes_nothing(db):
    add(db, "used")
    before = snapshot(db)
    settings = read_queue(db, "unused")
    for key, value in DEFAULTS.items():
        assert settings[key] == value, key
    assert snapshot(db) == before


def test_queue_set_returns_effective_settings_persisted_and_partial(db, db_path):
    got = set_queue(db, "cfg", lease="2m", attempts=5)
    assert got["lease"] == 2 * MIN and got["attempts"] == 5
    assert got["timeout"] == HOUR and got["backoff"] == SEC and got["paused"] is False
    got = set_queue(db, "cfg", timeout="90s", backoff="250ms", backoff_max="1m", paused=True)
    assert got["lease"] == 2 * MIN and got["attempts"] == 5, "an update keeps other settings"
    assert got["timeout"] == 90 * SEC
    assert got["backoff"] == 250 and got["backoff_max"] == MIN and got["paused"] is True
    other = connect(db_path)
    try:
        assert read_queue(other, "cfg") == got
    finally:
        other.close()
    assert read_queue(db, "cfg") == got
    assert read_queue(db, "another")["lease"] == 30 * SEC, "settings are per queue"


@pytest.mark.parametrize("text,ms", [
    ("500ms", 500), ("30s", 30 * SEC), ("10m", 10 * MIN), ("1.5h", 90 * MIN),
    ("7d", 7 * DAY), (2500, 2500), ("0.5s", 500),
])
def test_queue_durations_accept_units_and_report_ms(db, text, ms):
    assert set_queue(db, "units", lease=text)["lease"] == ms
    assert read_queue(db, "units")["lease"] == ms


def test_queue_paused_jobs_are_not_claimed(db):
    pin(db, T0)
    jid = add(db, "pz")
    assert set_queue(db, "pz", paused=True)["paused"] is True
    assert claim(db, "pz", "w", 10) == []
    assert get(db, jid)["state"] == "waiting"
    add(db, "pz", id="added-while-paused")
    assert claim(db, "pz", "w", 10) == []
    set_queue(db, "pz", paused=False)
    assert ids(claim(db, "pz", "w", 10)) == [jid, "added-while-paused"]


def test_queue_settings_apply_to_claims_and_budget(db):
    pin(db, T0)
    set_queue(db, "eff", lease="45s", timeout="2m", attempts=1)
    jid = add(db, "eff")
    row = claim_one(db, "eff")
    assert row["lease_until"] == T0 + 45 * SEC
    assert row["deadline"] == T0 + 2 * MIN
    assert settle(db, jid, 1, "error", "only once") == 1
    assert get(db, jid)["state"] == "failed"
