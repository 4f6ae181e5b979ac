#!/usr/bin/env python3
"""A slow model call moved off the request: the web side answers 202 at once, a worker
process does the slow part, and the client polls for the result.

Run the two halves in two terminals, from the repository root:

    /usr/bin/python3 examples/web_slow_model.py            # the HTTP service, port 8000
    /usr/bin/python3 examples/web_slow_model.py --worker   # the worker (SIGTERM/Ctrl-C stops it
                                                           # once the job in flight is done)

and ask for a summary, twice with the same key (the second POST returns the same job):

    curl -i -X POST -H 'Idempotency-Key: doc-7' -d '{"text": "A long text ..."}' \\
         localhost:8000/summaries
    curl localhost:8000/summaries/summary:doc-7     # waiting -> running -> done

Both halves share one SQLite file (--db, default examples/web.db): the job is a row in it.
"""
import argparse
import json
import os
import signal
import sqlite3
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import tinyq  # noqa: E402

QUEUE = "summaries"
MODEL_SECONDS = 1.0           # the deliberately slow fake model


# -- the web side: add a job, answer 202; report a job's state ---------------------------

class Handler(BaseHTTPRequestHandler):
    db = None                 # set in serve()

    def do_POST(self):
        if self.path != "/summaries":
            return self.reply(404, {"error": "not found"})
        length = int(self.headers.get("Content-Length") or 0)
        try:
            text = json.loads(self.rfile.read(length) or b"{}")["text"]
        except (ValueError, KeyError, TypeError):
            return self.reply(400, {"error": 'send a JSON body like {"text": "..."}'})
        key = self.headers.get("Idempotency-Key")
        # The key becomes the job's id: a repeated POST (a double click, a proxy retry)
        # finds the job present, adds nothing and gets the same id back.
        job_id = "summary:" + key if key else None
        with tinyq.Queue(self.db, QUEUE) as summaries:   # a connection per request
            try:
                job_id = summaries.add({"text": text}, id=job_id)
            except sqlite3.Error as exc:                     # a key tinyq refuses (too long, ...)
                return self.reply(400, {"error": str(exc)})
            job = summaries.get(job_id)
        self.reply(202, {"job": job_id, "state": job["state"]},
                   Location="/summaries/" + job_id)

    def do_GET(self):
        if not self.path.startswith("/summaries/"):
            return self.reply(404, {"error": "not found"})
        job_id = unquote(self.path[len("/summaries/"):])
        with tinyq.Queue(self.db, QUEUE) as summaries:
            job = summaries.get(job_id)
        if job is None or job["queue"] != QUEUE:
            return self.reply(404, {"error": "no such job"})
        self.reply(200, {"job": job_id, "state": job["state"], "attempt": job["attempt"],
                         "result": job["result"], "error": job["error"]})

    def reply(self, status, body, **headers):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        print("web:    " + fmt % args, flush=True)


def serve(db, port):
    Handler.db = db
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    # SIGTERM stops the server loop (from another thread: shutdown() waits for the loop).
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print("web:    listening on http://127.0.0.1:%d" % server.server_port, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.server_close()
    print("web:    stopped", flush=True)


# -- the worker side: the slow part, in another process ---------------------------------

def slow_model(text):
    """A stand-in for a model call that takes its time."""
    time.sleep(MODEL_SECONDS)
    words = text.split()
    return " ".join(words[:8]) + (" ..." if len(words) > 8 else "")


def summarize(payload, run):
    print("worker: %s attempt %d: asking the model" % (run.id, run.attempt), flush=True)
    # A step keeps the paid-for answer: if this process dies after it, the next attempt
    # gets the answer back instead of calling the model again.
    summary = run.step("summary", lambda: slow_model(payload["text"]))
    print("worker: %s done" % run.id, flush=True)
    return {"summary": summary}


def work(db):
    summaries = tinyq.Queue(db, QUEUE)
    print("worker: waiting for jobs (pid %d)" % os.getpid(), flush=True)
    # Until SIGTERM or Ctrl-C; then it claims nothing more and returns once the jobs in
    # flight are done and settled.
    handled = summaries.work(summarize, concurrency=2, poll=0.5)
    print("worker: stopped after %d job(s)" % handled, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default=os.path.join(HERE, "web.db"))
    parser.add_argument("--port", type=int, default=8000, help="0: let the OS choose")
    parser.add_argument("--worker", action="store_true", help="run the worker instead")
    args = parser.parse_args()
    if args.worker:
        work(args.db)
    else:
        serve(args.db, args.port)
