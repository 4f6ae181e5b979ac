"""A Python whose sqlite3 cannot load extensions (pyenv's builds, by default): tinyq's error
names a fix that needs only pip, `pip install "sqlite-tinyq[pysqlite3]"`, and with that
extra installed tinyq.open, Queue, AsyncQueue and the command use pysqlite3's connections.
Runs under a pyenv Python of this machine (skipped where there is none) in fresh venvs;
the venv with the extra downloads pysqlite3-binary from PyPI (skipped when offline)."""
import glob
import os
import subprocess
import textwrap

import pytest

from helpers import ROOT

PYENV = sorted(glob.glob("/root/.pyenv/versions/3.1[0-9]*/bin/python3"))


def no_loading_python():
    """A Python 3.10+ whose sqlite3 cannot load extensions, or a skip."""
    for python in PYENV:
        probe = subprocess.run([python, "-c", "import sqlite3, sys; "
                                "sys.exit(hasattr(sqlite3.Connection, 'enable_load_extension'))"])
        if probe.returncode == 0:
            return python
    pytest.skip("no Python here whose sqlite3 cannot load extensions (pyenv's builds)")


def clean_env():
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TINYQ_EXT", "PIP_NO_INDEX")}


def venv_with(tmp_path, name, *pip_args):
    python = no_loading_python()
    venv = tmp_path / name
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
    proc = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                           *pip_args], capture_output=True, text=True, env=clean_env(), timeout=300)
    return venv, proc


USE = textwrap.dedent("""
    import asyncio, sqlite3, tinyq
    q = tinyq.Queue("app.db", "mail")
    q.add({"to": "ada"}, id="welcome:ada")
    print(type(q.conn).__module__, q.drain(lambda payload, run: payload["to"].upper()))

    async def main():
        aq = tinyq.AsyncQueue("app.db", "mail")
        await aq.add({"to": "bob"}, id="welcome:bob")
        async def send(payload, run):
            return payload["to"].upper()
        print(await aq.drain(send))
        await aq.close()
    asyncio.run(main())
    try:
        tinyq.load(sqlite3.connect(":memory:"))
    except RuntimeError as err:
        print(err)
""")


def test_without_the_extra_the_error_names_the_pip_fix(tmp_path):
    venv, proc = venv_with(tmp_path, "plain", "--no-index", "--no-build-isolation", os.path.join(ROOT, "python"))
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(venv / "bin" / "python"), "-c", "import tinyq; tinyq.open('app.db')"],
                         capture_output=True, text=True, cwd=tmp_path, env=clean_env())
    assert run.returncode == 1
    assert 'cannot load extensions' in run.stderr and 'pip install "sqlite-tinyq[pysqlite3]"' in run.stderr


def test_with_the_extra_tinyq_uses_pysqlite3(tmp_path):
    # The extra's package comes from PyPI; tinyq itself from this repository.
    venv, proc = venv_with(tmp_path, "extra", os.path.join(ROOT, "python") + "[pysqlite3]")
    if proc.returncode != 0 and "pysqlite3" in proc.stderr:
        pytest.skip("pysqlite3-binary could not be installed (offline?): %s" % proc.stderr[-300:])
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(venv / "bin" / "python"), "-c", USE], capture_output=True, text=True,
                         cwd=tmp_path, env=clean_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "pysqlite3.dbapi2 {'done': 1, 'failed': 0, 'retried': 0}"
    assert lines[1] == "{'done': 1, 'failed': 0, 'retried': 0}"
    assert 'pip install "sqlite-tinyq[pysqlite3]"' in lines[2]   # a stdlib connection of the user's
    stats = subprocess.run([str(venv / "bin" / "tinyq"), "stats", "app.db"], capture_output=True, text=True,
                           cwd=tmp_path, env=clean_env(), timeout=120)
    assert stats.returncode == 0, stats.stderr
    assert stats.stdout.splitlines()[1].split()[:8] == ["mail", "0", "0", "0", "0", "0", "2", "0"]
