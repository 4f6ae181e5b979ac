"""One worker process of a helper scenario (tests/helper_scenarios.json) for Python's
threads (tinyq.Queue) or asyncio (tinyq.AsyncQueue) helper:

    python3 scenario_worker.py threads|asyncio DB LOG INDEX

Runs work() with the scenario's options and handler until SIGTERM; each handler start
appends "id attempt pid" to LOG; prints "returned N" or "raised Class: message" at the end."""
import asyncio
import json
import os
import sys
import time

import tinyq

HERE = os.path.dirname(os.path.abspath(__file__))


def scenario(index):
    with open(os.path.join(HERE, "..", "helper_scenarios.json")) as f:
        return json.load(f)["scenarios"][int(index)]


def record(log, run):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, ("%s %d %d\n" % (run.id, run.attempt, os.getpid())).encode())
    finally:
        os.close(fd)


def work_options(spec):
    opts = dict(spec.get("work", {}))
    if "poll" in opts:
        opts["poll"] = opts["poll"] / 1000.0      # the scenarios say ms; Python takes seconds
    return opts


def result_of(spec):
    return {"unstorable": {1, 2}}.get(spec.get("result"), spec.get("result"))


def threads(db, log, spec):
    handler_spec = spec.get("handler", {})

    def handler(payload, run):
        record(log, run)
        if handler_spec.get("sleep_ms"):
            time.sleep(handler_spec["sleep_ms"] / 1000.0)
        if "snooze" in handler_spec:
            run.snooze(handler_spec["snooze"])
        if handler_spec.get("durable_sleep_ms"):
            run.sleep("nap", handler_spec["durable_sleep_ms"])
        return result_of(handler_spec)
    return tinyq.Queue(db, "q").work(handler, **work_options(spec))


def asyncio_(db, log, spec):
    handler_spec = spec.get("handler", {})

    async def handler(payload, run):
        record(log, run)
        if handler_spec.get("sleep_ms"):
            await asyncio.sleep(handler_spec["sleep_ms"] / 1000.0)
        if "snooze" in handler_spec:
            run.snooze(handler_spec["snooze"])
        if handler_spec.get("durable_sleep_ms"):
            await run.sleep("nap", handler_spec["durable_sleep_ms"])
        return result_of(handler_spec)
    return asyncio.run(tinyq.AsyncQueue(db, "q").work(handler, **work_options(spec)))


def main(kind, db, log, index):
    spec = scenario(index)
    print("working", flush=True)
    try:
        handled = (threads if kind == "threads" else asyncio_)(db, log, spec)
    except Exception as exc:
        print("raised %s: %s" % (type(exc).__name__, exc), flush=True)
        return
    print("returned %d" % handled, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
