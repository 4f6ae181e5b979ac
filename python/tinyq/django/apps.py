"""The Django app: tinyq loaded on every connection Django opens to a SQLite database."""
from django.apps import AppConfig
from django.db.backends.signals import connection_created

from .._connection import load


def load_tinyq(sender, connection, **kwargs):
    """connection_created: load tinyq into each new SQLite connection (so SELECT tq_add(...)
    works in any Django transaction)."""
    if connection.vendor == "sqlite":
        load(connection.connection)


class TinyqConfig(AppConfig):
    name = "tinyq.django"
    label = "tinyq"
    verbose_name = "tinyq"

    def ready(self):
        connection_created.connect(load_tinyq, dispatch_uid="tinyq.django.load_tinyq")
