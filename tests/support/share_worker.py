"""One worker process of the fairness tests (tests/test_limit_share.py):
    python3 share_worker.py threads|asyncio DB CONCURRENCY
It works the queue `q` until SIGTERM; each job sleeps its payload's ms and returns this
process's pid, so that a test can count which process ran what. Prints "working" first,
and "returned N" once work() has ended."""
import asyncio
import os
import sys
import time

import tinyq

mode, db, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])


def handle(payload, run):
    time.sleep(payload["ms"] / 1000)
    return os.getpid()


async def handle_async(payload, run):
    await asyncio.sleep(payload["ms"] / 1000)
    return os.getpid()


async def main_async():
    print("working", flush=True)
    return await tinyq.AsyncQueue(db, "q").work(handle_async, concurrency=concurrency, poll=0.2)


if __name__ == "__main__":
    if mode == "threads":
        print("working", flush=True)
        handled = tinyq.Queue(db, "q").work(handle, concurrency=concurrency, poll=0.2)
    else:
        handled = asyncio.run(main_async())
    print("returned %d" % handled, flush=True)
