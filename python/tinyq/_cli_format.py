"""The command line's output: control characters escaped, times, durations, tables, JSON lines.

Human output shows ids, queues and messages with their control characters as escapes
(printable, say); --json output stays exact."""
import datetime
import json

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


class Columns:
    """Lines of a stream (tinyq watch) in aligned columns: a column is as wide as its widest
    cell so far, so every batch lines up, and a later wider cell widens it from then on.
    `right`: the columns aligned right (numbers); the last column is never padded."""

    def __init__(self, right=()):
        self.right = set(right)
        self.widths = []

    def lines(self, body):
        cells = [[printable(v) for v in row] for row in body]
        for row in cells:
            self.widths += [0] * (len(row) - len(self.widths))
            for i, cell in enumerate(row[:-1]):
                self.widths[i] = max(self.widths[i], len(cell))
        return ["  ".join(c.rjust(w) if i in self.right else c.ljust(w)
                          for i, (c, w) in enumerate(zip(row, self.widths))).rstrip()
                for row in cells]


def as_json(cols, body):
    for row in body:
        print(json.dumps(dict(zip(cols, row))))
