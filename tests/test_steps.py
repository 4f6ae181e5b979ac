"""Steps (JOB-06): a named answer kept under a job, returned to every later attempt.

tq_step_get(id, name) -> the kept answer or NULL
tq_step_put(id, attempt, name, value) -> the kept answer; the first answer kept wins;
a stale attempt keeps nothing and gets NULL. Steps go when their job goes.

The clock is pinned with tq_clock wherever a lease has to run out, so nothing sleeps.
"""
import json
import os
import signal
import subprocess
import time

import pytest

from helpers import EXT, LEASE, ROOT, T0, add, claim, connect, get, one, pin, settle


def step_get(conn, job_id, name):
    return one(conn, "SELECT tq_step_get(?, ?)", job_id, name)


def step_put(conn, job_id, attempt, name, value):
    return one(conn, "SELECT tq_step_put(?, ?, ?, ?)", job_id, attempt, name, value)


def steps_rows(conn):
    """Rows in tinyq_steps (design.md names the table); 0 when the store has none."""
    return one(conn, "SELECT count(*) FROM tinyq_steps")


def claim_attempt(conn, queue, job_id, worker="w1"):
    rows = claim(conn, queue, worker, 1)
    assert [r["id"] for r in rows] == [job_id], rows
    return rows[0]["attempt"]


# --------------------------------------------------------------------------- unit behaviour

def test_JOB_06_step_get_is_null_until_kept_then_returns_the_answer(db, db_path):
    pin(db, T0)
    add(db, "replies", json.dumps({"messageId": 41}), id="reply:41")
    attempt = claim_attempt(db, "replies", "reply:41")
    assert attempt == 1
    assert step_get(db, "reply:41", "answer") is None
    assert step_put(db, "reply:41", 1, "answer", "Hello!") == "Hello!"
    assert step_get(db, "reply:41", "answer") == "Hello!"
    # another connection (another worker, a status page) reads the same answer
    other = connect(db_path)
    try:
        assert step_get(other, "reply:41", "answer") == "Hello!"
    finally:
        other.close()
    # an unknown name or an unknown job has no answer
    assert step_get(db, "reply:41", "other") is None
    assert step_get(db, "reply:404", "answer") is None


def test_JOB_06_first_answer_kept_wins(db):
    pin(db, T0)
    add(db, "replies", "{}", id="j")
    claim_attempt(db, "replies", "j")
    assert step_put(db, "j", 1, "answer", "first") == "first"
    # the same attempt asking again (a retried statement) gets the first answer back
    assert step_put(db, "j", 1, "answer", "second") == "first"
    assert step_get(db, "j", "answer") == "first"
    # a later attempt that still holds the job also gets the first answer, not its own
    pin(db, T0 + LEASE + 1_000)
    assert claim_attempt(db, "replies", "j") == 2
    assert step_get(db, "j", "answer") == "first"
    assert step_put(db, "j", 2, "answer", "third") == "first"
    assert step_get(db, "j", "answer") == "first"


def test_JOB_06_steps_are_kept_per_name(db):
    pin(db, T0)
    add(db, "replies", "{}", id="j")
    claim_attempt(db, "replies", "j")
    doc = {"summary": "forty pages", "tokens": 1234}
    assert step_put(db, "j", 1, "fetch", "page text") == "page text"
    assert json.loads(step_put(db, "j", 1, "summary", json.dumps(doc))) == doc
    assert step_get(db, "j", "fetch") == "page text"
    assert json.loads(step_get(db, "j", "summary")) == doc
    assert step_get(db, "j", "send") is None


def test_JOB_06_a_later_attempt_gets_the_kept_answer(db):
    pin(db, T0)
    add(db, "replies", json.dumps({"messageId": 41}), id="reply:41")
    assert claim_attempt(db, "replies", "reply:41", "worker-1") == 1
    assert step_put(db, "reply:41", 1, "answer", "Hello 41") == "Hello 41"
    # worker-1 vanishes; its lease runs out; worker-2 claims attempt 2
    pin(db, T0 + LEASE + 1_000)
    assert claim_attempt(db, "replies", "reply:41", "worker-2") == 2
    assert step_get(db, "reply:41", "answer") == "Hello 41"
    # and so does attempt 3, after attempt 2 errors
    assert settle(db, "reply:41", 2, "error", "smtp down") == 1
    pin(db, T0 + 10 * 60_000)
    assert claim_attempt(db, "replies", "reply:41", "worker-3") == 3
    assert step_get(db, "reply:41", "answer") == "Hello 41"


def test_JOB_06_stale_attempt_keeps_nothing_and_gets_null(db):
    pin(db, T0)
    add(db, "replies", "{}", id="j")
    claim_attempt(db, "replies", "j")
    assert step_put(db, "j", 1, "answer", "from attempt 1") == "from attempt 1"
    pin(db, T0 + LEASE + 1_000)
    assert claim_attempt(db, "replies", "j") == 2
    # attempt 1 is stale now: it keeps nothing, for a new name or an existing one
    assert step_put(db, "j", 1, "late", "from stale attempt 1") is None
    assert step_get(db, "j", "late") is None
    assert step_put(db, "j", 1, "answer", "overwrite?") is None
    assert step_get(db, "j", "answer") == "from attempt 1"
    # an attempt that never existed keeps nothing either
    assert step_put(db, "j", 7, "future", "x") is None
    assert step_get(db, "j", "future") is None
    # the live attempt can still keep the name the stale one was refused
    assert step_put(db, "j", 2, "late", "from attempt 2") == "from attempt 2"
    assert step_get(db, "j", "late") == "from attempt 2"


def test_JOB_06_a_kept_step_renews_the_lease_once_half_of_it_is_gone(db):
    """Keeping a step keeps the attempt alive as a worker's renewal would: once less than
    half of the lease is left, the lease is the queue's `lease` from now; before that it
    stays as it is (a wave of steps does not rewrite every job's row)."""
    pin(db, T0)
    add(db, "replies", "{}", id="j")
    claim_attempt(db, "replies", "j")
    assert get(db, "j")["lease_until"] == T0 + LEASE
    pin(db, T0 + LEASE // 2 - 1_000)             # more than half left: the lease stays
    assert step_put(db, "j", 1, "first", "1") == "1"
    assert get(db, "j")["lease_until"] == T0 + LEASE
    pin(db, T0 + LEASE // 2 + 1_000)             # less than half left: renewed from now
    assert step_put(db, "j", 1, "second", "2") == "2"
    assert get(db, "j")["lease_until"] == T0 + LEASE // 2 + 1_000 + LEASE


def test_JOB_06_a_rolled_back_step_is_not_kept(db):
    pin(db, T0)
    add(db, "replies", "{}", id="j")
    claim_attempt(db, "replies", "j")
    db.execute("BEGIN IMMEDIATE")
    assert step_put(db, "j", 1, "answer", "rolled back") == "rolled back"
    db.execute("ROLLBACK")
    assert step_get(db, "j", "answer") is None
    assert step_put(db, "j", 1, "answer", "kept") == "kept"
    assert step_get(db, "j", "answer") == "kept"


def test_JOB_06_steps_go_when_the_job_is_cancelled(db):
    pin(db, T0)
    add(db, "replies", "{}", id="j")
    claim_attempt(db, "replies", "j")
    step_put(db, "j", 1, "answer", "kept")
    step_put(db, "j", 1, "other", "kept too")
    assert steps_rows(db) == 2
    assert one(db, "SELECT tq_cancel('j')") == 1
    assert step_get(db, "j", "answer") is None
    assert steps_rows(db) == 0, "a cancelled job's steps stay in the store"
    # the id is free again; the new job starts with no steps
    assert add(db, "replies", "{}", id="j") == "j"
    assert claim_attempt(db, "replies", "j") >= 1
    assert step_get(db, "j", "answer") is None
    assert step_get(db, "j", "other") is None


def test_JOB_06_steps_do_not_outlive_their_job(db):
    """A done job past its dedupe window frees its id: a new job with it has no steps,
    and sweeping removes the old job's steps."""
    pin(db, T0)
    one(db, "SELECT tq_queue('short', ?)", json.dumps({"dedupe": "10m"}))
    add(db, "short", "{}", id="j")
    add(db, "short", "{}", id="k")
    claim(db, "short", "w1", 2)
    step_put(db, "j", 1, "answer", "old j")
    step_put(db, "k", 1, "answer", "old k")
    assert settle(db, "j", 1, "done") == 1
    assert settle(db, "k", 1, "done") == 1
    pin(db, T0 + 20 * 60_000)
    # j's id is free: re-adding makes a new job that has no steps
    assert add(db, "short", "{}", id="j") == "j"
    assert get(db, "j")["state"] == "waiting"
    assert step_get(db, "j", "answer") is None
    # sweeping removes k (past its window) and its step
    removed = 0
    while True:
        n = one(db, "SELECT tq_sweep()")
        removed += n
        if n == 0:
            break
    assert get(db, "k") is None
    assert step_get(db, "k", "answer") is None
    assert steps_rows(db) == 0, "a swept job's steps stay in the store"


# --------------------------------------------------------------------------- the story, real processes

WORKER = r'''
import json, os, sys, time
from helpers import connect, one, claim

db_path, name, clock, model_log, ready, mode = sys.argv[1:7]
conn = connect(db_path)
one(conn, "SELECT tq_clock(?)", int(clock))
rows = claim(conn, "replies", name, 1)
assert len(rows) == 1, rows
job = rows[0]
message_id = json.loads(job["payload"])["messageId"]

answer = one(conn, "SELECT tq_step_get(?, 'answer')", job["id"])
if answer is None:
    # the slow, paid model call: count it
    with open(model_log, "a") as f:
        f.write(f"{name} attempt {job['attempt']} asked the model about {message_id}\n")
        f.flush()
        os.fsync(f.fileno())
    answer = one(conn, "SELECT tq_step_put(?, ?, 'answer', ?)", job["id"], job["attempt"],
                 f"Hello {message_id}, from {name}")

def insert_reply():
    conn.execute("INSERT INTO replies(reply_to, body) VALUES (?, ?) "
                 "ON CONFLICT(reply_to) DO NOTHING", (message_id, answer))

if mode == "die-after-insert":
    insert_reply()
if mode.startswith("die"):
    with open(ready + ".tmp", "w") as f:
        json.dump({"id": job["id"], "attempt": job["attempt"], "answer": answer}, f)
    os.rename(ready + ".tmp", ready)
    time.sleep(600)      # "the handler is still running" until SIGKILL
    sys.exit(3)

conn.execute("BEGIN IMMEDIATE")
insert_reply()
settled = one(conn, "SELECT tq_settle(?, ?, 'done', ?)", job["id"], job["attempt"],
              json.dumps({"sent": True}))
conn.execute("COMMIT")
print(json.dumps({"id": job["id"], "attempt": job["attempt"], "answer": answer,
                  "settled": settled}))
'''


def _worker_env():
    return dict(os.environ, TINYQ_EXT=EXT, PYTHONPATH=os.path.join(ROOT, "tests"))


@pytest.mark.parametrize("mode", ["die-after-step", "die-after-insert"])
def test_JOB_06_killed_worker_then_second_worker_reuses_the_kept_answer(db, db_path, tmp_path, mode):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    model_log = tmp_path / "model_calls.log"
    ready = tmp_path / "worker1.ready"

    pin(db, T0)
    db.execute("CREATE TABLE replies(reply_to INTEGER UNIQUE, body TEXT)")
    assert one(db, "SELECT tq_add('replies', json_object('messageId', 41), '{\"id\": \"reply:41\"}')") \
        == "reply:41"

    # worker 1: claims reply:41, calls the model, keeps the answer, then is killed mid-handler
    w1 = subprocess.Popen(["/usr/bin/python3", str(script), db_path, "worker-1", str(T0),
                           str(model_log), str(ready), mode],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_worker_env())
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if w1.poll() is not None:
                out, err = w1.communicate()
                pytest.fail(f"worker 1 ended early ({w1.returncode}): {out}{err}")
            if time.monotonic() > deadline:
                pytest.fail("worker 1 never kept its step")
            time.sleep(0.05)
        os.kill(w1.pid, signal.SIGKILL)
        w1.wait(timeout=30)
    finally:
        if w1.poll() is None:
            w1.kill()
            w1.wait()
    assert w1.returncode == -signal.SIGKILL
    first = json.loads(ready.read_text())
    assert first["id"] == "reply:41" and first["attempt"] == 1
    assert model_log.read_text().count("\n") == 1

    # what the owner sees meanwhile: the job is not finished, the answer is kept
    job = get(db, "reply:41")
    assert job["state"] in ("running", "waiting")
    assert job["attempt"] == 1
    assert step_get(db, "reply:41", "answer") == first["answer"]

    # worker 2, another process, after worker 1's lease has run out: attempt 2
    w2 = subprocess.run(["/usr/bin/python3", str(script), db_path, "worker-2",
                         str(T0 + LEASE + 30_000), str(model_log), str(ready), "finish"],
                        capture_output=True, text=True, timeout=60, env=_worker_env())
    assert w2.returncode == 0, w2.stderr
    second = json.loads(w2.stdout.strip().splitlines()[-1])
    assert second["attempt"] == 2
    assert second["answer"] == first["answer"], "worker 2 did not get the kept answer back"
    assert second["settled"] == 1

    # the model was called once, the reply was inserted once, the job is done by attempt 2
    calls = model_log.read_text().splitlines()
    assert len(calls) == 1, calls
    assert calls[0].startswith("worker-1 attempt 1")
    assert db.execute("SELECT reply_to, body FROM replies").fetchall() == [(41, first["answer"])]
    job = get(db, "reply:41")
    assert job["state"] == "done"
    assert job["attempt"] == 2
    assert job["result"] == {"sent": True}
    # nobody claims it again
    pin(db, T0 + 10 * LEASE)
    assert claim(db, "replies", "worker-3", 10) == []
