"""`tinyq` exit statuses and one-line errors (python/tinyq/cli.py docstring): 2 for what the
operator asked wrongly (an --after that is no job's id, a limit out of range, a change to a
read-only file), and a read-only store still readable, as real processes."""
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from helpers import EXT, ROOT, connect, one
from test_cli import ENV, PY, assert_error, tinyq

NOBODY = 65534


@pytest.fixture
def store(db, db_path):
    for queue in ("emails", "sms"):
        one(db, "SELECT tq_add(?, '{}', json_object('id', ?))", queue, queue + "-1")
    return db_path


@pytest.mark.parametrize("args", [["--after", "nope"], ["--queue", "emails", "--state", "waiting", "--after", "nope"]],
                         ids=["in-add-order", "in-list-order"])
def test_after_an_unknown_id_is_exit_2(store, args):
    assert_error(tinyq("jobs", store, *args), 2, "tq_jobs", "'nope'")


BIG = str(10**23)


@pytest.mark.parametrize("args", [["jobs", "--limit", "-1"], ["jobs", "--limit", "x"], ["jobs", "--limit", BIG],
                                  ["sweep", "--limit", "0"], ["sweep", "--limit", "-5"], ["sweep", "--limit", BIG],
                                  ["watch", "-n", BIG], ["watch", "-n", "-1"], ["watch", "--since", BIG]],
                         ids=["jobs-negative", "jobs-not-a-number", "jobs-10^23", "sweep-zero", "sweep-negative",
                              "sweep-10^23", "watch-n-10^23", "watch-n-negative", "watch-since-10^23"])
def test_a_limit_out_of_range_is_exit_2_and_sweeps_nothing(store, db, args):
    one(db, "SELECT tq_settle(id, attempt, 'done') FROM tq_claim('emails', 'w', 1)")
    one(db, "SELECT tq_clock('2100-01-01T00:00:00Z')")      # past every retention window
    assert_error(tinyq(args[0], store, *args[1:]), 2, args[-2], repr(args[-1]))
    assert one(db, "SELECT count(*) FROM tq_jobs") == 2


def test_limit_0_lists_every_job(store):
    proc = tinyq("jobs", store, "--limit", "0")
    assert proc.returncode == 0 and "emails-1" in proc.stdout and "sms-1" in proc.stdout


def test_the_no_queue_error_is_one_line(db, db_path):
    for n in range(30):
        one(db, "SELECT tq_add(?, '{}')", "queue\n%d" % n)
    for command in ("pause", "resume", "stats"):
        args = ["--queue", "nope"] if command == "stats" else ["nope"]
        proc = tinyq(command, db_path, *args)
        assert_error(proc, 2, "no queue 'nope'", "queue\\n0, ", "...")
        assert proc.stderr.count("queue\\n") == 10       # at most 10 names


# -- read-only files --------------------------------------------------------------------------

@pytest.fixture(params=["folder-read-only", "folder-writable"])
def read_only(db, db_path, request):
    """A copy of the store, in WAL mode, in a directory of its own: the file read-only, the
    directory too or not (as root, the commands run as nobody, for whom they are); yields
    a function that runs tinyq on it."""
    one(db, "SELECT tq_add('emails', '{}', '{\"id\": \"e1\", \"attempts\": 1}')")
    one(db, "SELECT tq_settle(id, attempt, 'error', 'smtp down') FROM tq_claim('emails', 'w', 1)")
    db.close()
    folder = tempfile.mkdtemp(prefix="tinyq-ro-")
    path = os.path.join(folder, "store.db")
    shutil.copy(db_path, path)
    conn = connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()                # the last connection: no -wal left
    assert not os.path.exists(path + "-wal")
    os.chmod(path, 0o444)
    os.chmod(folder, 0o555 if request.param == "folder-read-only" else 0o777)
    user, env, pkg = None, ENV, None
    if os.geteuid() == 0:
        user = lambda: (os.setgid(NOBODY), os.setuid(NOBODY))  # noqa: E731
        # nobody may not reach the checkout (a clone under a 0700 folder): give it a copy of
        # the package and the extension of its own
        pkg = tempfile.mkdtemp(prefix="tinyq-pkg-")
        os.chmod(pkg, 0o755)
        # (laid out as in the checkout: the package reads its version from ../../Cargo.toml)
        shutil.copytree(os.path.join(ROOT, "python", "tinyq"), os.path.join(pkg, "python", "tinyq"))
        shutil.copy(os.path.join(ROOT, "Cargo.toml"), pkg)
        shutil.copy(EXT + ".so", os.path.join(pkg, "tinyq.so"))
        env = dict(ENV, PYTHONPATH=os.path.join(pkg, "python"), TINYQ_EXT=os.path.join(pkg, "tinyq"))

    def run(*args):
        return subprocess.run([PY, "-m", "tinyq", args[0], path, *args[1:]], capture_output=True,
                              text=True, timeout=30, env=env, preexec_fn=user, cwd=folder)
    run.path = path
    yield run
    os.chmod(folder, 0o755)
    shutil.rmtree(folder)
    if pkg:
        shutil.rmtree(pkg)


@pytest.mark.parametrize("args", [["stats"], ["jobs"], ["get", "e1"], ["schedules"]],
                         ids=["stats", "jobs", "get", "schedules"])
def test_a_read_only_wal_store_can_be_read(read_only, args):
    proc = read_only(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    if args[0] != "schedules":
        assert "emails" in proc.stdout


@pytest.mark.parametrize("args", [["retry", "e1"], ["cancel", "e1"], ["pause", "emails"], ["resume", "emails"],
                                  ["sweep"]],
                         ids=["retry", "cancel", "pause", "resume", "sweep"])
def test_a_change_to_a_read_only_file_is_exit_2_and_changes_nothing(read_only, args):
    with open(read_only.path, "rb") as f:
        before = f.read()
    assert_error(read_only(*args), 2, "read-only")
    with open(read_only.path, "rb") as f:
        assert f.read() == before
    assert not stat.S_IMODE(os.stat(read_only.path).st_mode) & 0o222
