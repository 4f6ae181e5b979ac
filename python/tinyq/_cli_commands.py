"""The command line's commands: cmd_stats, cmd_jobs, cmd_get ... one per `tinyq` command.

Each takes the connection and the parsed arguments, prints its answer (_cli_format.py) and
raises views.Failure for what it refuses; cli.py parses the arguments and calls it."""
import json
import os
import sys
import time

from . import views
from ._cli_format import Columns, as_json, duration, oneline, say, table, when
from .views import Failure, one, rows


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
    columns = Columns(right=(1,))   # seq; the rest left, the detail last, unpadded
    try:
        while True:
            events = conn.execute(sql, (since, args.queue) if args.queue else (since,)).fetchall()
            if args.json:
                for event in events:
                    print(json.dumps(dict(zip(cols.split(", "), event))), flush=True)
            else:
                for line in columns.lines([when(at, with_ms=True), seq, queue, id, state, "attempt %d" % attempt,
                                           oneline(detail)]
                                          for seq, id, queue, state, attempt, at, detail in events):
                    print(line, flush=True)
            if events:
                since = events[-1][0]
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
    from ._dashboard_auth import load
    from .dashboard import serve
    conn.close()
    try:
        credentials = load(os.environ, args.credentials_file)
    except (OSError, ValueError) as err:
        raise Failure("dashboard: --credentials-file: %s; nothing was started" % err)
    try:
        return serve(args.db, host=args.host, port=args.port, credentials=credentials,
                     read_only=args.read_only, names=args.server_name)
    except ValueError as err:       # no sign-in where one is needed, a credential too short
        raise Failure("dashboard: %s; nothing was started" % err)
