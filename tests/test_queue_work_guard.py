"""Issue 29 (Low): one rule for the three helpers, a second work() on a Queue that is
already working is refused (AsyncQueue and Node already refused it)."""
import os
import sys
import threading

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "python"))
import tinyq  # noqa: E402


def test_a_second_work_on_a_working_queue_is_refused(db_path):
    q = tinyq.Queue(db_path, "q")
    q.add({"n": 1})
    running = threading.Event()

    def handler(payload, run):
        running.set()
        with pytest.raises(RuntimeError, match="already working"):
            q.work(lambda payload, run: None)
        q.stop()
    thread = threading.Thread(target=lambda: q.work(handler, poll=0.05), daemon=True)
    thread.start()
    thread.join(60)
    assert running.is_set() and not thread.is_alive()
    assert q.watch()[-1]["state"] == "done"
    q.close()
