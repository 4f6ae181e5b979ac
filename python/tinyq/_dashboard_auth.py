"""Who may use the dashboard: its sign-in, sessions, CSRF tokens and read-only mode.

Credentials come from the environment or a file, never from the command line (where `ps`
shows them): TINYQ_DASHBOARD_TOKEN (a token), TINYQ_DASHBOARD_PASSWORD (user:password), or
--credentials-file (one credential a line, a token or user:password; # starts a comment).
With any credential, every request must be signed in: the page's sign-in form sets a
session cookie (random id from `secrets`, HttpOnly, SameSite=Strict, 12 hours), and a
scraper or a script reads (GET only) with HTTP basic auth (user:password, or any user name
and a token as the password) or `Authorization: Bearer TOKEN`. Actions need a session and
its CSRF token in the X-CSRF-Token header. Every check compares digests with
hmac.compare_digest, against every credential, so its time says nothing about the secret.
"""
import base64
import binascii
import hashlib
import hmac
import html
import ipaddress
import json
import secrets
import threading
import time
import urllib.parse

TOKEN_ENV, PASSWORD_ENV = "TINYQ_DASHBOARD_TOKEN", "TINYQ_DASHBOARD_PASSWORD"
MIN_TOKEN, MIN_PASSWORD = 16, 8     # characters: a short secret is guessed over the network
SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 1000                 # the oldest session ends beyond this
MAX_FORM = 4096                     # bytes of a sign-in form


def loopback(host):
    """Is `host` this machine only (127.0.0.0/8, ::1, localhost)?"""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def digest(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def matches(candidate, digests):
    """Compared with every one (no early exit), each in constant time."""
    found = False
    for d in digests:
        found |= hmac.compare_digest(digest(candidate), d)
    return found


class Access:
    """The credentials, the live sessions ({id: (csrf token, end)}) and the read-only flag."""

    def __init__(self, credentials=(), read_only=False, cookie="tinyq_session"):
        self.tokens, self.users = [], []
        for text in credentials:
            user, colon, password = text.partition(":")
            if colon:
                if not user or len(password) < MIN_PASSWORD:
                    raise ValueError("a user:password needs a user name and a password of at "
                                     "least %d characters" % MIN_PASSWORD)
                self.users.append(digest(user + ":" + password))
            elif len(text) < MIN_TOKEN:
                raise ValueError("a token must have at least %d characters" % MIN_TOKEN)
            else:
                self.tokens.append(digest(text))
        self.required = bool(self.tokens or self.users)
        self.read_only, self.cookie = read_only, cookie
        self.sessions, self.lock = {}, threading.Lock()

    def check(self, user, password):
        """A user:password, or a token (as the password, whatever the user name)."""
        by_user = ":" not in user and matches(user + ":" + password, self.users)
        return matches(password, self.tokens) | by_user

    def sign_in(self, user, password):
        """A new session's cookie value, or None for a wrong credential."""
        if not self.check(user, password):
            return None
        sid = secrets.token_urlsafe(32)
        with self.lock:
            while len(self.sessions) >= MAX_SESSIONS:
                del self.sessions[next(iter(self.sessions))]
            self.sessions[sid] = (secrets.token_urlsafe(32), time.monotonic() + SESSION_SECONDS)
        return sid

    def session(self, headers):
        """(id, csrf token) of the request's live session, or None."""
        for part in headers.get("Cookie", "").split(";"):
            name, _, sid = part.strip().partition("=")
            if name != self.cookie:
                continue
            with self.lock:
                found = self.sessions.get(sid)
                if found and found[1] < time.monotonic():
                    del self.sessions[sid]
                    found = None
            if found:
                return sid, found[0]
        return None

    def sign_out(self, sid):
        with self.lock:
            self.sessions.pop(sid, None)

    def authorization(self, headers):
        """Is the request's Authorization header (Basic or Bearer) a credential?"""
        kind, _, value = headers.get("Authorization", "").strip().partition(" ")
        if kind.lower() == "bearer":
            return matches(value.strip(), self.tokens)
        if kind.lower() != "basic":
            return False
        try:
            user, colon, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return bool(colon) and self.check(user, password)

    @staticmethod
    def csrf_ok(session, sent):
        return sent is not None and hmac.compare_digest(digest(sent), digest(session[1]))

    def set_cookie(self, sid):
        return ("%s=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%d"
                % (self.cookie, sid or "", SESSION_SECONDS if sid else 0))


def load(environ, path=None):
    """The credentials of the environment and the file, in that order."""
    found = [environ[name] for name in (TOKEN_ENV, PASSWORD_ENV) if environ.get(name)]
    if path:
        with open(path, encoding="utf-8") as f:
            found += [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    return found


SIGN_IN = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tinyq dashboard: sign in</title>
<style>body { font: 14px/1.4 system-ui, sans-serif; margin: 3em auto; max-width: 22em; }
label { display: block; margin: .6em 0; } input { width: 100%; } .error { color: #b00020; }</style>
</head><body><h1>tinyq dashboard</h1>
<p class="error" id="error">MESSAGE</p>
<form method="post" action="/login">
<label>User (none for a token) <input id="user" name="user" autocomplete="username"></label>
<label>Password or token <input id="password" name="password" type="password"
  autocomplete="current-password" required></label>
<button id="sign-in">Sign in</button>
</form></body></html>
"""


def sign_in_page(message=""):
    return SIGN_IN.replace(b"MESSAGE", message.encode())


# -- the handler's side (dashboard.Handler) -----------------------------------------------

def admit_get(handler, path):
    """May this GET go on? If not, it is answered: a browser asking for the page is sent to
    sign in; the API says 401 (/metrics asks for basic auth, as scrapers expect)."""
    access = handler.server.access
    if not access.required or access.session(handler.headers) or access.authorization(handler.headers):
        return True
    if path == "/" or path.startswith("/job/"):
        handler._send(303, b"", "text/plain", [("Location", "/login")])
    else:
        ask = [("WWW-Authenticate", 'Basic realm="tinyq dashboard", charset="UTF-8"')] if path == "/metrics" else []
        handler._send_json(401, {"error": "sign in first"}, ask)
    return False


def admit_post(handler):
    """May this action go on? Signed in (a session: basic auth acts on nothing), not
    read-only, and the session's CSRF token sent along; if not, it is answered 401 or 403."""
    access = handler.server.access
    session = access.session(handler.headers) if access.required else None
    if access.required and session is None:
        handler._send_json(401, {"error": "sign in first"})
    elif access.read_only:
        handler._send_json(403, {"error": "this dashboard is read-only"})
    elif access.required and not access.csrf_ok(session, handler.headers.get("X-CSRF-Token")):
        handler._send_json(403, {"error": "missing or wrong X-CSRF-Token"})
    else:
        return True
    return False


def page(handler, page):
    """The page, told its session's CSRF token and whether it may act."""
    access = handler.server.access
    session = access.session(handler.headers) if access.required else None
    value = {"csrf": session and session[1], "readOnly": access.read_only, "signedIn": bool(session)}
    return page.replace(b'<meta name="tinyq-session" content="{}">', b'<meta name="tinyq-session" content="%s">'
                        % html.escape(json.dumps(value)).encode())


def sign_in(handler):
    """POST /login (the sign-in form): a session cookie and back to the page, or the form
    again with 401."""
    access, headers = handler.server.access, handler.headers
    if not access.required:
        return handler._send(303, b"", "text/plain", [("Location", "/")])
    if headers.get_content_type() != "application/x-www-form-urlencoded":
        return handler._send_json(415, {"error": "send the sign-in form"})
    length = headers.get("Content-Length") or "0"
    if not (length.isascii() and length.isdigit() and int(length) <= MAX_FORM):
        handler.close_connection = True
        return handler._send_json(413, {"error": "a sign-in form is at most %d bytes" % MAX_FORM})
    form = urllib.parse.parse_qs(handler.rfile.read(int(length)).decode("utf-8", "replace"))
    sid = access.sign_in(form.get("user", [""])[0], form.get("password", [""])[0])
    if sid is None:
        return handler._send(401, sign_in_page("Wrong user, password or token."), "text/html; charset=utf-8")
    handler._send(303, b"", "text/plain", [("Location", "/"), ("Set-Cookie", access.set_cookie(sid))])


def sign_out(handler):
    """POST /logout, with the session's CSRF token: the session ends."""
    access = handler.server.access
    session = access.session(handler.headers) if access.required else None
    if session is None or not access.csrf_ok(session, handler.headers.get("X-CSRF-Token")):
        return handler._send_json(403, {"error": "not signed in, or a missing or wrong X-CSRF-Token"})
    access.sign_out(session[0])
    handler._send_json(200, {"signed_out": True}, [("Set-Cookie", access.set_cookie(None))])
