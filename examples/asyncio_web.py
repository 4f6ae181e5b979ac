#!/usr/bin/env python3
"""An asyncio web app whose slow model call runs in the background, as a tinyq job.

    /usr/bin/python3 examples/asyncio_web.py [--db examples/asyncio_web.db] [--port 8001]

    curl -i -X POST -H 'X-Request-Id: req-1' -d '{"ticket": 1}' localhost:8001/triage
    curl localhost:8001/jobs/<job>              # waiting -> running -> done

One process, standard library only: the HTTP side answers 202 with the job before any
model is called; the worker side (`AsyncQueue.work`, on the same event loop) runs the
slow call. The job is a row, so a client can poll it, and it survives a restart. The
request's X-Request-Id travels with the job as its meta: the worker's log lines carry it
next to the job id (tinyq.JobContextFilter). A failed call records only the error's class
(errors="class"): provider messages travel further than people expect. SIGTERM or Ctrl-C
stops claiming and waits for the calls in flight before the process exits.
"""
import argparse
import asyncio
import json
import logging
import os
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import tinyq  # noqa: E402

QUEUE = "triage"
MODEL_SECONDS = 0.4          # the deliberately slow fake model
log = logging.getLogger("triage")


class ProviderError(Exception):
    """What a model provider raises; its message may carry things the job row should not."""


async def classify(ticket):
    """The slow call: a fake model that thinks for MODEL_SECONDS."""
    await asyncio.sleep(MODEL_SECONDS)
    if ticket == 13:
        raise ProviderError("quota exceeded for key sk-live-1234")
    return {"category": "refund", "confidence": "high"}


async def triage(payload, run):
    """The worker: the model's answer is a step, so a retry after a crash does not pay twice."""
    log.info("classifying ticket %s", payload["ticket"])
    answer = await run.step("classify", lambda: classify(payload["ticket"]))
    log.info("ticket %s is %s", payload["ticket"], answer["category"])
    return {"ticket": payload["ticket"], "state": "awaiting_approval", **answer}


# -- the HTTP side ---------------------------------------------------------------------

async def serve(jobs, reader, writer):
    try:
        method, path, headers, body = await read_request(reader)
        status, reply = await route(jobs, method, path, headers, body)
    except (ValueError, KeyError, TypeError) as exc:
        status, reply = 400, {"error": "bad request: %s" % exc}
    data = json.dumps(reply).encode()
    writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n" % (status, REASONS[status], len(data)) + data)
    await writer.drain()
    writer.close()


REASONS = {200: b"OK", 202: b"Accepted", 400: b"Bad Request", 404: b"Not Found"}


async def read_request(reader):
    method, path, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
    headers = {}
    while True:
        line = (await reader.readline()).decode("latin-1").strip()
        if not line:
            break
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return method, path, headers, body


async def route(jobs, method, path, headers, body):
    if method == "POST" and path == "/triage":
        ticket = int(json.loads(body or b"{}")["ticket"])
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        job_id = await jobs.add({"ticket": ticket}, meta={"correlation_id": request_id})
        return 202, {"job": job_id, "state": (await jobs.get(job_id))["state"], "ticket": ticket}
    if method == "GET" and path.startswith("/jobs/"):
        job = await jobs.get(path[len("/jobs/"):])
        if job is None:
            return 404, {"error": "no such job"}
        return 200, {k: job[k] for k in ("id", "state", "result", "error", "attempt")}
    return 404, {"error": "not found"}


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default=os.path.join(HERE, "asyncio_web.db"))
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    handler = logging.StreamHandler()
    handler.addFilter(tinyq.JobContextFilter())
    handler.setFormatter(logging.Formatter("%(name)s job=%(job_id)s request=%(correlation_id)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])

    jobs = tinyq.AsyncQueue(args.db, QUEUE)
    server = await asyncio.start_server(lambda r, w: serve(jobs, r, w), "127.0.0.1", args.port)
    print("listening on http://127.0.0.1:%d" % server.sockets[0].getsockname()[1], flush=True)
    try:   # until SIGTERM or Ctrl-C; then the calls in flight finish and settle
        handled = await jobs.work(triage, concurrency=100, errors="class")
    finally:
        server.close()
        await server.wait_closed()
        await jobs.close()
    print("stopped after %d jobs" % handled, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
