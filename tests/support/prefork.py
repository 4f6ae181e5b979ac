"""The prefork pattern of issue 28, as a new user writes it: the parent touches a
tinyq.Queue (or AsyncQueue), forks WORKERS workers (multiprocessing's fork context, Linux's
default), and a spawned producer adds JOBS jobs. Each handler appends its job id to LOG;
the parent returns once every job is done (or prints what is missing after DEADLINE s).

    python3 prefork.py DB LOG threads|asyncio [WORKERS] [JOBS]
"""
import asyncio
import multiprocessing as mp
import os
import sys
import time

import tinyq

DEADLINE = 120.0


def record(log, payload):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, ("%s %d\n" % (payload["n"], os.getpid())).encode())
    finally:
        os.close(fd)


def thread_worker(db, log):
    tinyq.Queue(db, "emails").work(lambda payload, run: record(log, payload), concurrency=2)


def asyncio_worker(db, log):
    async def handler(payload, run):
        record(log, payload)

    asyncio.run(tinyq.AsyncQueue(db, "emails").work(handler, concurrency=2))


def producer(db, jobs):
    queue = tinyq.Queue(db, "emails")
    for n in range(jobs):
        queue.add({"n": n})


async def set_up_async(db):
    await tinyq.AsyncQueue(db, "emails").settings(concurrency=4)


def main(db, log, kind, workers=8, jobs=600):
    workers, jobs = int(workers), int(jobs)
    if kind == "threads":
        tinyq.Queue(db, "emails").settings(concurrency=4)   # set up in the parent
        target = thread_worker
    else:
        asyncio.run(set_up_async(db))
        target = asyncio_worker
    forked = [mp.get_context("fork").Process(target=target, args=(db, log), daemon=True)
              for _ in range(workers)]
    for process in forked:
        process.start()
    spawned = mp.get_context("spawn").Process(target=producer, args=(db, jobs))
    spawned.start()
    spawned.join()
    end = time.monotonic() + DEADLINE
    done = 0
    while time.monotonic() < end:
        with tinyq.open(db) as conn:
            done = conn.execute("SELECT count(*) FROM tq_jobs WHERE queue = 'emails' AND state = 'done'").fetchone()[0]
        if done == jobs:
            break
        time.sleep(0.1)
    for process in forked:
        process.terminate()
        process.join()
    print("done", done, "of", jobs)


if __name__ == "__main__":
    main(*sys.argv[1:])
