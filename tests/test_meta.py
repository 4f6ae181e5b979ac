"""Job meta: a JSON object kept beside the payload (a correlation id, a tenant, tags).

It is returned by tq_get, listed by tq_jobs, given by tq_claim's hidden `meta` column, and is
never part of dedupe: the first add's meta stays.
"""
import json
import sqlite3

import pytest

from helpers import add, claim, get, one, snapshot

META = {"trace": "abc-123", "tenant": "acme", "tags": ["billing", "eu"]}


def test_meta_is_kept_beside_the_payload_and_returned_by_tq_get(db):
    add(db, "q", '{"n": 1}', id="j1", meta=META)
    job = get(db, "j1")
    assert job["meta"] == META
    assert job["payload"] == {"n": 1}
    add(db, "q", '{"n": 2}', id="j2")
    assert get(db, "j2")["meta"] is None


def test_meta_is_kept_as_given_its_big_numbers_key_order_and_keys_given_twice(db):
    """As the payload is: a meta read back through a number type or a map would lose its
    big integers, its key order and a key given twice (JSON says nothing of those)."""
    given = '{"zeta": 1, "order_id": 123456789012345678901234567890, "alpha": 0.1000000000000000055, "k": 1, "k": 2}'
    one(db, "SELECT tq_add('q', '{}', json_object('id', 'j1', 'meta', json(?)))", given)
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"j2\", \"meta\": ' || ? || '}')", given)
    kept = [one(db, "SELECT meta FROM tq_jobs WHERE id = ?", i) for i in ("j1", "j2")]
    assert kept[1] == given
    assert kept[0] == one(db, "SELECT json(?)", given)      # what json() made of it, as it made it
    assert '"zeta": 1, "order_id": 123456789012345678901234567890' in one(db, "SELECT tq_get('j2')")


def test_meta_is_listed_by_tq_jobs(db):
    add(db, "q", id="j1", meta=META)
    add(db, "q", id="j2")
    rows = dict(db.execute("SELECT id, meta FROM tq_jobs WHERE queue = 'q'").fetchall())
    assert json.loads(rows["j1"]) == META and rows["j2"] is None
    cols = [c[0] for c in db.execute("SELECT * FROM tq_jobs").description]
    assert cols[-1] == "meta" and cols[:3] == ["id", "queue", "state"]


def test_claim_select_star_is_unchanged_and_meta_is_a_hidden_column(db):
    add(db, "q", '{"n": 1}', id="j1", meta=META)
    add(db, "q", '{"n": 2}', id="j2")
    cur = db.execute("SELECT * FROM tq_claim('q', 'w', 10)")
    assert [c[0] for c in cur.description] == ["id", "attempt", "payload", "group_key", "lease_until", "deadline"]
    assert len(cur.fetchall()) == 2
    add(db, "q", '{"n": 3}', id="j3", meta={"tenant": "t3"})
    add(db, "q", '{"n": 4}', id="j4")
    rows = db.execute("SELECT id, attempt, payload, meta FROM tq_claim('q', 'w', 10)").fetchall()
    assert [(r[0], r[1], json.loads(r[2]), r[3] and json.loads(r[3])) for r in rows] == [
        ("j3", 1, {"n": 3}, {"tenant": "t3"}), ("j4", 1, {"n": 4}, None)]


def test_claim_arguments_bind_as_before_with_the_meta_column(db):
    """queue, worker, n, options still bind to their hidden columns; a fifth is an error."""
    one(db, "SELECT tq_clock(1000000)")
    add(db, "q", id="j1", meta=META)
    rows = db.execute("SELECT id, lease_until, meta FROM tq_claim('q', 'w', 1, '{\"lease\": \"5s\"}')").fetchall()
    assert [(r[0], r[1], json.loads(r[2])) for r in rows] == [("j1", 1_005_000, META)]
    add(db, "q", id="j2")
    before = snapshot(db)
    with pytest.raises(sqlite3.OperationalError, match=r"^tq_claim: expects \(queue, worker, n \[, options\]\)"):
        db.execute("SELECT * FROM tq_claim('q', 'w', 1, NULL, '{}')").fetchall()
    assert snapshot(db) == before
    # The named-column form binds the same way.
    rows = db.execute("SELECT id, meta FROM tq_claim WHERE queue = 'q' AND worker = 'w' AND n = 5").fetchall()
    assert rows == [("j2", None)]


def test_dedupe_keeps_the_first_adds_meta(db):
    add(db, "q", '{"n": 1}', id="once", meta={"first": True})
    assert add(db, "q", '{"n": 2}', id="once", meta={"second": True}) == "once"
    assert get(db, "once")["meta"] == {"first": True}
    assert one(db, "SELECT count(*) FROM tq_jobs WHERE id = 'once'") == 1


@pytest.mark.parametrize("bad,kind", [('"acme"', "a string"), ("[1, 2]", "an array"), ("7", "a number"),
                                      ("true", "a boolean")])
def test_meta_that_is_not_an_object_is_an_error_naming_meta(db, bad, kind):
    add(db, "q", id="before")
    before = snapshot(db)
    with pytest.raises(sqlite3.OperationalError) as e:
        one(db, "SELECT tq_add('q', '{}', ?)", '{"id": "x", "meta": %s}' % bad)
    assert str(e.value).startswith('tq_add: option "meta" must be a JSON object'), e.value
    assert kind in str(e.value)
    assert snapshot(db) == before


def test_meta_null_means_none(db):
    one(db, "SELECT tq_add('q', '{}', '{\"id\": \"n\", \"meta\": null}')")
    assert get(db, "n")["meta"] is None


def test_meta_travels_with_a_job_added_by_a_trigger(db):
    db.executescript("""
        PRAGMA trusted_schema = ON;
        CREATE TABLE orders(id INTEGER PRIMARY KEY, tenant TEXT);
        CREATE TRIGGER orders_ship AFTER INSERT ON orders BEGIN
            SELECT tq_add('ship', json_object('order', NEW.id),
                          json_object('id', 'ship:' || NEW.id, 'meta', json_object('tenant', NEW.tenant)));
        END;
    """)
    db.execute("INSERT INTO orders VALUES (7, 'acme')")
    (row,) = claim(db, "ship")
    assert row["id"] == "ship:7"
    assert get(db, "ship:7")["meta"] == {"tenant": "acme"}
