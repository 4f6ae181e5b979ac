"""The Python helpers (tinyq.Queue, tinyq.AsyncQueue) with tq_add's `expires`, `on_conflict`
and `max_wait` (EXP-01, KEY-01), and add_many: many adds in one transaction and one statement."""
import asyncio
import datetime
import json
import os
import sqlite3
import sys

import pytest

from helpers import ROOT, SEC, T0, connect, get, one

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402


@pytest.fixture
def queue(db_path):
    q = tinyq.Queue(db_path, "q")
    one(q.conn, "SELECT tq_clock(?)", T0)
    yield q
    q.close()


def test_KEY_01_EXP_01_add_takes_expires_on_conflict_and_max_wait(queue):
    assert queue.add({"v": 1}, id="d", delay="10s", on_conflict="debounce", max_wait="1m",
                     expires=datetime.timedelta(minutes=5)) == "d"
    one(queue.conn, "SELECT tq_clock(?)", T0 + 5 * SEC)
    queue.add({"v": 2}, id="d", delay=datetime.timedelta(seconds=10), on_conflict="debounce",
              max_wait=datetime.timedelta(minutes=1))
    job = queue.get("d")
    assert (job["payload"], job["run_at"], job["expires"]) == ({"v": 2}, T0 + 15 * SEC, None)
    # expires: a timedelta or text is a duration from now; a datetime, ms or ISO text a time.
    at = datetime.datetime.fromtimestamp((T0 + 60 * SEC) / 1000, tz=datetime.timezone.utc)
    for i, (expires, bound) in enumerate([(datetime.timedelta(seconds=30), T0 + 35 * SEC), ("30s", T0 + 35 * SEC),
                                          (at, T0 + 60 * SEC), (T0 + 60 * SEC, T0 + 60 * SEC),
                                          ("2027-01-15T08:01:00Z", T0 + 60 * SEC)]):
        assert queue.get(queue.add({}, id=f"e{i}", expires=expires))["expires"] == bound
    assert queue.add({"v": 3}, id="d", on_conflict="replace", priority=4) == "d"
    assert (queue.get("d")["payload"], queue.get("d")["priority"]) == ({"v": 3}, 4)
    with pytest.raises(sqlite3.OperationalError, match="tq_add: option \"max_wait\" goes with"):
        queue.add({}, id="x", max_wait="1s")


def test_add_many_adds_in_order_in_one_transaction_and_one_statement(queue):
    seen = []
    queue.conn.set_trace_callback(seen.append)
    ids = queue.add_many([{"n": 1}, "plain text", 3, [4]], priority=2, meta={"batch": 7})
    queue.conn.set_trace_callback(None)
    top = [s for s in seen if not s.startswith("--")]  # (tinyq's own statements are traced as "-- ...")
    assert len(top) == 3 and top[0] == "BEGIN IMMEDIATE" and top[2] == "COMMIT", top
    assert top[1].startswith("SELECT tq_add('q', value, ") and "FROM json_each(" in top[1], top
    assert len(ids) == 4 and len(set(ids)) == 4
    jobs = [queue.get(i) for i in ids]
    assert [j["payload"] for j in jobs] == [{"n": 1}, "plain text", 3, [4]]
    assert {(j["priority"], json.dumps(j["meta"])) for j in jobs} == {(2, '{"batch": 7}')}
    assert [r[0] for r in queue.conn.execute("SELECT payload FROM tq_claim('q', 'w', 10)")] == [
        '{"n": 1}', "plain text", "3", "[4]"]
    assert queue.add_many([]) == []


def test_add_many_with_ids_dedupes_replaces_and_debounces_each(queue):
    assert queue.add_many([{"v": 1}, {"v": 1}], ids=["a", "b"]) == ["a", "b"]
    assert queue.add_many([{"v": 2}, {"v": 2}], ids=["a", "b"]) == ["a", "b"]  # keep: nothing
    assert [queue.get(i)["payload"] for i in "ab"] == [{"v": 1}, {"v": 1}]
    queue.add_many([{"v": 3}, {"v": 3}, {"v": 3}], ids=["a", "b", "c"], on_conflict="debounce", delay="1m",
                   expires="1h")
    assert [(queue.get(i)["payload"], queue.get(i)["state"], queue.get(i)["expires"]) for i in "abc"] == [
        ({"v": 3}, "scheduled", T0 + 3600 * SEC)] * 3
    with pytest.raises(ValueError, match="2 ids for 1 payloads"):
        queue.add_many([{}], ids=["x", "y"])


def test_add_many_is_all_or_nothing(queue):
    with pytest.raises(sqlite3.OperationalError, match="tq_add: option \"id\" must not start with 'tq_'"):
        queue.add_many([{}, {}, {}], ids=["ok-1", "ok-2", "tq_reserved"])
    assert one(queue.conn, "SELECT count(*) FROM tq_jobs") == 0
    assert not queue.conn.in_transaction


def test_add_many_inside_the_callers_transaction_is_a_savepoint(queue):
    conn = queue.conn
    conn.execute("BEGIN IMMEDIATE")
    queue.add({}, id="mine")
    with pytest.raises(sqlite3.OperationalError):
        queue.add_many([{}, {}], ids=["x1", "tq_bad"])
    assert conn.in_transaction  # the caller's transaction goes on, with its own add
    queue.add_many([{}, {}], ids=["y1", "y2"])
    conn.execute("COMMIT")
    assert sorted(r[0] for r in conn.execute("SELECT id FROM tq_jobs")) == ["mine", "y1", "y2"]
    conn.execute("BEGIN")
    queue.add_many([{}], ids=["gone"])
    conn.execute("ROLLBACK")
    assert get(conn, "gone") is None


def test_add_many_on_an_apsw_connection(db_path):
    apsw = pytest.importorskip("apsw")
    conn = tinyq.load(apsw.Connection(db_path))
    q = tinyq.Queue(conn, "q")
    assert len(q.add_many([{"k": 1}, {"k": 2}])) == 2
    with pytest.raises(apsw.SQLError):
        q.add_many([{}, {}], ids=["fine", "tq_no"])
    assert conn.getautocommit()
    assert one(connect(db_path), "SELECT count(*) FROM tq_jobs") == 2
    conn.close()


def test_async_queue_add_and_add_many_take_the_same_options(db_path):
    async def main():
        q = tinyq.AsyncQueue(db_path, "q")
        first = await q.add({"v": 1}, id="d", on_conflict="debounce", delay="1h", expires="2h")
        again = await q.add({"v": 2}, id="d", on_conflict="debounce", delay="1h", max_wait="90m")
        ids = await q.add_many([{"n": i} for i in range(3)], priority=1)
        with_ids = await q.add_many([{"n": 9}], ids=["d"], on_conflict="replace")
        return first, again, ids, with_ids, await q.get("d"), [await q.get(i) for i in ids]
    first, again, ids, with_ids, job, added = asyncio.run(main())
    assert first == again == "d" and with_ids == ["d"]
    assert (job["payload"], job["state"], job["expires"]) == ({"n": 9}, "waiting", None)
    assert [(j["payload"], j["priority"]) for j in added] == [({"n": i}, 1) for i in range(3)]
