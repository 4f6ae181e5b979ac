"""The sqlite3 shell: `.load` works, the README's worker example runs, errors surface."""
import json
import os
import re
import subprocess

from helpers import ROOT, connect, get, shell

GENERATED_ID = re.compile(r"tq_[0-9A-HJKMNP-TV-Z]{26}")

# The README's "Thirty seconds in the sqlite3 shell" example, read from the README itself.
def readme_example():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text[text.index("## Thirty seconds in the sqlite3 shell"):]
    return section[section.index("```sql\n") + 7:section.index("```\n", section.index("```sql\n") + 7)]


README_EXAMPLE = readme_example()


def test_shell_loads_tinyq_and_adds_a_job(db_path):
    proc = shell(db_path, "select tq_add('q','{}')")
    out = proc.stdout.strip()
    assert GENERATED_ID.fullmatch(out), out
    assert proc.stderr == ""
    conn = connect(db_path)
    try:
        job = get(conn, out)
        assert job["queue"] == "q" and job["state"] == "waiting" and job["payload"] == {}
    finally:
        conn.close()


def test_shell_runs_the_readme_example(db_path):
    proc = subprocess.run(["sqlite3", "-bail", db_path], input=README_EXAMPLE, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.split("\n")
    assert lines[0] == "reply:41"
    claimed = lines[1].split("|")
    assert claimed[:4] == ["reply:41", "1", '{"messageId":41}', ""], lines[1]
    lease_until, deadline = int(claimed[4]), int(claimed[5])
    assert lease_until < deadline
    assert lines[2] == "", "tq_step_get is NULL the first time"
    assert lines[3] == "Hello!"
    assert int(lines[4]) >= lease_until, "tq_renew returns the new lease_until"
    assert lines[5] == "1"
    watch = [line.split("|", 6) for line in lines[6:] if line]
    assert watch, "tq_watch(0) shows the job's history"
    assert all(w[1] == "reply:41" and w[2] == "replies" for w in watch), watch
    states = [w[3] for w in watch]
    assert states[0] == "waiting" and "running" in states and states[-1] == "done", states
    seqs = [int(w[0]) for w in watch]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

    conn = connect(db_path)
    try:
        job = get(conn, "reply:41")
        assert job["state"] == "done" and job["result"] == {"sent": True}
    finally:
        conn.close()


def test_shell_claim_has_documented_header(db_path):
    shell(db_path, "select tq_add('h', '{\"x\": 1}', '{\"id\": \"h1\", \"group\": \"g\"}')")
    proc = shell(db_path, ".headers on", "select * from tq_claim('h', 'w', 5)")
    lines = proc.stdout.strip().split("\n")
    assert lines[0] == "id|attempt|payload|group_key|lease_until|deadline"
    assert lines[1].startswith('h1|1|{"x": 1}|g|')
    assert len(lines) == 2


def test_shell_work_persists_between_shell_sessions(db_path):
    shell(db_path, "select tq_add('p', '42', '{\"id\": \"p1\"}')")
    proc = shell(db_path, "select id, attempt, payload from tq_claim('p', 'w', 1)")
    assert proc.stdout.strip() == "p1|1|42"
    proc = shell(db_path, "select tq_settle('p1', 1, 'done', 'ok')")
    assert proc.stdout.strip() == "1"
    proc = shell(db_path, "select json_extract(tq_get('p1'), '$.state'), "
                          "json_extract(tq_get('p1'), '$.result')")
    assert proc.stdout.strip() == "done|ok"


def test_shell_bad_input_is_an_error_message_starting_with_the_function(db_path):
    proc = shell(db_path, "select tq_add(NULL, '{}')", check=False)
    assert proc.returncode != 0
    assert "tq_add:" in proc.stderr, proc.stderr
    proc = shell(db_path, "select * from tq_claim('q', 'w', 0)", check=False)
    assert proc.returncode != 0
    assert "tq_claim:" in proc.stderr, proc.stderr


def test_shell_version_and_clock(db_path):
    proc = shell(db_path, "select tq_version()", "select tq_clock(1800000000000)", "select tq_now()")
    lines = proc.stdout.strip().split("\n")
    cargo = open(os.path.join(ROOT, "Cargo.toml")).read()
    version = re.search(r'^version\s*=\s*"([^"]+)"', cargo, re.M).group(1)
    assert version in lines[0]
    assert lines[-1] == "1800000000000"


def test_shell_json_mode_claim_rows(db_path):
    shell(db_path, "select tq_add('j', json_object('k', 1), '{\"id\": \"j1\"}')")
    proc = shell(db_path, ".mode json", "select * from tq_claim('j', 'w', 1)")
    rows = json.loads(proc.stdout)
    assert [r["id"] for r in rows] == ["j1"]
    assert rows[0]["attempt"] == 1 and rows[0]["payload"] == '{"k":1}'
