"""tq_get and tq_schedule_get show every stored value as it is stored: JSON text byte for
byte (big numbers, duplicate keys, nesting to 500 levels and spacing kept; deeper, as text), other text as a JSON
string, numbers as numbers, and `payload_type` tells apart what would otherwise look
alike ('"hello"' and hello, 42 and '42'). So a tool that takes the payload from their
JSON and writes it back (the dashboard's schedule pause and resume) keeps it byte for byte.
"""
import json

import pytest

from helpers import claim, get, one

DEEP = "[" * 500 + "]" * 500
DEEPER = "[" * 501 + "]" * 501  # past what JSON readers take inside tq_get's object: shown as text
PAYLOADS = [
    # (what is stored, its payload_type)
    ('{"n": 12345678901234567890123}', "json"),
    ('"hello"', "json"),
    ("hello", "text"),
    (42, "integer"),
    ("42", "json"),
    (1.5, "real"),
    ('{"a": 1, "a": 2}', "json"),
    (DEEP, "json"),
    (DEEPER, "text"),
    ('{ "spaced" :  [1, 2] }', "json"),
    ('{"é": "\\u00e9", "s": "tab\\tnewline\\n"}', "json"),
    ("not json: {", "text"),
    ("  ", "text"),
]
IDS = ["big", "json-string", "text", "int", "text-42", "real", "duplicate-keys", "deep", "deeper", "spacing",
       "escapes", "broken", "blank"]


def span(text, key):
    """The JSON text of `key`'s value in the object `text`, exactly as it appears."""
    at = text.index(json.dumps(key) + ":") + len(json.dumps(key)) + 1
    _, end = json.JSONDecoder().raw_decode(text, at)
    return text[at:end]


def written_back(shown, kind):
    """What a tool passes back as the payload, from what it was shown and payload_type."""
    return {"json": shown, "text": json.loads(shown) if kind == "text" else None,
            "integer": int(shown) if kind == "integer" else None,
            "real": float(shown) if kind == "real" else None}[kind]


@pytest.mark.parametrize("payload,kind", PAYLOADS, ids=IDS)
def test_ERR_01_tq_get_shows_the_payload_as_stored(db, payload, kind):
    jid = one(db, "SELECT tq_add('q', ?)", payload)
    text = one(db, "SELECT tq_get(?)", jid)
    json.loads(text)  # still one valid JSON object
    shown = span(text, "payload")
    if kind == "json":
        assert shown == payload
    assert json.loads(text)["payload_type"] == kind
    assert written_back(shown, kind) == payload
    # settled with the same value: the result is shown the same way
    (job,) = claim(db, "q")
    assert one(db, "SELECT tq_settle(?, ?, 'done', ?)", jid, job["attempt"], payload) == 1
    assert span(one(db, "SELECT tq_get(?)", jid), "result") == shown


@pytest.mark.parametrize("payload,kind", PAYLOADS, ids=IDS)
def test_CRON_01_a_schedule_paused_and_resumed_through_its_json_keeps_its_payload(db, payload, kind):
    one(db, "SELECT tq_schedule('s', 'q', '@daily', ?)", payload)
    stored = db.execute("SELECT payload, typeof(payload) FROM tinyq_schedules WHERE name = 's'").fetchone()
    for paused in (True, False):
        text = one(db, "SELECT tq_schedule_get('s')")
        got = json.loads(text)
        assert got["payload_type"] == kind
        back = written_back(span(text, "payload"), kind)
        one(db, "SELECT tq_schedule(?, ?, ?, ?, ?)", got["name"], got["queue"], got["when"], back,
            json.dumps({"paused": paused}))
        assert db.execute("SELECT payload, typeof(payload) FROM tinyq_schedules WHERE name = 's'").fetchone() == stored


def test_ERR_01_meta_and_progress_are_shown_as_stored(db):
    jid = one(db, "SELECT tq_add('q', '{}', '{\"meta\": {\"n\": 12345678901234567890123}}')")
    (job,) = claim(db, "q")
    assert one(db, "SELECT tq_progress(?, ?, ?)", jid, job["attempt"], '{"done": 12345678901234567890123}') == 1
    text = one(db, "SELECT tq_get(?)", jid)
    assert span(text, "progress") == '{"done": 12345678901234567890123}'
    # (meta is kept as tq_add's options parser wrote it: shown as kept)
    assert span(text, "meta") == one(db, "SELECT meta FROM tinyq_jobs WHERE id = ?", jid)
    assert get(db, jid)["payload"] == {}
