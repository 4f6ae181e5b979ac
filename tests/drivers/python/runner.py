#!/usr/bin/env python3
"""The driver scenario (tests/drivers/scenario.json) through Python's sqlite3 or apsw.

    python3 runner.py sqlite3|apsw TINYQ_SO SCENARIO DB
"""
import json
import sys


def open_sqlite3(so, db):
    import sqlite3
    conn = sqlite3.connect(db, isolation_level=None)     # autocommit: each step commits
    conn.enable_load_extension(True)
    conn.load_extension(so)
    conn.enable_load_extension(False)
    return conn, "Python %s sqlite3" % sys.version.split()[0], sqlite3.Error


def open_apsw(so, db):
    import apsw
    conn = apsw.Connection(db)
    conn.enableloadextension(True)      # the old names: Debian 12's apsw 3.40 has only these
    conn.loadextension(so)
    conn.enableloadextension(False)
    return conn, "apsw %s" % apsw.apswversion(), apsw.Error


OPENERS = {"sqlite3": open_sqlite3, "apsw": open_apsw}


def same(expected, actual):
    """Same value and same type: 1 is not '1', and True never stands for 1."""
    return [[(type(c), c) for c in row] for row in expected] == [[(type(c), c) for c in row] for row in actual]


def play(conn, errors, steps):
    """The first step that does not answer as written, as a reason; None when all do."""
    for step in steps:
        try:
            rows = [list(r) for r in conn.execute(step["sql"], step["args"]).fetchall()]
        except errors as e:
            if "error" in step and step["error"] in str(e):
                continue
            return "%s: unexpected error %r" % (step["name"], str(e))
        if "error" in step:
            return "%s: no error, got %r" % (step["name"], rows)
        if not same(step["rows"], rows):
            return "%s: expected %r, got %r" % (step["name"], step["rows"], rows)
    return None


def main():
    kind, so, scenario, db = sys.argv[1:5]
    name = "python-" + kind
    try:
        conn, driver, errors = OPENERS[kind](so, db)
        version = conn.execute("SELECT sqlite_version()").fetchall()[0][0]
        with open(scenario) as f:
            reason = play(conn, errors, json.load(f)["steps"])
    except Exception as e:          # a load that fails is a result too, not a traceback
        reason = "%s: %s" % (type(e).__name__, e)
    if reason:
        print("%s: failed: %s" % (name, reason))
        sys.exit(1)
    print("%s: passed (SQLite %s; %s)" % (name, version, driver))


if __name__ == "__main__":
    main()
