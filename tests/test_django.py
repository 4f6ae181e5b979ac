"""tinyq.django: a tiny Django project in tmp_path, run in subprocesses (JOB-02 through
Django's atomic()): a task enqueued in a rolled-back atomic() leaves no job, a committed
one is a job with the task's priority and run_after; `manage.py tinyq_worker --drain` runs
the due ones; get_result reads SUCCESSFUL with the return value, FAILED with the error's
class and traceback, and an async task's result through aenqueue/aget_result.

Twice: Django 5.2 with the django-tasks backport under Debian's Python 3.11, and Django 6
under a pyenv Python 3.12 with pysqlite3-binary as its sqlite3 (pyenv's own cannot load
extensions). Each in a venv cached under target/venvs/ that pip fills from PyPI: skipped
when that fails (offline). Needs the network, so `make test-all` runs it.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import textwrap
import time

import pytest

from helpers import ROOT

VENVS = os.path.join(ROOT, "target", "venvs")

SETTINGS = """
    from pathlib import Path
    BASE = Path(__file__).resolve().parent
    SECRET_KEY = "test"
    USE_TZ = True
    INSTALLED_APPS = ["tinyq.django", "shop"]
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(BASE / "app.db")}}
    DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
    TASKS = {"default": {"BACKEND": "tinyq.django.TinyqBackend", "QUEUES": ["default", "mail"]}}
"""

# pysqlite3 (when installed) as sqlite3, before Django imports it: Django's sqlite backend
# does `from sqlite3 import dbapi2`.
SWAP = """
    import sys
    try:
        import pysqlite3, pysqlite3.dbapi2
        sys.modules["sqlite3"], sys.modules["sqlite3.dbapi2"] = pysqlite3, pysqlite3.dbapi2
    except ImportError:
        pass
"""

MANAGE = SWAP + """
    import os
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
"""

MODELS = """
    from django.db import models

    class Order(models.Model):
        item = models.CharField(max_length=50)
"""

TASKS = """
    try:
        from django.tasks import task
    except ImportError:
        from django_tasks import task

    @task
    def double(n):
        return {"double": n * 2}

    @task(queue_name="mail", priority=5)
    def greet(name):
        return "hello " + name

    @task
    def boom(n):
        raise ValueError("no %d" % n)

    @task
    async def triple(n):
        return n * 3

    @task(takes_context=True)
    def attempt_of(context):
        return context.attempt

    @task
    def slow(folder):
        import pathlib, time
        (pathlib.Path(folder) / "started").touch()
        while not (pathlib.Path(folder) / "go").exists():
            time.sleep(0.02)
        return "finished"
"""

# phase "enqueue": what atomic() does to jobs; phase "results": what get_result reads.
SCENARIO = SWAP + """
    import asyncio, datetime, json, os
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    import django
    django.setup()
    from django.db import connection, transaction
    from shop.models import Order
    from shop.tasks import attempt_of, boom, double, greet, slow, triple
    try:
        from django.tasks.exceptions import TaskResultDoesNotExist
    except ImportError:
        from django_tasks.exceptions import TaskResultDoesNotExist

    def job(id):
        with connection.cursor() as cursor:
            cursor.execute("SELECT tq_get(%s)", [id])
            text = cursor.fetchone()[0]
        return None if text is None else json.loads(text)

    out = {}
    if sys.argv[1] == "slow":
        out["ids"] = {"slow": slow.enqueue(os.getcwd()).id}
    elif sys.argv[1] == "enqueue":
        class Boom(Exception):
            pass
        try:
            with transaction.atomic():
                Order.objects.create(item="tea")
                gone = double.enqueue(1).id
                raise Boom
        except Boom:
            pass
        out["rolled_back"] = [Order.objects.count(), job(gone)]
        try:
            double.get_result(gone)
        except TaskResultDoesNotExist:
            out["rolled_back"].append("does not exist")
        with transaction.atomic():
            Order.objects.create(item="tea")
            ids = {"double": double.enqueue(21).id, "greet": greet.enqueue("ada").id,
                   "boom": boom.enqueue(7).id, "context": attempt_of.enqueue().id}
        ids["triple"] = asyncio.run(triple.aenqueue(5)).id
        later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
        ids["later"] = double.using(run_after=later, priority=-3).enqueue(2).id
        out["ids"] = ids
        out["orders"] = Order.objects.count()
        out["jobs"] = {name: job(id) for name, id in ids.items()}
        out["later_ms"] = int(later.timestamp() * 1000)
        out["ready"] = double.get_result(ids["double"]).status
    else:
        ids = json.loads(sys.argv[2])
        for name, id in ids.items():
            r = asyncio.run(triple.aget_result(id)) if name == "triple" else \\
                    {"double": double, "greet": greet, "boom": boom, "context": attempt_of,
                     "later": double, "slow": slow}[name].get_result(id)
            r.refresh()
            out[name] = {"status": r.status, "attempts": r.attempts, "worker_ids": r.worker_ids,
                         "value": r.return_value if r.status == "SUCCESSFUL" else None,
                         "errors": [[e.exception_class_path, e.traceback] for e in r.errors],
                         "times": [str(t) if t else None for t in (r.enqueued_at, r.started_at,
                                    r.last_attempted_at, r.finished_at)]}
    print(json.dumps(out, default=str))
"""


def venv(name, python, *packages):
    """A venv under target/venvs/ with `packages` from PyPI (kept once complete), or a skip."""
    path = os.path.join(VENVS, name)
    ready = os.path.join(path, ".ready")
    if os.path.exists(ready):
        return path
    if not python or not os.path.exists(python):
        pytest.skip("no %s here" % (python or name))
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([python, "-m", "venv", path], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_NO_INDEX")}
    proc = subprocess.run([os.path.join(path, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check",
                           *packages], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        pytest.skip("pip could not install %s from PyPI (offline?): %s" % (" ".join(packages), proc.stderr[-300:]))
    open(ready, "w").close()
    return path


def project(tmp_path):
    files = {"settings.py": SETTINGS, "manage.py": MANAGE, "scenario.py": SCENARIO,
             "shop/__init__.py": "", "shop/models.py": MODELS, "shop/tasks.py": TASKS}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    return env


def run(venv_path, site, *args):
    proc = subprocess.run([os.path.join(venv_path, "bin", "python"), *args], cwd=site, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def scenario(venv_path, site):
    run(venv_path, site, "manage.py", "migrate", "--run-syncdb", "-v0")
    before = json.loads(run(venv_path, site, "scenario.py", "enqueue"))
    assert before["rolled_back"] == [0, None, "does not exist"], "the rollback took the order and the job"
    assert before["orders"] == 1
    jobs, ids = before["jobs"], before["ids"]
    assert all(j is not None and j["state"] == "waiting" for n, j in jobs.items() if n != "later"), jobs
    assert jobs["greet"]["queue"] == "mail" and jobs["greet"]["priority"] == 5
    assert jobs["double"]["queue"] == "default" and jobs["double"]["priority"] == 0
    assert jobs["later"]["state"] == "scheduled" and jobs["later"]["priority"] == -3
    assert jobs["later"]["run_at"] == before["later_ms"]
    assert before["ready"] == "READY"

    out = run(venv_path, site, "manage.py", "tinyq_worker", "--drain", "--concurrency", "2")
    assert "default: {'done': 3, 'failed': 1" in out and "mail: {'done': 1" in out, out

    after = json.loads(run(venv_path, site, "scenario.py", "results", json.dumps(ids)))
    assert after["double"]["status"] == "SUCCESSFUL" and after["double"]["value"] == {"double": 42}
    assert after["greet"]["value"] == "hello ada"
    assert after["triple"]["status"] == "SUCCESSFUL" and after["triple"]["value"] == 15
    assert after["context"]["value"] == 1
    assert after["double"]["attempts"] == 1 and len(after["double"]["worker_ids"]) == 1
    assert all(after["double"]["times"]), after["double"]
    boom = after["boom"]
    assert boom["status"] == "FAILED" and boom["value"] is None
    [(path, traceback)] = boom["errors"]
    assert path == "builtins.ValueError" and "ValueError: no 7" in traceback and "in boom" in traceback
    assert after["later"]["status"] == "READY" and after["later"]["attempts"] == 0


def test_JOB_02_django52_tasks_backport_enqueue_in_atomic_and_tinyq_worker(tmp_path):
    path = venv("django52", "/usr/bin/python3", "django>=5.2,<6", "django-tasks")
    scenario(path, project(tmp_path))


def test_JOB_02_django6_tasks_on_pysqlite3_enqueue_in_atomic_and_tinyq_worker(tmp_path):
    pythons = sorted(glob.glob("/root/.pyenv/versions/3.1[2-9]*/bin/python3"))
    path = venv("django6", pythons[0] if pythons else None, "django>=6,<7", "pysqlite3-binary")
    scenario(path, project(tmp_path))


def test_django_tinyq_worker_on_sigterm_finishes_the_task_in_flight_then_exits(tmp_path):
    path = venv("django52", "/usr/bin/python3", "django>=5.2,<6", "django-tasks")
    site = project(tmp_path)
    run(path, site, "manage.py", "migrate", "--run-syncdb", "-v0")
    ids = json.loads(run(path, site, "scenario.py", "slow"))["ids"]
    worker = subprocess.Popen([os.path.join(path, "bin", "python"), "manage.py", "tinyq_worker"], cwd=site,
                              env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (site / "started").exists():
            assert worker.poll() is None and time.monotonic() < deadline, worker.communicate()[0]
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        (site / "go").touch()          # the task in flight may finish now
        output = worker.communicate(timeout=120)[0]
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, output
    after = json.loads(run(path, site, "scenario.py", "results", json.dumps(ids)))
    assert after["slow"]["status"] == "SUCCESSFUL" and after["slow"]["value"] == "finished"
