"""One worker process of the workflow tests (tests/test_workflow_helpers.py), for the Python
helpers:
    python3 workflow_worker.py threads|asyncio DB LOG [CONCURRENCY]
It works the queue `wf` until SIGTERM. Its handler, chosen by the payload's `kind`, appends
"event id attempt pid" lines to LOG (start: each attempt; model: a slow call kept as a step;
collected, sent, woke: what comes after a wait; `collect` waits for jobs added before it,
then for a signal), so that a test can count what ran. Prints
"working" first, and "returned N" once work() has ended. workflow_worker.js is the same for
Node."""
import asyncio
import os
import sys

import tinyq

mode, db, log = sys.argv[1:4]
concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 1


def note(event, run):
    with open(log, "a") as f:
        f.write("%s %s %d %d\n" % (event, run.id, run.attempt, os.getpid()))


def children(payload, run):
    """A parent's children: ids made from its own, so that a replay adds nothing."""
    ids = ["%s/%d" % (run.id, n) for n in range(payload["children"])]
    return ids, [{"kind": "child", "n": n, "fail": n == payload.get("failing")} for n in range(len(ids))]


def started(payload, run):
    note("start", run)
    return payload["kind"]


def child(payload, run):
    """A page: its result, or failed for good when its parent says so."""
    if payload["fail"]:
        run.fail("bad page")
    return payload["n"] * 10


def handle(payload, run):
    kind = started(payload, run)
    if kind == "child":
        return child(payload, run)
    if kind == "parent":
        ids, payloads = children(payload, run)
        tinyq.Queue(run.conn, "wf").add_many(payloads, ids=ids)
        results = run.wait_for(ids)
        note("collected", run)
        return {"results": results}
    if kind == "collect":      # jobs added before it, then a long wait
        results = run.wait_for(payload["ids"])
        note("collected", run)
        approval = run.wait_signal(payload["signal"], "7d")
        note("sent", run)
        return {"results": results, "approval": approval}
    if kind == "approval":
        draft = run.step("draft", lambda: note("model", run) or "a draft")
        approval = run.wait_signal(payload["signal"], payload.get("timeout"))
        note("sent", run)
        return {"draft": draft, "approval": approval}
    if kind == "sleeper":
        run.sleep("nap", payload["ms"])
        note("woke", run)
        return "woke"
    return "plain"


async def handle_async(payload, run, adder):
    kind = started(payload, run)
    if kind == "child":
        return child(payload, run)
    if kind == "parent":
        ids, payloads = children(payload, run)
        await adder.add_many(payloads, ids=ids)
        results = await run.wait_for(ids)
        note("collected", run)
        return {"results": results}
    if kind == "collect":
        results = await run.wait_for(payload["ids"])
        note("collected", run)
        approval = await run.wait_signal(payload["signal"], "7d")
        note("sent", run)
        return {"results": results, "approval": approval}
    if kind == "approval":
        draft = await run.step("draft", lambda: note("model", run) or "a draft")
        approval = await run.wait_signal(payload["signal"], payload.get("timeout"))
        note("sent", run)
        return {"draft": draft, "approval": approval}
    if kind == "sleeper":
        await run.sleep("nap", payload["ms"])
        note("woke", run)
        return "woke"
    return "plain"


async def main_async():
    queue = tinyq.AsyncQueue(db, "wf")

    async def handler(payload, run):
        return await handle_async(payload, run, queue)
    print("working", flush=True)
    return await queue.work(handler, concurrency=concurrency, poll=0.2)


if __name__ == "__main__":
    if mode == "threads":
        print("working", flush=True)
        handled = tinyq.Queue(db, "wf").work(handle, concurrency=concurrency, poll=0.2)
    else:
        handled = asyncio.run(main_async())
    print("returned %d" % handled, flush=True)
