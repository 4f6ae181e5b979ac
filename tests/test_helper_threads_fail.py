"""Issue 29: a helper thread (the waiter, the heartbeat) that cannot open its connection
(here: it raises, as at the file descriptor limit) makes work() raise, in the threads and
asyncio helpers, instead of dying with a traceback while work() neither claims nor returns."""
import asyncio
import os
import sys
import threading

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402
from tinyq import _queue  # noqa: E402


def failing_in(thread_name, connect):
    def wrapped(*args, **kw):
        if threading.current_thread().name == thread_name:
            raise OSError(24, "Too many open files")
        return connect(*args, **kw)
    return wrapped


def work_in_a_thread(work):
    """work()'s outcome (its exception or its answer), or 'hung' after 60 s."""
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(_catch(work)), daemon=True)
    thread.start()
    thread.join(60)
    return outcome[0] if outcome else "hung"


def _catch(work):
    try:
        return work()
    except Exception as exc:
        return exc


@pytest.mark.parametrize("thread_name", ["tinyq-waiter", "tinyq-heartbeat"])
def test_a_threads_helper_thread_that_cannot_connect_makes_work_raise(db_path, monkeypatch, thread_name):
    monkeypatch.setattr(_queue, "_open_like", failing_in(thread_name, _queue._open_like))
    q = tinyq.Queue(db_path, "q")
    outcome = work_in_a_thread(lambda: q.work(lambda payload, run: None, poll=0.05))
    q.stop()
    assert isinstance(outcome, OSError) and "Too many open files" in str(outcome), outcome


def test_an_asyncio_waiter_that_cannot_connect_makes_work_raise(db_path):
    q = tinyq.AsyncQueue(db_path, "q")
    q._connect = failing_in("tinyq-aio-waiter", q._connect)

    async def handler(payload, run):
        return None
    outcome = work_in_a_thread(lambda: asyncio.run(q.work(handler, poll=0.05)))
    q.stop()
    assert isinstance(outcome, OSError) and "Too many open files" in str(outcome), outcome
