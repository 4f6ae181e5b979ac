#!/usr/bin/env python3
"""A support desk's triage that waits for a person's approval before it sends (asyncio,
standard library HTTP only).

    /usr/bin/python3 examples/approval.py [--db examples/approval.db] [--port 8002]

    curl -i -X POST localhost:8002/tickets/1/triage          # 202 and the job, at once
    curl localhost:8002/jobs/triage:ticket-1                  # waiting -> running -> blocked
    curl -X POST -d '{"by": "lee"}' localhost:8002/tickets/1/approve
    curl localhost:8002/jobs/triage:ticket-1                  # ... -> running -> done
    curl localhost:8002/tickets/1                             # sent, once

The job classifies the ticket and drafts a reply with a slow fake model, each answer kept as
a step, then waits for the signal `approve:ticket-1` (run.wait_signal): it is `blocked`,
holding no worker. The approval is a row in the `approvals` table, whose trigger sends the
signal (tq_signal) in the same transaction as the row. The job then runs again from the top:
its steps return the kept answers without calling the model again, and the reply goes out
once (an outbox row keyed by ticket).

`--role web` and `--role worker` run the two halves in two processes on the same file (the
default, `both`, runs them on one event loop). A worker killed while the job waits loses
nothing: the wait is a row, and the approval wakes the job for whichever worker comes next.
SIGTERM or Ctrl-C stops claiming and waits for the work in flight.
"""
import argparse
import asyncio
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import tinyq  # noqa: E402

QUEUE = "triage"
MODEL_SECONDS = 0.4          # the deliberately slow fake model
APPROVAL_TIMEOUT = "7d"      # after that the job ends without sending

SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (id INTEGER PRIMARY KEY, subject TEXT NOT NULL, body TEXT NOT NULL,
                                    state TEXT NOT NULL DEFAULT 'open');
CREATE TABLE IF NOT EXISTS approvals (ticket INTEGER PRIMARY KEY REFERENCES tickets, by TEXT NOT NULL,
                                      at INTEGER NOT NULL);
-- The signal commits (or rolls back) with the approval: no approval without its wake-up.
CREATE TRIGGER IF NOT EXISTS approvals_signal AFTER INSERT ON approvals BEGIN
  SELECT tq_signal('approve:ticket-' || NEW.ticket, json_object('by', NEW.by));
END;
-- The outbox: one reply per ticket, whatever happens to the job sending it.
CREATE TABLE IF NOT EXISTS sent (ticket INTEGER PRIMARY KEY, body TEXT NOT NULL, at INTEGER NOT NULL);
INSERT OR IGNORE INTO tickets (id, subject, body) VALUES (1, 'Where is my refund?', 'Order 42 came back on Monday.');
"""


def sql(db, fn):
    """fn(conn) on a connection of its own (tinyq loaded: the trigger calls tq_signal), in a
    thread: the event loop never waits for SQLite."""
    def call():
        conn = tinyq.open(db)
        try:
            return fn(conn)
        finally:
            conn.close()
    return asyncio.to_thread(call)


# -- the job ---------------------------------------------------------------------------

async def model(what, ticket):
    """The slow fake model; each call is printed, so that a repeat would show."""
    print("model: %s ticket %d" % (what, ticket), flush=True)
    await asyncio.sleep(MODEL_SECONDS)
    if what == "classify":
        return {"category": "refund", "confidence": "high"}
    return "A refund takes three business days to appear."


def send(conn, ticket, body):
    """The reply goes out once: the outbox row is keyed by ticket, and commits with the
    ticket's new state."""
    conn.execute("BEGIN IMMEDIATE")
    sent = conn.execute("INSERT OR IGNORE INTO sent (ticket, body, at) VALUES (?, ?, ?)",
                        (ticket, body, int(time.time() * 1000))).rowcount
    conn.execute("UPDATE tickets SET state = 'sent' WHERE id = ?", (ticket,))
    conn.execute("COMMIT")
    return bool(sent)


def make_triage(db):
    async def triage(payload, run):
        """Straight-line code: each await that waits ends the attempt, and the next attempt
        comes back here through the steps kept."""
        ticket = payload["ticket"]
        label = await run.step("classify", lambda: model("classify", ticket))
        draft = await run.step("draft", lambda: model("draft", ticket))
        await sql(db, lambda c: c.execute("UPDATE tickets SET state = 'awaiting_approval' WHERE id = ? "
                                          "AND state = 'open'", (ticket,)))
        approval = await run.wait_signal("approve:ticket-%d" % ticket, APPROVAL_TIMEOUT)
        if approval is None:
            return {"ticket": ticket, "state": "not approved in time", **label}
        if await run.step("send", lambda: sql(db, lambda c: send(c, ticket, draft))):
            print("sent: ticket %d" % ticket, flush=True)
        return {"ticket": ticket, "state": "sent", "approved_by": approval["by"], **label}
    return triage


# -- the HTTP side ---------------------------------------------------------------------

async def route(db, jobs, method, path, body):
    parts = path.strip("/").split("/")
    if method == "POST" and len(parts) == 3 and parts[0] == "tickets" and parts[2] in ("triage", "approve"):
        ticket = int(parts[1])
        if not await sql(db, lambda c: c.execute("SELECT 1 FROM tickets WHERE id = ?", (ticket,)).fetchone()):
            return 404, {"error": "no ticket %d" % ticket}
        if parts[2] == "triage":   # the ticket's id is the job's: a second POST adds nothing
            job_id = await jobs.add({"ticket": ticket}, id="triage:ticket-%d" % ticket)
            return 202, {"job": job_id, "state": (await jobs.get(job_id))["state"], "ticket": ticket}
        by = str(json.loads(body or b"{}").get("by") or "someone")

        # One statement: the row and its trigger's tq_signal commit together.
        approved = await sql(db, lambda c: c.execute(
            "INSERT OR IGNORE INTO approvals (ticket, by, at) VALUES (?, ?, ?)",
            (ticket, by, int(time.time() * 1000))).rowcount)
        if not approved:
            return 409, {"error": "ticket %d is already approved" % ticket}
        return 200, {"ticket": ticket, "approved_by": by}
    if method == "GET" and len(parts) == 2 and parts[0] == "jobs":
        job = await jobs.get(parts[1])
        if job is None:
            return 404, {"error": "no such job"}
        return 200, {k: job.get(k) for k in ("id", "state", "attempt", "blocked_on", "result", "error")}
    if method == "GET" and len(parts) == 2 and parts[0] == "tickets":
        row = await sql(db, lambda c: c.execute(
            "SELECT state, (SELECT count(*) FROM sent WHERE ticket = id) FROM tickets WHERE id = ?",
            (int(parts[1]),)).fetchone())
        if row is None:
            return 404, {"error": "no such ticket"}
        return 200, {"ticket": int(parts[1]), "state": row[0], "sent": row[1]}
    return 404, {"error": "not found"}


REASONS = {200: b"OK", 202: b"Accepted", 400: b"Bad Request", 404: b"Not Found", 409: b"Conflict"}


async def serve(db, jobs, reader, writer):
    try:
        method, path, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
        length = 0
        while True:
            line = (await reader.readline()).decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        status, reply = await route(db, jobs, method, path, await reader.readexactly(length))
    except (ValueError, KeyError, TypeError) as exc:
        status, reply = 400, {"error": "bad request: %s" % exc}
    data = json.dumps(reply).encode()
    writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n" % (status, REASONS[status], len(data)) + data)
    await writer.drain()
    writer.close()


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default=os.path.join(HERE, "approval.db"))
    parser.add_argument("--port", type=int, default=8002, help="0: let the OS choose")
    parser.add_argument("--role", choices=("both", "web", "worker"), default="both")
    args = parser.parse_args()
    conn = tinyq.open(args.db)
    conn.executescript(SCHEMA)
    conn.close()

    jobs = tinyq.AsyncQueue(args.db, QUEUE)
    server = None
    if args.role != "worker":
        server = await asyncio.start_server(lambda r, w: serve(args.db, jobs, r, w), "127.0.0.1", args.port)
        print("listening on http://127.0.0.1:%d" % server.sockets[0].getsockname()[1], flush=True)
    else:
        print("working (pid %d)" % os.getpid(), flush=True)
    try:
        if args.role == "web":
            stopped = asyncio.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                asyncio.get_running_loop().add_signal_handler(sig, stopped.set)
            await stopped.wait()
        else:   # until SIGTERM or Ctrl-C; then the work in flight finishes and settles
            handled = await jobs.work(make_triage(args.db), concurrency=10)
            print("stopped after %d attempts" % handled, flush=True)
    finally:
        if server is not None:
            server.close()
            await server.wait_closed()
        await jobs.close()


if __name__ == "__main__":
    asyncio.run(main())
