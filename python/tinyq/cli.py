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
    tinyq dashboard DB [--port N] [--host H] [--credentials-file F] [--server-name NAME] [--read-only]
                                               a web page on http://127.0.0.1:8321/; anywhere but
                                               loopback only with a sign-in (TINYQ_DASHBOARD_TOKEN,
                                               TINYQ_DASHBOARD_PASSWORD=user:password or the file)

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

Here the arguments and main(); the commands are _cli_commands.py's, the output's format
_cli_format.py's.
"""
import argparse
import os
import sys

from ._cli_commands import (cmd_cancel, cmd_check, cmd_dashboard, cmd_get, cmd_jobs, cmd_retry, cmd_schedules,
                            cmd_signal, cmd_stats, cmd_sweep, cmd_watch, set_paused)
from ._cli_format import oneline, printable, say
from .views import SQLITE_READONLY, STATES, Failure, code, connect, refused, sqlite3


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
    c.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only); any other "
                   "only with a sign-in: TINYQ_DASHBOARD_TOKEN (a token), TINYQ_DASHBOARD_PASSWORD "
                   "(user:password) or --credentials-file")
    c.add_argument("--credentials-file", metavar="FILE", help="sign-in credentials, one a line: a token "
                   "or user:password (never on the command line, where ps shows them)")
    c.add_argument("--server-name", metavar="NAME", action="append", default=[],
                   help="another Host it answers to (the machine's name or a proxy's), NAME or NAME:PORT")
    c.add_argument("--read-only", action="store_true", help="every page, no action (they answer 403)")
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
