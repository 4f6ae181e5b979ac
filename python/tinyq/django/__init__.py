"""tinyq.django: a Django app (loads tinyq on SQLite connections) and a django.tasks backend.

    INSTALLED_APPS += ["tinyq.django"]
    TASKS = {"default": {"BACKEND": "tinyq.django.TinyqBackend", "QUEUES": ["default"]}}

then `python manage.py tinyq_worker` runs the tasks. Django 6's django.tasks, or the
django-tasks backport (module django_tasks) on Django 5.2. docs/frameworks.md has more.
"""
from typing import Any


def __getattr__(name: str) -> Any:
    # The backend imports django.tasks: only when TASKS names it, not when the app loads.
    if name == "TinyqBackend":
        from .backend import TinyqBackend
        return TinyqBackend
    raise AttributeError("module 'tinyq.django' has no attribute %r" % name)
