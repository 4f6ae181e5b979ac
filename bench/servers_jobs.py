"""The job functions RQ's worker processes import (bench/servers.py puts bench/ on their
PYTHONPATH): a no-op, a 0.2 s sleep, and a stamp of when a job started (latency)."""
import os
import time


def noop(i):
    return None


def nap(i, seconds):
    time.sleep(seconds)


def stamp(i, path):
    # one line per job, appended in one write: "i monotonic-seconds"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"%d %.6f\n" % (i, time.monotonic()))
    finally:
        os.close(fd)
