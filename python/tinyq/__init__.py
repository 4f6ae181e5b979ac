"""tinyq for Python: load the extension, add jobs, and run workers.

Pure Python over the standard sqlite3 module (apsw connections work too).

    import tinyq
    replies = tinyq.Queue("app.db", "replies")
    replies.add({"messageId": 41}, id="reply:41")

    def answer(payload, run):
        text = run.step("answer", lambda: model.answer(payload["messageId"]))
        ...
        return {"sent": True}

    replies.work(answer, concurrency=4)      # until SIGTERM/SIGINT or replies.stop()

For asyncio, `tinyq.AsyncQueue` has the same methods as coroutines (see _aio.py).
`tinyq.Worker` (and `tinyq.AsyncWorker`) serves several queues in one work() call.
The threads' loop is in _worker.py (a queue's pool in _pool.py), the asyncio one in _aio.py
(a queue's in _aio_work.py), what both workers share in _protocol.py and _stopping.py; the
command line (cli.py) and the dashboard (dashboard.py) read the store through views.py.
"""
from ._aio import AsyncQueue, AsyncRun, AsyncWorker
from ._connection import extension_path, load, open
from ._context import Cancelled, JobContextFilter, Outcome, current_run
from ._queue import Queue
from ._version import __version__
from ._worker import Run
from ._workers import Worker

__all__ = ["load", "open", "extension_path", "Queue", "Worker", "AsyncQueue", "AsyncWorker", "Run", "AsyncRun", "Outcome",
           "Cancelled", "current_run", "JobContextFilter"]
