"""The load-time check: tinyq refuses, with a message naming both versions, a SQLite older
than the oldest it is tested on, before it reads anything else of SQLite's routines table.

The older SQLite is real: 3.34.0, built by scripts/sqlite_old.sh the way
scripts/sqlite_current.sh builds the current one (about 40 s the first time, then cached).
"""
import os
import sqlite3
import subprocess

import pytest

from helpers import EXT, ROOT

# MIN_VERSION in src/sqlite/load.rs: Debian 12's SQLite, the oldest the suite runs on.
MIN = "3.40.1"


OLD = os.path.join(ROOT, "scripts", "sqlite_old.sh")


@pytest.fixture(scope="module")
def old_sqlite():
    """SQLite 3.34.0 built (or found in its cache) before any test times a call to it: the
    build takes some 40 s on an idle machine and many minutes on a loaded one."""
    built = subprocess.run(["bash", OLD], capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stdout + built.stderr


def old_shell(script):
    return subprocess.run(["bash", OLD, "sqlite3", ":memory:"],
                          input=script, capture_output=True, text=True, timeout=600)


def test_an_older_sqlite_refuses_to_load_tinyq_naming_both_versions(old_sqlite):
    r = old_shell(f".load {EXT}\nSELECT 'still ' || sqlite_version();\n")
    assert r.returncode != 0, r
    assert f"tinyq: needs SQLite {MIN} or newer (the oldest it is tested on), " \
           "but was loaded into SQLite 3.34.0" in r.stderr, r.stderr
    # The host lives on, and nothing of tinyq was registered.
    assert r.stdout.strip() == "still 3.34.0", r
    r = old_shell(f".load {EXT}\nSELECT tq_version();\n")
    assert "no such function: tq_version" in r.stderr, r.stderr


def test_the_minimum_is_the_oldest_sqlite_the_suite_runs_on_and_it_loads():
    if os.environ.get("TINYQ_SQLITE_CURRENT"):
        pytest.skip("under scripts/sqlite_current.sh this SQLite is the current one, not the oldest")
    assert sqlite3.sqlite_version == MIN
    conn = sqlite3.connect(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(EXT)
    assert conn.execute("SELECT tq_version()").fetchone()[0]
