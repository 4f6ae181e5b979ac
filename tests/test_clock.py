"""The clock (tq_clock, tq_now), the build's description (tq_version, tq_debug), and what
loading and reading leave alone: no store is created until the first write.
"""
import json
import os
import re
import time

import pytest

from helpers import ROOT, SEC, T0, add, connect, one, pin


# --------------------------------------------------------------------------- helpers

T0_ISO = "2027-01-15T08:00:00Z"


def tinyq_tables(conn):
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE name LIKE 'tinyq%'")]


# ---------------------------------------------------------------- clock, version, debug

def test_clock_pins_now_for_this_connection_only_and_null_unpins(db, db_path):
    before = int(time.time() * 1000)
    now = one(db, "SELECT tq_now()")
    after = int(time.time() * 1000)
    assert isinstance(now, int)
    assert before - 1000 <= now <= after + 1000, "unpinned tq_now() must follow the system clock"

    pin(db, T0)
    assert one(db, "SELECT tq_now()") == T0
    assert one(db, "SELECT tq_now()") == T0, "a pinned clock does not move"

    other = connect(db_path)
    try:
        assert abs(one(other, "SELECT tq_now()") - time.time() * 1000) < 5000, \
            "pinning is per connection"
    finally:
        other.close()

    pin(db, T0 + 5 * SEC)
    assert one(db, "SELECT tq_now()") == T0 + 5 * SEC

    pin(db, None)
    assert abs(one(db, "SELECT tq_now()") - time.time() * 1000) < 5000, "tq_clock(NULL) unpins"


@pytest.mark.parametrize("text,ms", [
    (T0_ISO, T0),
    ("2027-01-15T08:00:00.250Z", T0 + 250),
    ("2027-01-15T10:00:00+02:00", T0),
    ("2026-11-29T12:00:00Z", 1_795_953_600_000),
])
def test_clock_accepts_iso_8601_text(db, text, ms):
    pin(db, text)
    assert one(db, "SELECT tq_now()") == ms


def test_version_and_debug_describe_the_build(db):
    cargo = open(os.path.join(ROOT, "Cargo.toml")).read()
    version = re.search(r'^version\s*=\s*"([^"]+)"', cargo, re.M).group(1)
    v = one(db, "SELECT tq_version()")
    assert isinstance(v, str) and version in v
    d = one(db, "SELECT tq_debug()")
    assert isinstance(d, str)
    assert version in d
    assert one(db, "SELECT sqlite_version()") in d, "tq_debug names the SQLite version"
    assert "schema" in d.lower(), "tq_debug names the schema version"


def test_loading_and_reading_functions_create_no_store(db):
    assert one(db, "SELECT tq_version()")
    assert one(db, "SELECT tq_debug()")
    assert one(db, "SELECT tq_now()")
    pin(db, T0)
    assert one(db, "SELECT tq_get('nope')") is None
    one(db, "SELECT tq_queue('q')")
    assert tinyq_tables(db) == []
    add(db, "q")
    assert "tinyq_jobs" in tinyq_tables(db)


def test_queue_read_on_database_without_store_shows_defaults(db):
    """docs/design.md: reading tq_queue on a database without a store returns the
    effective (default) settings and creates nothing."""
    settings = json.loads(one(db, "SELECT tq_queue('q')"))
    assert settings["queue"] == "q" and settings["lease"] == 30000 and settings["attempts"] == 20
    assert tinyq_tables(db) == []
