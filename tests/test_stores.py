"""tests/stores.py, the cache of the big stores test_cost.py and test_pages.py measure: a
store is built once per key and code, each test gets a copy of its own, a complete one."""
import os
import sqlite3

import stores
from helpers import add, connect, one


def builder(calls, jobs):
    def build(path):
        calls.append(path)
        db = connect(path)          # WAL: what the build leaves in the -wal is in the copy too
        for n in range(jobs):
            add(db, "q", id="j%d" % n)
        db.close()
    return build


def test_a_store_is_built_once_and_each_test_gets_its_own_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYQ_STORE_CACHE", str(tmp_path / "cache"))
    calls = []
    first = stores.store(str(tmp_path / "a.db"), "five jobs", builder(calls, 5), [__file__])
    db = connect(first)
    assert one(db, "SELECT waiting FROM tq_stats('q')") == 5
    add(db, "q", id="mine")                 # a test writes to its copy...
    db.close()
    second = stores.store(str(tmp_path / "b.db"), "five jobs", builder(calls, 5), [__file__])
    assert len(calls) == 1                  # built once
    db = connect(second)
    assert one(db, "SELECT waiting FROM tq_stats('q')") == 5   # ...not to the next test's
    db.close()
    [entry] = os.listdir(tmp_path / "cache")                   # no -wal, -shm or build left
    assert os.path.dirname(calls[0]) == str(tmp_path / "cache")  # built beside it, renamed
    plain = sqlite3.connect(str(tmp_path / "cache" / entry))   # complete without its -wal
    assert plain.execute("SELECT count(*) FROM tinyq_jobs").fetchone()[0] == 5
    plain.close()


def test_a_store_of_another_key_or_code_is_built_again_and_the_stale_entry_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYQ_STORE_CACHE", str(tmp_path / "cache"))
    calls = []
    stores.store(str(tmp_path / "a.db"), "jobs", builder(calls, 2), [__file__])
    stores.store(str(tmp_path / "b.db"), "other jobs", builder(calls, 3), [__file__])
    assert len(calls) == 2 and len(os.listdir(tmp_path / "cache")) == 2
    code = tmp_path / "code.py"             # the code that builds "jobs" changes
    code.write_text("v1")
    stores.store(str(tmp_path / "c.db"), "jobs", builder(calls, 2), [__file__, str(code)])
    assert len(calls) == 3 and len(os.listdir(tmp_path / "cache")) == 2
    stores._file_digest.cache_clear()
    code.write_text("v2")
    stores.store(str(tmp_path / "d.db"), "jobs", builder(calls, 4), [__file__, str(code)])
    assert len(calls) == 4 and len(os.listdir(tmp_path / "cache")) == 2
    db = connect(str(tmp_path / "d.db"))
    assert one(db, "SELECT waiting FROM tq_stats('q')") == 4
    db.close()


def test_off_builds_every_store_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYQ_STORE_CACHE", "off")
    calls = []
    for name in ("a.db", "b.db"):
        stores.store(str(tmp_path / name), "jobs", builder(calls, 1), [__file__])
    assert calls == [str(tmp_path / "a.db"), str(tmp_path / "b.db")]
    assert sorted(os.listdir(tmp_path)) == ["a.db", "b.db"]
