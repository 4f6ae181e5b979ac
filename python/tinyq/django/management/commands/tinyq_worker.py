"""python manage.py tinyq_worker [--queue Q ...] [--concurrency N] [--drain]: runs the tasks.

A tinyq threads worker (tinyq.Queue.work, tinyq.Worker for several queues) over the SQLite
file of the backend's database alias, with the helpers' shutdown: on SIGTERM or SIGINT it
claims nothing more and exits once the tasks in flight have finished. --drain runs every
task that is due (and those that become due meanwhile), queue after queue, then exits.
"""
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from tinyq import Queue, Worker
from tinyq._protocol import worker_name

LEFT_DUE = "SELECT 1 FROM tq_stats(?) WHERE waiting > 0 AND NOT paused"


class Command(BaseCommand):
    help = "Run django.tasks tasks queued with tinyq.django.TinyqBackend."

    def add_arguments(self, parser):
        parser.add_argument("--queue", action="append", dest="queues", metavar="Q",
                            help="a queue to serve (again for more); default: the backend's QUEUES")
        parser.add_argument("--concurrency", type=int, default=1, metavar="N",
                            help="tasks run at once, per queue (threads; default 1)")
        parser.add_argument("--drain", action="store_true",
                            help="run the tasks that are due, then exit")
        parser.add_argument("--backend", default="default", help="the TASKS alias (default: default)")
        parser.add_argument("--worker", default=None, help="the worker's name (default: host:pid)")

    def handle(self, *args, **options):
        from tinyq.django.backend import TinyqBackend
        try:
            from django.tasks import task_backends
        except ImportError:
            from django_tasks import task_backends
        backend = task_backends[options["backend"]]
        if not isinstance(backend, TinyqBackend):
            raise CommandError("TASKS[%r] is not a tinyq.django.TinyqBackend" % options["backend"])
        if options["concurrency"] < 1:
            raise CommandError("--concurrency must be 1 or more, not %d" % options["concurrency"])
        queues = options["queues"] or sorted(backend.queues) or ["default"]
        path = connections[backend.database].settings_dict["NAME"]
        worker = worker_name(options["worker"])
        handler = backend.handler(worker)
        concurrency = options["concurrency"]
        if options["drain"]:
            for name in queues:
                queue = Queue(str(path), name)
                summary = queue.drain(handler, concurrency=concurrency, worker=worker)
                self.stdout.write("%s: %s" % (name, summary))
                # Due jobs left behind: a signal ended the drain; the next queues wait too.
                stopped = queue.conn.execute(LEFT_DUE, [name]).fetchone()
                queue.close()
                if stopped:
                    break
        elif len(queues) == 1:
            Queue(str(path), queues[0]).work(handler, concurrency=concurrency, worker=worker)
        else:
            Worker(str(path), {name: (handler, {"concurrency": concurrency}) for name in queues},
                   worker=worker).work()
