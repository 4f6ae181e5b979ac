"""What a job's owner reads of a running or settled job: its progress (tq_progress), its
result or error (tq_get).

Time is pinned with tq_clock wherever it matters.
"""
import json

from helpers import LEASE, T0, add, claim, claim_ids, connect, get, pin, progress, settle
from helpers import SEC as S


# --------------------------------------------------------------------------- progress and results

def test_progress_latest_is_what_tq_get_shows(db, db_path):
    pin(db, T0)
    add(db, "summaries", json.dumps({"pages": 40}), id="sum:1")
    assert claim_ids(db, "summaries") == [("sum:1", 1)]
    assert get(db, "sum:1")["progress"] is None
    assert progress(db, "sum:1", 1, json.dumps({"page": 10, "of": 40})) == 1
    assert get(db, "sum:1")["progress"] == {"page": 10, "of": 40}
    assert progress(db, "sum:1", 1, json.dumps({"page": 30, "of": 40})) == 1
    # the owner polls from another connection and sees the latest report
    owner = connect(db_path)
    try:
        job = get(owner, "sum:1")
        assert job["state"] == "running"
        assert job["progress"] == {"page": 30, "of": 40}
    finally:
        owner.close()
    # plain text progress is shown as a JSON string
    assert progress(db, "sum:1", 1, "almost there") == 1
    assert get(db, "sum:1")["progress"] == "almost there"
    # a stale attempt reports nothing
    pin(db, T0 + LEASE + S)
    assert claim_ids(db, "summaries") == [("sum:1", 2)]
    assert progress(db, "sum:1", 1, json.dumps({"page": 39})) == 0
    assert get(db, "sum:1")["progress"] != {"page": 39}
    assert progress(db, "sum:1", 2, json.dumps({"page": 1, "of": 40})) == 1
    assert get(db, "sum:1")["progress"] == {"page": 1, "of": 40}
    # progress of nothing
    assert progress(db, "nope", 1, "x") == 0


def test_get_shows_the_done_result_and_the_fields_an_owner_reads(db):
    pin(db, T0)
    add(db, "summaries", json.dumps({"pages": 40}), id="sum:2", group="acme", priority=3)
    job = get(db, "sum:2")
    for key in ("id", "queue", "state", "group", "priority", "attempt", "run_at", "lease_until",
                "worker", "payload", "result", "error", "progress"):
        assert key in job, f"tq_get has no {key!r}: {sorted(job)}"
    created = [k for k in job if k.startswith("created")]
    assert len(created) == 1 and job[created[0]] == T0, job
    assert job["id"] == "sum:2" and job["queue"] == "summaries"
    assert job["state"] == "waiting" and job["ahead"] == 0
    assert job["group"] == "acme" and job["priority"] == 3
    assert job["payload"] == {"pages": 40}
    assert job["attempt"] == 0 and job["run_at"] == T0
    assert job["worker"] is None and job["result"] is None and job["error"] is None

    assert claim_ids(db, "summaries", worker="worker-7") == [("sum:2", 1)]
    job = get(db, "sum:2")
    assert job["state"] == "running" and job["attempt"] == 1
    assert job["worker"] == "worker-7"
    assert job["lease_until"] == T0 + LEASE
    assert job.get("ahead") is None, "ahead is only reported while waiting"

    pin(db, T0 + 5 * S)
    assert settle(db, "sum:2", 1, "done", json.dumps({"summary": "short", "words": 12})) == 1
    job = get(db, "sum:2")
    assert job["state"] == "done"
    assert job["result"] == {"summary": "short", "words": 12}
    assert job["error"] is None
    settled = [k for k in job if k.startswith("settled") or k.startswith("finished")]
    assert settled and job[settled[0]] == T0 + 5 * S, job
    assert job.get("ahead") is None

    # a text result is shown as a JSON string, no result as null
    add(db, "summaries", "{}", id="sum:3")
    add(db, "summaries", "{}", id="sum:4")
    claim(db, "summaries", "w1", 2)
    assert settle(db, "sum:3", 1, "done", "plain text") == 1
    assert settle(db, "sum:4", 1, "done") == 1
    assert get(db, "sum:3")["result"] == "plain text"
    assert get(db, "sum:4")["result"] is None
    assert get(db, "sum:4")["state"] == "done"
    assert get(db, "no-such-job") is None


def test_get_shows_the_error_of_a_failed_job(db):
    pin(db, T0)
    add(db, "summaries", "{}", id="sum:5")
    claim(db, "summaries")
    assert settle(db, "sum:5", 1, "fail", "the PDF is encrypted") == 1
    job = get(db, "sum:5")
    assert job["state"] == "failed"
    assert job["error"] == "the PDF is encrypted"
    assert job["result"] is None
