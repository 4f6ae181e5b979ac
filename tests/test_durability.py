"""A committed job survives its process (DUR-01), and two worker processes claiming from one
store never claim the same job and claim them all.
"""
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import GENERATED_ID, add, connect, get, ids, run_python


# ---------------------------------------------------------------- DUR-01

ADD_AND_DIE = r"""
import os, signal, sys
from helpers import connect, one
db = connect(sys.argv[1])
print(one(db, "SELECT tq_add('durable', '{\"n\": 1}', '{\"id\": \"survivor\"}')"), flush=True)
print(one(db, "SELECT tq_add('durable', '{\"n\": 2}')"), flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
os._exit(0)                     # no close, no cleanup
"""

CLAIM_ALL = r"""
import json, sys
from helpers import connect, claim, one
db = connect(sys.argv[1])
rows = claim(db, "durable", "fresh-process", 10)
for r in rows:
    assert one(db, "SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"]) == 1
print(json.dumps(rows))
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_DUR_01_committed_job_survives_its_process_and_runs_in_another(db_path, how):
    proc = run_python(ADD_AND_DIE, db_path, how)
    assert proc.returncode == (-9 if how == "kill" else 0), proc.stderr
    added = proc.stdout.split()
    assert added[0] == "survivor" and GENERATED_ID.fullmatch(added[1])
    proc = run_python(CLAIM_ALL, db_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert ids(rows) == added
    assert rows[0]["payload"] == '{"n": 1}'
    assert all(r["attempt"] == 1 for r in rows)
    conn = connect(db_path)
    try:
        assert get(conn, "survivor")["state"] == "done"
    finally:
        conn.close()


# ---------------------------------------------------------------- concurrent workers

POOL_WORKER = r"""
import json, random, sys, time
from helpers import connect, claim, one
db = connect(sys.argv[1], busy_ms=30000)
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.002)
got = []
while True:
    rows = claim(db, "pool", sys.argv[3], random.randint(1, 4), {"lease": "10m"})
    if not rows:
        break
    for r in rows:
        got.append([r["id"], r["attempt"]])
        time.sleep(0.002)                                # the "work", outside any transaction
        ok = one(db, "SELECT tq_settle(?, ?, 'done')", r["id"], r["attempt"])
        if ok != 1:
            raise SystemExit("settle returned %r for %r" % (ok, r))
print(json.dumps(got))
"""


def test_two_worker_processes_never_claim_the_same_job_and_claim_all(db, db_path):
    db.execute("BEGIN IMMEDIATE")
    all_ids = [add(db, "pool", f'{{"k": {k}}}') for k in range(400)]
    db.execute("COMMIT")
    start = time.time() + 1.5
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(run_python, POOL_WORKER, db_path, str(start), f"w{k}", timeout=120)
                   for k in (1, 2)]
        procs = [f.result() for f in futures]
    claimed = []
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
        claimed.append(json.loads(proc.stdout))
    first, second = ({tuple(x) for x in c} for c in claimed)
    assert not ({i for i, _ in first} & {i for i, _ in second}), "a job was claimed twice"
    together = [i for c in claimed for i, _ in c]
    assert sorted(together) == sorted(all_ids), "every job claimed exactly once"
    assert all(a == 1 for c in claimed for _, a in c)
    assert all(get(db, i)["state"] == "done" for i in all_ids)
