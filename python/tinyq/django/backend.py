"""TinyqBackend: django.tasks tasks as tinyq jobs in the SQLite database of a Django alias.

    TASKS = {"default": {"BACKEND": "tinyq.django.TinyqBackend",
                         "QUEUES": ["default", "emails"],        # tinyq queues of those names
                         "OPTIONS": {"DATABASE": "default"}}}     # the alias (default: "default")

enqueue() is `SELECT tq_add(...)` on Django's own connection of that alias: inside
`transaction.atomic()` (which issues BEGIN itself) the job commits or rolls back with the
caller's writes. A task's priority, run_after and queue_name are the job's priority, `at`
and queue. The job's payload is {"task": module path, "args", "kwargs", "priority",
"queue_name", "run_after"}; its result the return value as JSON; a raised exception fails
the job at once (as Django's own backends do), its error the JSON of a TaskError. A worker
that dies mid-task leaves the job to run again once its lease runs out.
get_result(id) reads tq_get. `manage.py tinyq_worker` runs the jobs (handler()).
"""
from __future__ import annotations

import datetime
import json
import time
from traceback import format_exception
from typing import Any, Callable, Dict, Optional

from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone
from django.utils.module_loading import import_string

try:   # Django 6
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:   # the django-tasks backport (Django 5.2)
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

ADD = "SELECT tq_add(%s, %s, %s)"
GET = "SELECT tq_get(%s)"

STATUS = {"scheduled": TaskResultStatus.READY, "waiting": TaskResultStatus.READY,
          "blocked": TaskResultStatus.READY, "running": TaskResultStatus.RUNNING,
          "done": TaskResultStatus.SUCCESSFUL, "failed": TaskResultStatus.FAILED}


class JobError(Exception):
    """The class of an error tinyq recorded itself (an expired job, a lost lease...), not a
    task's exception: TaskError.exception_class_path names it for those."""


class TinyqBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: Dict[str, Any]):
        super().__init__(alias, params)
        self.database = self.options.get("DATABASE", "default")

    # -- adding and reading ---------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        payload = {"task": task.module_path, "args": normalize_json(list(args)),
                   "kwargs": normalize_json(dict(kwargs)), "priority": task.priority,
                   "queue_name": task.queue_name,
                   "run_after": None if task.run_after is None else task.run_after.isoformat()}
        options: Dict[str, Any] = {"priority": task.priority}
        if task.run_after is not None:
            options["at"] = _ms(task.run_after)
        with connections[self.database].cursor() as cursor:
            cursor.execute(ADD, [task.queue_name, json.dumps(payload), json.dumps(options)])
            job_id = cursor.fetchone()[0]
        result = self.get_result(job_id)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        with connections[self.database].cursor() as cursor:
            cursor.execute(GET, [result_id])
            row = cursor.fetchone()
        job = None if row is None or row[0] is None else json.loads(row[0])
        if job is None or not isinstance(job.get("payload"), dict) or "task" not in job["payload"]:
            raise TaskResultDoesNotExist(result_id)
        return self.result_of(job)

    def result_of(self, job: Dict[str, Any], task: Any = None) -> Any:
        """The TaskResult of a job as tq_get shows it."""
        payload = job["payload"]
        if task is None:
            task = task_of(payload)
        progress = job.get("progress") if isinstance(job.get("progress"), dict) else {}
        status = STATUS[job["state"]]
        result = TaskResult(
            task=task, id=job["id"], status=status, backend=self.alias,
            args=payload.get("args", []), kwargs=payload.get("kwargs", {}),
            enqueued_at=_time(job.get("created_at")), started_at=_time(progress.get("started_at")),
            last_attempted_at=_time(progress.get("last_attempted_at")),
            finished_at=_time(job.get("settled_at")),
            errors=[] if job.get("error") is None else [_task_error(job["error"])],
            worker_ids=list(progress.get("worker_ids", [])))
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", job.get("result"))
        return result

    # -- running ----------------------------------------------------------------------------

    def handler(self, worker_id: str) -> Callable[[Any, Any], Any]:
        """The tinyq handler that runs this backend's tasks (a threads worker's)."""
        def run_task(payload: Any, run: Any) -> Any:
            close_old_connections()   # as a request does: the task's own ORM connections
            try:
                return self._run(payload, run, worker_id)
            finally:
                close_old_connections()
        return run_task

    def _run(self, payload: Any, run: Any, worker_id: str) -> str:
        try:
            task = task_of(payload)
        except Exception as exc:   # the task's module moved or is gone
            run.fail(_error_json(exc))
        # The attempts so far, kept as the job's progress: tq_get has no history of its own.
        job = json.loads(run.conn.execute("SELECT tq_get(?)", [run.id]).fetchone()[0])
        seen = job.get("progress") if isinstance(job.get("progress"), dict) else {}
        now = time.time() * 1000
        job["progress"] = {"worker_ids": list(seen.get("worker_ids", [])) + [worker_id],
                           "started_at": seen.get("started_at", now), "last_attempted_at": now}
        run.progress(job["progress"])
        result = self.result_of(job, task)
        task_started.send(type(self), task_result=result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
            else:
                value = task.call(*result.args, **result.kwargs)
            value = normalize_json(value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            _finished(self, result, TaskResultStatus.FAILED, error=exc)
            run.fail(_error_json(exc))
        _finished(self, result, TaskResultStatus.SUCCESSFUL, value=value)
        return json.dumps(value)   # text, stored as is: a str return value stays a str


def task_of(payload: Dict[str, Any]) -> Any:
    """The Task of a job's payload, with the job's own priority, queue and run_after."""
    task = import_string(payload["task"])
    run_after = payload.get("run_after")
    return task.using(priority=payload.get("priority"), queue_name=payload.get("queue_name"),
                      run_after=None if run_after is None else datetime.datetime.fromisoformat(run_after))


def _finished(backend: Any, result: Any, status: Any, value: Any = None,
              error: Optional[BaseException] = None) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    if error is not None:
        result.errors.append(_task_error(_error_json(error)))
    else:
        object.__setattr__(result, "_return_value", value)
    task_finished.send(type(backend), task_result=result)


def _error_json(exc: BaseException) -> str:
    kind = type(exc)
    return json.dumps({"exception_class_path": "%s.%s" % (kind.__module__, kind.__qualname__),
                       "traceback": "".join(format_exception(kind, exc, exc.__traceback__))})


def _task_error(text: str) -> Any:
    try:
        error = json.loads(text)
        return TaskError(exception_class_path=error["exception_class_path"], traceback=error["traceback"])
    except (ValueError, TypeError, KeyError):   # an error of tinyq's own: 'expired', ...
        return TaskError(exception_class_path="%s.%s" % (JobError.__module__, JobError.__qualname__),
                         traceback=str(text))


def _ms(when: datetime.datetime) -> int:
    if timezone.is_naive(when):
        when = timezone.make_aware(when)
    return int(when.timestamp() * 1000)


def _time(ms: Optional[float]) -> Optional[datetime.datetime]:
    if ms is None:
        return None
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return when if settings.USE_TZ else timezone.make_naive(when)
