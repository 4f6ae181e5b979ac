"""One worker process of a helper scenario (tests/helper_scenarios.json) for Python's
threads (tinyq.Queue) or asyncio (tinyq.AsyncQueue) helper:

    python3 scenario_worker.py threads|asyncio DB LOG INDEX

Runs work() with the scenario's options and handler until SIGTERM; each handler start
appends "id attempt pid start" to LOG (and "... cancelled" / "... end" / "... step" as the
scenario says); prints "returned N" or "raised Class: message" at the end (with the
scenario's `drain`, drain() instead, and "drained {summary JSON}" once it returns). With the scenario's
`stop`, SIGTERM calls stop(timeout=...) and the process lives on after work() returns."""
import asyncio
import json
import os
import signal
import sys
import threading
import time

import tinyq

HERE = os.path.dirname(os.path.abspath(__file__))


def scenario(index):
    with open(os.path.join(HERE, "..", "helper_scenarios.json")) as f:
        return json.load(f)["scenarios"][int(index)]


def record(log, run, event="start"):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, ("%s %d %d %s\n" % (run.id, run.attempt, os.getpid(), event)).encode())
    finally:
        os.close(fd)


def work_options(spec):
    opts = dict(spec.get("work", {}))
    if "poll" in opts:
        opts["poll"] = opts["poll"] / 1000.0      # the scenarios say ms; Python takes seconds
    return opts


def stop_timeout(spec):
    return spec["stop"]["timeout_ms"] / 1000.0    # Python takes seconds


def result_of(spec):
    return {"unstorable": {1, 2}}.get(spec.get("result"), spec.get("result"))


def step_answer(log, run, handler_spec):
    """A step's function: logs "step", answers the scenario's step_result."""
    record(log, run, "step")
    return {"unstorable": {1, 2}}.get(handler_spec["step_result"], handler_spec["step_result"])


def raise_until(handler_spec, payload, run):
    """raise_until: job n's attempts up to that number raise an error."""
    if run.attempt <= handler_spec.get("raise_until", {}).get(str(payload["n"]), 0):
        raise RuntimeError("attempt %d of job %d raises" % (run.attempt, payload["n"]))


def threads(db, log, spec):
    handler_spec = spec.get("handler", {})

    def handler(payload, run):
        record(log, run)
        told = False
        while handler_spec.get("hang"):
            if run.cancelled and not told:
                record(log, run, "cancelled")
                told = True
            time.sleep(0.02)
        if handler_spec.get("sleep_ms"):
            time.sleep(handler_spec["sleep_ms"] / 1000.0)
            if "stop" in spec or "queues" in spec:
                record(log, run, "end")
        if "snooze" in handler_spec:
            run.snooze(handler_spec["snooze"])
        if handler_spec.get("durable_sleep_ms"):
            run.sleep("nap", handler_spec["durable_sleep_ms"])
        for call, name in handler_spec.get("waits", []):
            getattr(run, call)(name, 0)
        if "step_result" in handler_spec:
            run.step("ask", lambda: step_answer(log, run, handler_spec))
        raise_until(handler_spec, payload, run)
        return result_of(handler_spec)
    if "queues" in spec:     # one work() for all of them; SIGTERM stops it
        queues = {name: (handler, opts) for name, opts in spec["queues"].items()}
        return sum(tinyq.Worker(db, queues, **work_options(spec)).work().values())
    queue = tinyq.Queue(db, "q")
    if spec.get("drain"):
        return queue.drain(handler, **work_options(spec))
    if "stop" not in spec:
        return queue.work(handler, **work_options(spec))
    # Off the main thread work() installs no signal handlers: SIGTERM is ours.
    done = {}
    worker = threading.Thread(target=lambda: done.update(n=queue.work(handler, **work_options(spec))))
    signal.signal(signal.SIGTERM, lambda *_: queue.stop(timeout=stop_timeout(spec)))
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
    return done["n"]


async def ignoring_cancel(seconds):
    """Sleep `seconds` whatever cancels the task meanwhile (as a handler may)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        try:
            await asyncio.sleep(end - loop.time())
        except asyncio.CancelledError:
            pass


def asyncio_(db, log, spec):
    handler_spec = spec.get("handler", {})

    async def handler(payload, run):
        record(log, run)
        told = False
        while handler_spec.get("hang"):
            if run.cancelled and not told:
                record(log, run, "cancelled")
                told = True
            await ignoring_cancel(0.02)
        if handler_spec.get("sleep_ms"):
            if "stop" in spec:
                await ignoring_cancel(handler_spec["sleep_ms"] / 1000.0)
                record(log, run, "end")
            else:
                await asyncio.sleep(handler_spec["sleep_ms"] / 1000.0)
                if "queues" in spec:
                    record(log, run, "end")
        if "snooze" in handler_spec:
            run.snooze(handler_spec["snooze"])
        if handler_spec.get("durable_sleep_ms"):
            await run.sleep("nap", handler_spec["durable_sleep_ms"])
        for call, name in handler_spec.get("waits", []):
            await getattr(run, call)(name, 0)
        if "step_result" in handler_spec:
            await run.step("ask", lambda: step_answer(log, run, handler_spec))
        raise_until(handler_spec, payload, run)
        return result_of(handler_spec)

    async def main():
        if "queues" in spec:
            queues = {name: (handler, opts) for name, opts in spec["queues"].items()}
            return sum((await tinyq.AsyncWorker(db, queues, **work_options(spec)).work()).values())
        queue = tinyq.AsyncQueue(db, "q")
        if spec.get("drain"):
            return await queue.drain(handler, **work_options(spec))
        if "stop" in spec:   # the app's own handler: work() calls it after its own stop()
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGTERM, lambda: queue.stop(timeout=stop_timeout(spec)))
        handled = await queue.work(handler, **work_options(spec))
        if "stop" in spec:
            print("returned %d" % handled, flush=True)
            await asyncio.Event().wait()    # lives on: the abandoned handler may return
        return handled
    return asyncio.run(main())


def main(kind, db, log, index):
    spec = scenario(index)
    print("working", flush=True)
    try:
        handled = (threads if kind == "threads" else asyncio_)(db, log, spec)
    except Exception as exc:
        print("raised %s: %s" % (type(exc).__name__, exc), flush=True)
        return
    if spec.get("drain"):
        print("drained %s" % json.dumps(handled), flush=True)
        return
    print("returned %d" % handled, flush=True)
    if "stop" in spec:
        while True:           # lives on: the abandoned handler may return
            time.sleep(1)


if __name__ == "__main__":
    main(*sys.argv[1:])
