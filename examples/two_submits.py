#!/usr/bin/env python3
"""Three submits with two idempotency keys make two jobs; one job fails once and is done on
its second attempt; a second sweep runs nothing, because a done job is a result, not a
request.

    /usr/bin/python3 examples/two_submits.py [DB]     # default examples/two_submits.db
"""
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import tinyq  # noqa: E402

DB = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "two_submits.db")


def submit(invoices, key, text):
    """The idempotency key is the job's id: a key seen before adds nothing."""
    seen = invoices.get("invoice:" + key) is not None
    job_id = invoices.add({"text": text}, id="invoice:" + key)
    print("submit %s -> job %s%s" % (key, job_id, " (seen before: nothing added)" if seen else ""))


def render(payload, run):
    """The handler: invoice b's first attempt fails, as an upstream timeout would."""
    if payload["text"] == "invoice b" and run.attempt == 1:
        print("  %s attempt %d: raises 'upstream timeout'" % (run.id, run.attempt))
        raise TimeoutError("upstream timeout")
    print("  %s attempt %d: done" % (run.id, run.attempt))
    return payload["text"].upper()


def sweep(invoices):
    """Run a worker until the queue has nothing left to run (waiting, scheduled, running)."""
    handled = []
    worker = threading.Thread(target=lambda: handled.append(invoices.work(render, poll=0.1)))
    worker.start()
    while True:
        row = invoices.conn.execute("SELECT scheduled + waiting + running FROM tq_stats(?)",
                                    (invoices.name,)).fetchone()
        if row is None or row[0] == 0:
            break
        time.sleep(0.05)
    invoices.stop()             # claim nothing more; work() returns when nothing is in flight
    worker.join()
    return handled[0]


def main():
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(DB + suffix):
            os.remove(DB + suffix)
    invoices = tinyq.Queue(DB, "invoices")
    invoices.settings(backoff="200ms")        # retry after an error 0.2 s later, not 1 s

    submit(invoices, "order-1", "invoice a")
    submit(invoices, "order-2", "invoice b")
    submit(invoices, "order-1", "invoice a")   # a client retry: same key, same job
    jobs = invoices.conn.execute("SELECT count(*) FROM tq_jobs").fetchone()[0]
    print("jobs in the store: %d" % jobs)

    print("sweep 1:")
    print("sweep 1 ran %d attempt(s)" % sweep(invoices))
    print("sweep 2:")
    print("sweep 2 ran %d attempt(s)" % sweep(invoices))

    for job_id in ("invoice:order-1", "invoice:order-2"):
        job = invoices.get(job_id)
        print("%s: %s after %d attempt(s), result %r"
              % (job_id, job["state"], job["attempt"], job["result"]))
    history = ["%s%s" % (e["state"], " (%s)" % e["detail"] if e["state"] == "scheduled" else "")
               for e in invoices.watch() if e["id"] == "invoice:order-2"]
    print("invoice:order-2 went: " + " -> ".join(history))
    invoices.close()


if __name__ == "__main__":
    main()
