"""`tinyq dashboard DB`: a live page about one store, on http://127.0.0.1:8321/.

Standard library only. The page (dashboard.html beside this file, no external scripts)
fetches /api/state every 1.5 s and draws it; its Retry buttons POST /api/retry.

    GET  /            the page
    GET  /api/state   {db, now, queues (tq_stats rows), running, failed, chart}
    POST /api/retry   {"id": ID} -> {"retried": true or false}     (tq_retry)
"""
import http.server
import json
import os
import sqlite3
import threading

from .cli import connect, one, rows

WINDOW_MS = 10 * 60 * 1000      # the chart shows the last 10 minutes,
BUCKET_MS = 10 * 1000           # in bars of 10 seconds
LIST_LIMIT = 50                 # running and failed jobs shown

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard.html"),
          "rb") as _f:
    PAGE = _f.read()


class Store:
    """The dashboard's connection, shared by the server's threads under a lock, and the
    chart's counts per bar, kept up to date from tq_watch."""

    def __init__(self, path):
        self.name = os.path.basename(path)
        self.conn = connect(path, check_same_thread=False)
        self.lock = threading.Lock()
        self.bars = {}          # bar start (ms) -> {"done": n, "failed": n}
        now = one(self.conn, "SELECT tq_now()")
        # Where the window's events begin (tinyq_events.seq is tq_watch's seq). `at` has no
        # index: this reads the events once, at start; later reads follow tq_watch.
        first = one(self.conn, "SELECT min(seq) FROM tinyq_events WHERE at >= ?", now - WINDOW_MS)
        self.seq = first - 1 if first else one(self.conn, "SELECT max(seq) FROM tinyq_events") or 0

    def _jobs(self, sql):
        cols, body = rows(self.conn, sql, LIST_LIMIT)
        return [dict(zip(cols, row)) for row in body]

    def state(self):
        with self.lock:
            now = one(self.conn, "SELECT tq_now()")
            for seq, state, at in self.conn.execute(
                    "SELECT seq, state, at FROM tq_watch(?)", (self.seq,)):
                self.seq = seq
                if state in ("done", "failed"):
                    self.bars.setdefault(at - at % BUCKET_MS, {"done": 0, "failed": 0})[state] += 1
            starts = range(now - now % BUCKET_MS - WINDOW_MS + BUCKET_MS, now + 1, BUCKET_MS)
            self.bars = {b: n for b, n in self.bars.items() if b >= starts[0]}
            cols, body = rows(self.conn, "SELECT * FROM tq_stats")
            return {
                "db": self.name,
                "now": now,
                "queues": [dict(zip(cols, row)) for row in body],
                "running": self._jobs(
                    "SELECT id, queue, worker, attempt, lease_until, progress FROM tq_jobs "
                    "WHERE state = 'running' ORDER BY lease_until LIMIT ?"),
                "failed": self._jobs(
                    "SELECT id, queue, attempt, settled_at, error FROM tq_jobs "
                    "WHERE state = 'failed' ORDER BY settled_at DESC LIMIT ?"),
                "chart": {"start": starts[0], "bucket_ms": BUCKET_MS,
                          "done": [self.bars.get(b, {}).get("done", 0) for b in starts],
                          "failed": [self.bars.get(b, {}).get("failed", 0) for b in starts]},
            }

    def retry(self, job_id):
        with self.lock:
            return bool(one(self.conn, "SELECT tq_retry(?)", job_id))


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "tinyq-dashboard"

    def do_GET(self):
        if not self._allowed():
            return
        if self.path == "/":
            self._send(200, PAGE, "text/html; charset=utf-8")
        elif self.path == "/api/state":
            self._answer(self.server.store.state)
        else:
            self._send_json(404, {"error": "not found"})

    def do_POST(self):
        if not self._allowed():
            return
        if self.path != "/api/retry":
            return self._send_json(404, {"error": "not found"})
        if self.headers.get_content_type() != "application/json":
            return self._send_json(415, {"error": "send JSON: {\"id\": ...}"})
        try:
            job_id = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))["id"]
            assert isinstance(job_id, str)
        except (ValueError, KeyError, TypeError, AssertionError):
            return self._send_json(400, {"error": "send JSON: {\"id\": ...}"})
        self._answer(lambda: {"retried": self.server.store.retry(job_id)})

    def _allowed(self):
        """Only requests addressed to this server by name (against DNS rebinding) and, when
        a browser says where they come from, coming from its own page. A cross-site page
        can send JSON here only after a CORS preflight, which this server never grants."""
        host, origin = self.headers.get("Host", ""), self.headers.get("Origin")
        if host in self.server.hosts and origin in (None, "http://" + host):
            return True
        self._send_json(403, {"error": "forbidden"})
        return False

    def _answer(self, compute):
        try:
            self._send_json(200, compute())
        except sqlite3.Error as err:        # busy, most likely: the page tries again
            self._send_json(503, {"error": str(err)})

    def _send_json(self, status, value):
        self._send(status, json.dumps(value).encode(), "application/json")

    def _send(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):       # quiet: the terminal shows the URL only
        pass


def serve(path, host="127.0.0.1", port=8321):
    """Serve the dashboard of the store in `path` until Ctrl-C."""
    store = Store(path)
    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.store = store
    port = server.server_address[1]
    server.hosts = {"%s:%d" % (h, port) for h in ("127.0.0.1", "localhost", "[::1]", host)}
    print("tinyq dashboard for %s: http://%s:%d/ (Ctrl-C stops)" % (path, host, port),
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        store.conn.close()
    return 0
