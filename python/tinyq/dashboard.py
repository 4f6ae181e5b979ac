"""`tinyq dashboard DB`: a live page about one store, on http://127.0.0.1:8321/.

Standard library only. The page (dashboard.html beside this file, no external scripts)
draws the queues, a chart, the jobs of each list and one job's page; every action goes
through tinyq's own functions (tq_cancel, tq_retry, tq_queue).

    GET  /  and  /job/<id>     the page (the job's page is the same page, routed by path)
    GET  /api/state            {db, now, queues (tq_stats + settings), running, failed, chart, schedules}
    GET  /api/jobs?queue=Q&state=S[&group=G][&prefix=P][&after=ID][&limit=N]   {jobs, next}
    GET  /api/job/<id>[?since=SEQ]   {job (tq_get; null when gone but its events are kept: cancelled),
                                      steps (tq_steps), timeline (its events after SEQ),
                                      deps (tq_deps), dependents (the jobs waiting for it)}
    GET  /metrics              Prometheus text format
    POST /api/cancel  {"id": ID}                       -> {"cancelled": true or false}
    POST /api/retry   {"id": ID} or {"queue": Q}       -> {"retried": true or false} or {"retried": n}
    POST /api/pause   {"queue": Q, "paused": bool}     -> {"settings": ...}
    POST /api/limits  {"queue": Q, "settings": {...}}  -> {"settings": ...}  (limits only)
    POST /api/schedule {"name": N, "paused": bool}     -> {"schedule": ...}

    GET  /login, POST /login, POST /logout    sign-in form, sign-in, sign-out (_dashboard_auth.py)

Every request must name this server as its Host, and a browser's must come from its own
page (Origin); POSTs take JSON only (an object of at most 1 MB). It listens on 127.0.0.1
unless told otherwise; anywhere else only with a sign-in, and then every request must be
signed in (401) and every action carry its session's CSRF token (403). Read-only: no
action (403). Errors are {"error": message}: 400 for a bad request (an argument
tinyq refuses, such as an empty or too long id), 404 for no such job, queue or schedule,
413 for a body too large, 503 when the store is busy (try again), 500 for any other SQLite
error. A client that leaves a request unfinished for 10 s is disconnected.
"""
import contextlib
import http.server
import json
import os
import threading
import urllib.parse

from . import _dashboard_auth as auth
from . import views
from ._dashboard_metrics import metrics_text
from .views import connect, one, sqlite3

WINDOW_MS = 10 * 60 * 1000      # the chart shows the last 10 minutes,
BUCKET_MS = 10 * 1000           # in bars of 10 seconds
LIST_LIMIT = 10                 # running and failed jobs on the front page
PAGE_LIMIT = 50                 # jobs per page of a list (at most 500)
LIMITS = ("concurrency", "rate", "group_concurrency", "group_rate", "attempts", "lease", "timeout")
RETRY_BATCH = 500               # failed jobs retried per transaction by "retry all"
MAX_BODY = 1 << 20              # bytes of a POST's JSON (413 beyond)
SOCKET_TIMEOUT = 10             # seconds a client may leave a request unfinished
MAX_SEQ = 2**63 - 1

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard.html"),
          "rb") as _f:
    PAGE = _f.read()


class BadRequest(Exception):
    """A request this server refuses: 400 (or the status given) with the message."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


class Store:
    """The dashboard's connection, shared by the server's threads under a lock; the chart's
    counts per bar and the starts/failures counters, kept up to date from tq_watch."""

    def __init__(self, path):
        self.name = os.path.basename(path)
        self.conn = connect(path, check_same_thread=False)
        self.lock = threading.Lock()
        self.bars = {}          # bar start (ms) -> {"done": n, "failed": n}
        self.starts, self.failures = {}, {}     # queue -> events seen since the window began
        now = one(self.conn, "SELECT tq_now()")
        # Where the window's events begin. `at` has no index: one pass over the log, at start;
        # later reads follow tq_watch from there.
        last, first = self.conn.execute(
            "SELECT max(seq), min(CASE WHEN at >= ? THEN seq END) FROM tq_watch", (now - WINDOW_MS,)).fetchone()
        self.seq = first - 1 if first else last or 0

    def _follow(self):
        for seq, queue, state, at in self.conn.execute(
                "SELECT seq, queue, state, at FROM tq_watch(?)", (self.seq,)):
            self.seq = seq
            if state == "running":
                self.starts[queue] = self.starts.get(queue, 0) + 1
            elif state == "failed":
                self.failures[queue] = self.failures.get(queue, 0) + 1
            if state in ("done", "failed"):
                self.bars.setdefault(at - at % BUCKET_MS, {"done": 0, "failed": 0})[state] += 1

    def _queues(self):
        queues = views.dicts(self.conn, "SELECT * FROM tq_stats")
        for q in queues:
            q["settings"] = json.loads(one(self.conn, "SELECT tq_queue(?)", q["queue"]))
        return queues

    def _require_queue(self, queue):
        if not isinstance(queue, str) or one(self.conn, "SELECT 1 FROM tq_stats(?)", queue) is None:
            raise BadRequest("no queue %r" % (queue,), 404)

    def state(self):
        with self.lock:
            now = one(self.conn, "SELECT tq_now()")
            self._follow()
            starts = range(now - now % BUCKET_MS - WINDOW_MS + BUCKET_MS, now + 1, BUCKET_MS)
            self.bars = {b: n for b, n in self.bars.items() if b >= starts[0]}
            queues = self._queues()
            lists = {state: [] for state in ("running", "failed")}
            for q in queues:
                for state in lists:
                    if q[state]:
                        lists[state] += views.page(self.conn, q["queue"], state, limit=LIST_LIMIT)["jobs"]
            lists["running"].sort(key=lambda j: j["lease_until"] or 0)
            lists["failed"].sort(key=lambda j: -(j["settled_at"] or 0))
            return {
                "db": self.name,
                "now": now,
                "queues": queues,
                "running": lists["running"][:LIST_LIMIT],
                "failed": lists["failed"][:LIST_LIMIT],
                "schedules": views.schedules(self.conn),
                "chart": {"start": starts[0], "bucket_ms": BUCKET_MS,
                          "done": [self.bars.get(b, {}).get("done", 0) for b in starts],
                          "failed": [self.bars.get(b, {}).get("failed", 0) for b in starts]},
            }

    def jobs(self, query):
        def arg(name):
            values = query.get(name)
            return values[0] if values and values[0] != "" else None
        try:
            limit = min(max(int(arg("limit") or PAGE_LIMIT), 1), 500)
        except ValueError:
            raise BadRequest("limit must be a number")
        state = arg("state")
        if state is not None and state not in views.STATES:
            raise BadRequest("state must be one of %s" % ", ".join(views.STATES))
        with self.lock:
            page = views.page(self.conn, arg("queue"), state, arg("group"), arg("prefix"), arg("after"), limit)
            return dict(page, now=one(self.conn, "SELECT tq_now()"))

    def job(self, job_id, since="0"):
        """The job's story; its page asks for the events after the last one it has, so that
        only the first look reads the whole event log."""
        if not (since.isascii() and since.isdigit() and int(since) <= MAX_SEQ):
            raise BadRequest("since must be a seq (0 to %d), not %r" % (MAX_SEQ, since))
        with self.lock:
            story = views.job_story(self.conn, job_id, int(since))
            if story is None:
                raise BadRequest("no job %r" % job_id, 404)
            return dict(story, now=one(self.conn, "SELECT tq_now()"))

    def cancel(self, body):
        job_id = field(body, "id", str)
        with self.lock:
            return {"cancelled": bool(one(self.conn, "SELECT tq_cancel(?)", job_id))}

    def retry(self, body):
        if "queue" in body:
            return {"retried": self.retry_queue(field(body, "queue", str))}
        job_id = field(body, "id", str)
        with self.lock:
            return {"retried": bool(one(self.conn, "SELECT tq_retry(?)", job_id))}

    def retry_queue(self, queue):
        """Every failed job of the queue waits again, a batch per transaction (so the lock
        is never held for long); the failed list shrinks as it goes, so no cursor is needed."""
        retried = 0
        while True:
            with self.lock:
                self._require_queue(queue)
                ids = [j["id"] for j in views.page(self.conn, queue, "failed", limit=RETRY_BATCH)["jobs"]]
                if not ids:
                    return retried
                with self._transaction():
                    done = sum(one(self.conn, "SELECT tq_retry(?)", i) for i in ids)
            retried += done
            if not done:
                return retried

    @contextlib.contextmanager
    def _transaction(self):
        """A write transaction: what is read in it is what is written back."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def set_queue(self, queue, settings):
        with self.lock:
            self._require_queue(queue)
            return {"settings": json.loads(one(self.conn, "SELECT tq_queue(?, ?)", queue, json.dumps(settings)))}

    def pause(self, body):
        return self.set_queue(field(body, "queue", str), {"paused": field(body, "paused", bool)})

    def limits(self, body):
        settings = field(body, "settings", dict)
        unknown = sorted(set(settings) - set(LIMITS))
        if unknown:
            raise BadRequest("not a limit: %s (limits: %s)" % (", ".join(unknown), ", ".join(LIMITS)))
        return self.set_queue(field(body, "queue", str), settings)

    def schedule(self, body):
        """Pauses or resumes a schedule: tq_schedule again with its own definition and
        `paused` changed, in one transaction. The payload goes from the table straight back
        into tq_schedule, as the SQL value stored, and the stored meta text is put into the
        options as it is: tq_schedule_get's JSON is a view, and a view written back changes
        them ('"hello"' would become hello, 42 '42', big numbers would round). A resumed
        schedule waits for its next time."""
        name, paused = field(body, "name", str), field(body, "paused", bool)
        with self.lock, self._transaction():
            row = self.conn.execute(
                "SELECT tz, priority, grp, budget, missed, meta FROM main.tinyq_schedules WHERE name = ?",
                (name,)).fetchone()
            if row is None:
                raise BadRequest("no schedule %r" % name, 404)
            tz, priority, group, attempts, missed, meta = row
            options = {k: v for k, v in (("tz", tz), ("priority", priority), ("group", group),
                                         ("attempts", attempts), ("missed", missed)) if v is not None}
            options = json.dumps(dict(options, paused=paused))
            if meta is not None:
                options = options[:-1] + ', "meta": ' + meta + "}"
            return {"schedule": json.loads(one(
                self.conn, "SELECT tq_schedule(name, queue, expr, payload, ?) FROM main.tinyq_schedules "
                "WHERE name = ?", options, name))}

    def metrics(self):
        with self.lock:
            self._follow()
            return metrics_text(self.conn, views.dicts(self.conn, "SELECT * FROM tq_stats"),
                                self.starts, self.failures, views.schedules(self.conn),
                                one(self.conn, "SELECT tq_now()"))


def field(body, name, kind):
    value = body.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest("send JSON with %r (%s)" % (name, kind.__name__))
    return value


def sql_status(err):
    """503 when the store is busy (the page tries again); 400 for an argument tinyq refuses
    ("tq_get: id must not be empty"); else 500."""
    return 503 if views.busy(err) else 400 if views.refused(err) else 500


POSTS = {"/api/cancel": Store.cancel, "/api/retry": Store.retry, "/api/pause": Store.pause,
         "/api/limits": Store.limits, "/api/schedule": Store.schedule}


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "tinyq-dashboard"
    timeout = SOCKET_TIMEOUT        # a client that stops mid-request frees its thread

    def do_GET(self):
        if not self._allowed():
            return
        url = urllib.parse.urlsplit(self.path)
        path, store = url.path, self.server.store
        if path == "/login":
            return self._send(200, auth.sign_in_page(), "text/html; charset=utf-8")
        if not auth.admit_get(self, path):
            return
        if path == "/" or path.startswith("/job/"):
            self._send(200, auth.page(self, PAGE), "text/html; charset=utf-8")
        elif path == "/api/state":
            self._answer(store.state)
        elif path == "/api/jobs":
            self._answer(lambda: store.jobs(urllib.parse.parse_qs(url.query)))
        elif path.startswith("/api/job/"):
            job_id = urllib.parse.unquote(path[len("/api/job/"):])
            since = urllib.parse.parse_qs(url.query).get("since", ["0"])[0]
            self._answer(lambda: store.job(job_id, since))
        elif path == "/metrics":
            self._answer(store.metrics, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send_json(404, {"error": "not found"})

    def do_POST(self):
        if not self._allowed():
            return
        if self.path in ("/login", "/logout"):
            return (auth.sign_in if self.path == "/login" else auth.sign_out)(self)
        action = POSTS.get(self.path)
        if action is None:
            return self._send_json(404, {"error": "not found"})
        if not auth.admit_post(self):
            return
        if self.headers.get_content_type() != "application/json":
            return self._send_json(415, {"error": "send JSON"})
        self._answer(lambda: action(self.server.store, self._body()))

    def _body(self):
        """The request's JSON object, read within its Content-Length."""
        length = self.headers.get("Content-Length") or "0"
        if not (length.isascii() and length.isdigit()):
            raise BadRequest("Content-Length must be a number of bytes, not %r" % length)
        if int(length) > MAX_BODY:
            self.close_connection = True        # the body is not read
            raise BadRequest("a request body is at most %d bytes" % MAX_BODY, 413)
        try:
            body = json.loads(self.rfile.read(int(length)))
            # Text SQLite can take: no lone surrogate ("\ud800").
            json.dumps(body, ensure_ascii=False).encode()
        except (ValueError, RecursionError):     # not JSON, not UTF-8, nested too deep
            body = None
        if not isinstance(body, dict):
            raise BadRequest("send a JSON object")
        return body

    def _allowed(self):
        """Only requests addressed to this server by name (against DNS rebinding) and, when
        a browser says where they come from, coming from its own page. A cross-site page
        can send JSON here only after a CORS preflight, which this server never grants."""
        host, origin = self.headers.get("Host", ""), self.headers.get("Origin")
        if host in self.server.hosts and origin in (None, "http://" + host, "https://" + host):
            return True
        self._send_json(403, {"error": "forbidden"})
        return False

    def _answer(self, compute, content_type=None):
        try:
            value = compute()
        except BadRequest as err:
            return self._send_json(err.status, {"error": str(err)})
        except sqlite3.Error as err:
            return self._send_json(sql_status(err), {"error": str(err)})
        if content_type:
            self._send(200, value.encode(), content_type)
        else:
            self._send_json(200, value)

    def _send_json(self, status, value, headers=()):
        self._send(status, json.dumps(value).encode(), "application/json", headers)

    def _send(self, status, body, content_type, headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        # never inside another site's frame, where a click could be made to act
        self.send_header("Content-Security-Policy", "frame-ancestors 'none'")
        self.send_header("X-Frame-Options", "DENY")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):       # quiet: the terminal shows the URL only
        pass


def serve(path, host="127.0.0.1", port=8321, credentials=(), read_only=False, names=()):
    """Serve the dashboard of the store in `path` until Ctrl-C. `credentials` (tokens,
    user:password) are required anywhere but on loopback; `names` are the other Host
    names it answers to (a proxy's, the machine's)."""
    access = auth.Access(credentials, read_only)      # ValueError: a credential too short
    if not (access.required or auth.loopback(host)):
        raise ValueError("--host %s is reachable from other machines: give it a sign-in (%s=token, %s=user:password "
                         "or --credentials-file FILE)" % (host, auth.TOKEN_ENV, auth.PASSWORD_ENV))
    store = Store(path)
    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.store, server.access = store, access
    port = server.server_address[1]
    access.cookie = "tinyq_session_%d" % port       # cookies ignore ports: one per dashboard
    server.hosts = {"%s:%d" % (h, port) for h in ("127.0.0.1", "localhost", "[::1]", host, *names)}
    server.hosts |= set(names)
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
