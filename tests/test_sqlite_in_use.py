"""Which SQLite the suite runs on: Python's sqlite3 module, a Python subprocess and the sqlite3
shell on PATH all use the same one, and it is the current SQLite when the run was started by
scripts/sqlite_current.sh (`make test-python-current`, issue 7), which sets
TINYQ_SQLITE_CURRENT. Uses only the standard library (nothing from tests/helpers.py)."""
import os
import sqlite3
import subprocess

SUBPROCESS = "import sqlite3; print(sqlite3.sqlite_version)"


def test_python_subprocesses_and_the_shell_use_one_sqlite():
    child = subprocess.run(["/usr/bin/python3", "-c", SUBPROCESS], capture_output=True,
                           text=True, timeout=60, check=True).stdout.strip()
    shell = subprocess.run(["sqlite3", ":memory:", "SELECT sqlite_version()"], capture_output=True,
                           text=True, timeout=60, check=True).stdout.strip()
    assert child == sqlite3.sqlite_version, (child, sqlite3.sqlite_version)
    assert shell == sqlite3.sqlite_version, (shell, sqlite3.sqlite_version)
    wanted = os.environ.get("TINYQ_SQLITE_CURRENT")
    if wanted:
        assert sqlite3.sqlite_version == wanted, (sqlite3.sqlite_version, wanted)
        assert sqlite3.sqlite_version_info >= (3, 45), sqlite3.sqlite_version
