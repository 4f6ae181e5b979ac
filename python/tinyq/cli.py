"""The tinyq command line, for operators (`tinyq ...` or `python -m tinyq ...`).

    tinyq stats DB [--queue Q] [--json]        counts per queue
    tinyq jobs DB [--queue Q] [--state S] [--group G] [--prefix P] [--after ID] [--limit N] [--json]
    tinyq get DB ID [--json]                   one job's story: fields, values, steps, timeline
    tinyq schedules DB [--json]                every schedule, with its next time and last job
    tinyq watch DB [--queue Q] [-n N | --since SEQ] [--json]   follows state changes, like tail -f
    tinyq retry DB ID                          a failed job waits again, with a fresh budget
    tinyq cancel DB ID                         removes a scheduled, waiting, blocked or running job
    tinyq signal DB NAME [PAYLOAD] [--keep D]  sends a signal: the jobs waiting for it run again
    tinyq pause DB QUEUE / resume DB QUEUE     stops / restarts claiming from a queue
    tinyq sweep DB [--limit N]                 removes rows past their retention windows
    tinyq check DB [--recount] [--json]        is the store as tinyq keeps it? (tq_check)
    tinyq dashboard DB [--port N] [--host H]   a web page on http://127.0.0.1:8321/

Exit status: 0 done; 1 the job exists but the action does not apply to it (retrying a job
that has not failed) or SQLite failed (busy...); 2 bad usage (an argument tinyq refuses, such
as an --after that is no job's id), no such file, no tinyq store in it, unknown job id or
queue, a change asked of a read-only file. `check` exits 0 for a sound store (with
--recount: once every problem is fixed), 1 when problems are left. An error is one line on stderr; ids, queues and
messages in human output show control characters as escapes (\x1b, \r, \u202e).

A read-only file is opened read-only (mode=ro); if its directory is read-only too and it has
no -wal file, as immutable (SQLite then reads the file alone, and does not see later changes).

Nothing here creates a database file or a tinyq store, or changes the database's settings
(the journal mode stays as the application set it).
"""
import argparse
import datetime
import json
import os
import sqlite3
import sys
import time

from . import views
from .views import SQLITE_READONLY, STATES, Failure, code, connect, one, refused, rows


def get_job(conn, args):
    text = one(conn, "SELECT tq_get(?)", args.id)
    if text is None:
        raise Failure("no job %r in %s" % (args.id, args.db))
    return json.loads(text)


def require_queue(conn, args, shown=10):
    if one(conn, "SELECT 1 FROM tq_stats(?)", args.queue) is None:
        names = [r[0] for r in conn.execute("SELECT queue FROM tq_stats LIMIT ?", (shown + 1,))]
        listed = ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")
        raise Failure("no queue %r in %s (queues: %s)" % (args.queue, args.db, listed or "none"))


# -- formatting ---------------------------------------------------------------------------

# What human output shows as escapes: C0 controls, DEL and C1 controls (ESC starts the
# sequences that move the cursor or retitle the terminal, CR and backspace overwrite what is
# shown), line and paragraph separators, and the bidi controls that reorder the rest of a
# line. --json output stays exact: json.dumps escapes all of them but DEL (which terminals
# ignore).
UNSAFE = [*range(0x20), *range(0x7f, 0xa0), 0x61c, 0x200e, 0x200f, *range(0x202a, 0x202f),
          *range(0x2066, 0x206a), 0x2028, 0x2029]
ESCAPES = {c: {0x9: "\\t", 0xa: "\\n", 0xd: "\\r"}.get(c, ("\\x%02x" if c < 0x100 else "\\u%04x") % c)
           for c in UNSAFE}


def printable(text, keep=""):
    """`text` with its control characters written as escapes (\\x1b, \\r, \\u202e), except
    those in `keep`: an id, a queue name or an error message is shown, never obeyed."""
    return str(text).translate({c: e for c, e in ESCAPES.items() if chr(c) not in keep} if keep else ESCAPES)


def say(*values, file=None, flush=False):
    """print, with control characters escaped."""
    print(printable(" ".join(str(v) for v in values)), file=file, flush=flush)


def when(ms, with_ms=False):
    """ms since the epoch as UTC: 2026-11-29 12:00:00Z."""
    if ms is None:
        return ""
    t = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z" if with_ms else \
        t.strftime("%Y-%m-%d %H:%M:%SZ")


def duration(ms):
    """850ms, 12.3s, 4m10s, 2h05m, 3d04h."""
    if ms is None:
        return ""
    if ms < 1000:
        return "%dms" % ms
    s = ms / 1000
    if s < 60:
        return "%.1fs" % s
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                      ("m", 60, "s", 1)):
        if s >= size:
            return "%d%s%02d%s" % (s // size, unit, (s % size) // sub_size, sub)


def oneline(value, width=None):
    text = "" if value is None else " ".join(str(value).split())
    return text if width is None or len(text) <= width else text[:width - 1] + "…"


def table(header, body):
    cells = [header] + [[printable(v) for v in row] for row in body]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        say("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def as_json(cols, body):
    for row in body:
        print(json.dumps(dict(zip(cols, row))))


# -- commands -----------------------------------------------------------------------------

def cmd_stats(conn, args):
    if args.queue:
        require_queue(conn, args)
        cols, body = rows(conn, "SELECT * FROM tq_stats(?)", args.queue)
    else:
        cols, body = rows(conn, "SELECT * FROM tq_stats")
    if args.json:
        return as_json(cols, body)
    if not body:
        say("no queues")
        return
    stats = [dict(zip(cols, r)) for r in body]
    counts = [s for s in ("scheduled", "waiting", "blocked", "running", "leases", "done", "failed") if s in cols]
    table(["queue"] + counts + ["oldest waiting", "started in window", "paused"],
          [[q["queue"]] + [q[s] for s in counts] + [
              duration(q["oldest_waiting_ms"]), "" if q["started_in_window"] is None else q["started_in_window"],
              "paused" if q["paused"] else ""] for q in stats])


def cmd_jobs(conn, args):
    if args.queue and args.state or args.prefix or args.after:
        # One page in tinyq's order for that list, continued by --after: fast at any size.
        page = views.page(conn, args.queue, args.state, args.group, args.prefix, args.after,
                          args.limit or 10**12, columns="*")
        cols = list(page["jobs"][0]) if page["jobs"] else []
        body = [tuple(j.values()) for j in page["jobs"]]
        more = page["next"] and "(more: --after %s)" % page["next"]
    else:
        where, params = [], []
        for column, value in (("queue", args.queue), ("state", args.state), ("group_key", args.group)):
            if value:
                where.append("%s = ?" % column)
                params.append(value)
        sql = "SELECT * FROM tq_jobs" + (" WHERE " + " AND ".join(where) if where else "")
        total = one(conn, sql.replace("*", "count(*)", 1), *params)
        sql += " ORDER BY created_at, id" + (" LIMIT %d" % args.limit if args.limit else "")
        cols, body = rows(conn, sql, *params)
        more = len(body) < total and "(%d of %d jobs; --limit 0 shows all)" % (len(body), total)
    if args.json:
        as_json(cols, body)
    elif body:
        c = {name: i for i, name in enumerate(cols)}
        table(["id", "queue", "state", "attempt", "run at", "worker", "error"],
              [(r[c["id"]], r[c["queue"]], r[c["state"]], r[c["attempt"]],
                when(r[c["run_at"]]), r[c["worker"]] or "", oneline(r[c["error"]], 70))
               for r in body])
    else:
        say("no jobs")
    if more:
        say(more, file=sys.stderr)


def cmd_get(conn, args):
    story = views.job_story(conn, args.id)
    if story is None:
        raise Failure("no job %r in %s" % (args.id, args.db))
    if args.json:
        print(json.dumps(story))
        return
    job = story["job"]
    if job is None:         # gone (cancelled): only its events are kept
        say("%s  %s  (gone: only its events are kept)" % (args.id, story["timeline"][-1]["state"]))
    else:
        say("%s  %s  queue %s" % (job["id"], job["state"], job["queue"]))
        print_job(job, story["steps"])
        print_workflow(job, story["deps"], story["dependents"])
    say("timeline:")
    for e in story["timeline"]:
        say(("  %s  %6d  %-9s  attempt %d  %s  %s" % (
            when(e["at"], True), e["seq"], e["state"], e["attempt"], e["worker"] or "-",
            "" if e["state"] == "running" else oneline(e["detail"], 120))).rstrip())


def print_job(job, steps):
    facts = [("group", job["group"]), ("priority", job["priority"]),
             ("attempt", "%d (%d of %d charged)" % (job["attempt"], job["tries"], job["attempts"])),
             ("ahead", job.get("ahead")), ("run at", when(job["run_at"], True)),
             ("lease until", when(job["lease_until"], True) if job["state"] == "running" else None),
             ("worker", job["worker"]), ("added", when(job["created_at"], True)),
             ("settled", when(job["settled_at"], True))]
    for name, value in facts:
        if value is not None and value != "":
            say("  %-12s %s" % (name, value))
    for name in ("payload", "meta", "result", "error", "progress"):
        if job.get(name) is not None:
            value = job[name] if isinstance(job[name], str) else json.dumps(job[name])
            say("  %-12s %s" % (name, oneline(value, 200)))
    say("steps:" if steps else "steps: none kept")
    for step in steps:
        say("  %s  attempt %d  %s  %s" % (when(step["created_at"], True), step["attempt"], step["name"],
                                           oneline(step["value"], 120)))


def print_workflow(job, deps, dependents):
    """What the job waits or waited for, the signal it waits for, and what waits for it."""
    on = job.get("blocked_on") or {}
    if on.get("signal") is not None:
        say("  %-12s the signal %s, %s" % ("waits for", on["signal"], "until %s" % when(on["until"], True)
                                             if on.get("until") is not None else "with no timeout"))
    if deps:
        say("waits for:" if job["state"] == "blocked" else "waited for:")
        for dep in deps:
            say(("  %s  %s  %s" % (dep["id"], dep["state"], oneline(dep["error"], 100))).rstrip())
    if dependents:
        say("waited for by:")
        for dependent in dependents:
            say("  %s  %s" % (dependent["id"], dependent["state"]))


def cmd_schedules(conn, args):
    found = views.schedules(conn)
    if found is None:
        raise Failure("this tinyq has no schedules (tq_schedules)", 1)
    if args.json:
        for s in found:
            print(json.dumps(s))
        return
    if not found:
        say("no schedules")
        return
    table(["name", "queue", "when", "tz", "next", "last job", "paused"],
          [(s["name"], s["queue"], s["when"], s["tz"], when(s["next_at"]), s["last_id"] or "",
            "paused" if s["paused"] else "") for s in found])


def cmd_watch(conn, args):
    if args.since is not None:
        since = args.since
    else:   # start before the last n events
        where, params = (" WHERE of_queue = ?", [args.queue]) if args.queue else ("", [])
        since = one(conn, "SELECT seq FROM tq_watch%s ORDER BY seq DESC LIMIT 1 OFFSET ?"
                    % where, *params, args.n) or 0
    cols = "seq, id, queue, state, attempt, at, detail"
    sql = "SELECT %s FROM tq_watch(?, ?)" % cols if args.queue else \
        "SELECT %s FROM tq_watch(?)" % cols
    try:
        while True:
            for event in conn.execute(sql, (since, args.queue) if args.queue else (since,)):
                seq, id, queue, state, attempt, at, detail = event
                if args.json:
                    print(json.dumps(dict(zip(cols.split(", "), event))), flush=True)
                else:
                    say(("%s  %6d  %s  %s  %-9s  attempt %d  %s" % (
                        when(at, with_ms=True), seq, queue, id, state, attempt,
                        oneline(detail))).rstrip(), flush=True)
                since = seq
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def cmd_signal(conn, args):
    options = json.dumps({"keep": args.keep}) if args.keep else None
    woken = one(conn, "SELECT tq_signal(?, ?%s)" % (", ?" if options else ""),
                args.name, args.payload, *([options] if options else []))
    say("%s: sent; %d %s waiting for it %s" % (
        args.name, woken, "job" if woken == 1 else "jobs", "runs again" if woken == 1 else "run again"))


def cmd_retry(conn, args):
    job = get_job(conn, args)
    if one(conn, "SELECT tq_retry(?)", args.id):
        say("%s: waiting again, with a fresh attempt budget" % args.id)
    else:
        raise Failure("job %r is %s, not failed: nothing to retry" % (args.id, job["state"]), 1)


def cmd_cancel(conn, args):
    job = get_job(conn, args)
    if one(conn, "SELECT tq_cancel(?)", args.id):
        say("%s: cancelled (it was %s)" % (args.id, job["state"]))
    else:
        raise Failure("job %r is %s: only scheduled, waiting, blocked or running jobs can be cancelled"
                      % (args.id, job["state"]), 1)


def set_paused(paused):
    def cmd(conn, args):
        require_queue(conn, args)
        one(conn, "SELECT tq_queue(?, ?)", args.queue, json.dumps({"paused": paused}))
        say("%s: %s" % (args.queue, "paused: its jobs are not claimed" if paused else
                          "resumed: its jobs are claimed again"))
    return cmd


def cmd_sweep(conn, args):
    n = one(conn, "SELECT tq_sweep(?)", args.limit) if args.limit else \
        one(conn, "SELECT tq_sweep()")
    say("rows removed: %d" % n)


def cmd_check(conn, args):
    if args.recount:
        problems = json.loads(one(conn, "SELECT tq_check(?)", json.dumps({"recount": True})))
    else:
        problems = json.loads(one(conn, "SELECT tq_check()"))
    if not problems and " schema none " in one(conn, "SELECT tq_debug()"):
        raise Failure("%s has no tinyq store (no tinyq_* tables); nothing was changed" % args.db)
    left = [p for p in problems if not p["fixed"]]
    if args.json:
        for p in problems:
            print(json.dumps(p))
    elif problems:
        header = ["problem", "queue", "object", "detail"] + (["fixed"] if args.recount else [])
        table(header, [[p["problem"], p["queue"] or "", p["object"], p["detail"]]
                       + (["fixed" if p["fixed"] else "no"] if args.recount else []) for p in problems])
    if not args.json:
        say("sound: no problems found" if not problems else
            "sound again: every problem fixed" if not left else
            "%d problem%s left%s" % (len(left), "" if len(left) == 1 else "s",
                                     "" if args.recount else " (--recount repairs what the rows can rebuild)"))
    return 1 if left else 0


def cmd_dashboard(conn, args):
    from .dashboard import serve
    conn.close()
    return serve(args.db, host=args.host, port=args.port)


# -- arguments ----------------------------------------------------------------------------

def count(least, most=2**63 - 1):
    """An argparse type: a whole number from `least` to `most` (what SQLite's integers hold)."""
    def parse(text):
        try:
            n = int(text)
        except ValueError:
            n = None
        if n is None or not least <= n <= most:
            raise argparse.ArgumentTypeError("%r is not a whole number from %d to %d" % (text, least, most))
        return n
    return parse


class Parser(argparse.ArgumentParser):
    """Help with control characters escaped (it quotes what was typed); a usage error is one
    line, as every error of this command."""

    def _print_message(self, message, file=None):
        super()._print_message(printable(message, keep="\n"), file)

    def error(self, message):
        self.exit(2, "tinyq: %s (%s -h shows the usage)\n" % (printable(message), self.prog))


def parser():
    p = Parser(prog="tinyq", description="Look at a tinyq store and act on "
                                "its jobs and queues.", epilog="Exit status: 0 done, 1 the "
                                "action does not apply, 2 bad usage or not found.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name, func, help):
        c = sub.add_parser(name, help=help, description=help)
        c.add_argument("db", metavar="DB", help="the SQLite database file")
        c.set_defaults(func=func)
        return c

    c = command("stats", cmd_stats, "counts per queue (tq_stats)")
    c.add_argument("--queue", help="only this queue")
    c.add_argument("--json", action="store_true", help="one JSON object per line")
    c = command("jobs", cmd_jobs, "list jobs (tq_jobs): in add order; with --queue and --state, "
                "one page in the order of that list")
    c.add_argument("--queue", help="only this queue")
    c.add_argument("--state", choices=STATES, help="only jobs in this state")
    c.add_argument("--group", help="only jobs of this group")
    c.add_argument("--prefix", help="only jobs whose id starts with this, in id order")
    c.add_argument("--after", metavar="ID", help="the next page: after this job (with --queue and "
                   "--state: in that list's order, see tq_jobs)")
    c.add_argument("--limit", type=count(0), default=100, help="at most N jobs (default 100; 0: all)")
    c.add_argument("--json", action="store_true", help="one JSON object per line, every column")
    c = command("get", cmd_get, "one job's story: its fields and values, steps and timeline")
    c.add_argument("id", metavar="ID")
    c.add_argument("--json", action="store_true", help="one JSON object: job, steps, timeline")
    c = command("schedules", cmd_schedules, "every schedule (tq_schedules), with its next time")
    c.add_argument("--json", action="store_true", help="one JSON object per line")
    c = command("watch", cmd_watch, "print state changes as they happen (Ctrl-C stops)")
    c.add_argument("--queue", help="only this queue")
    c.add_argument("--json", action="store_true", help="one JSON object per line")
    c.add_argument("-n", type=count(0), default=10, help="start with the last N events (default 10)")
    c.add_argument("--since", type=count(0), metavar="SEQ", help="start after this seq instead")
    c.add_argument("--interval", type=float, default=0.2, help=argparse.SUPPRESS)
    c = command("retry", cmd_retry, "a failed job waits again, with a fresh attempt budget")
    c.add_argument("id", metavar="ID")
    c = command("cancel", cmd_cancel, "remove a scheduled, waiting, blocked or running job")
    c.add_argument("id", metavar="ID")
    c = command("signal", cmd_signal, "send a signal (tq_signal): every job waiting for it gets the "
                "payload and runs again; a wait that begins later gets it at once while it is kept")
    c.add_argument("name", metavar="NAME", help="the signal's name, as the job waits for it (approve:ticket-1)")
    c.add_argument("payload", metavar="PAYLOAD", nargs="?", default="null",
                   help="JSON or text the jobs get (default: null)")
    c.add_argument("--keep", metavar="DURATION", help="how long it is kept for later waits (default 7d)")
    c = command("pause", set_paused(True), "stop claiming a queue's jobs")
    c.add_argument("queue", metavar="QUEUE")
    c = command("resume", set_paused(False), "claim a paused queue's jobs again")
    c.add_argument("queue", metavar="QUEUE")
    c = command("sweep", cmd_sweep, "remove rows past their retention windows (tq_sweep)")
    c.add_argument("--limit", type=count(1), help="at most N rows (1 or more)")
    c = command("check", cmd_check, "check the store's objects, counters and settings (tq_check); "
                "exit 1 on problems")
    c.add_argument("--recount", action="store_true", help="repair: rebuild the counters from the "
                   "rows, recreate missing triggers and indexes, reset settings out of range")
    c.add_argument("--json", action="store_true", help="one JSON object per problem")
    c = command("dashboard", cmd_dashboard, "serve a live dashboard on 127.0.0.1")
    c.add_argument("--port", type=int, default=8321, help="default 8321; 0 picks a free one")
    c.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        # check looks at a store readers cannot see too (an unreadable schema_version).
        conn = connect(args.db, store=args.func is not cmd_check)
        try:
            return args.func(conn, args) or 0
        finally:
            conn.close()
    except Failure as err:
        say("tinyq: %s" % err, file=sys.stderr)
        return err.status
    except (sqlite3.Error, OSError) as err:
        if isinstance(err, BrokenPipeError):      # `tinyq jobs DB | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        read_only = isinstance(err, sqlite3.Error) and code(err) == SQLITE_READONLY
        say("tinyq: %s%s" % (oneline(err), " (%s is read-only)" % args.db if read_only else ""),
            file=sys.stderr)
        return 2 if read_only or isinstance(err, sqlite3.Error) and refused(err) else 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
