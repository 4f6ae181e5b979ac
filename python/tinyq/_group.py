"""Group commit: many handlers' writes in one transaction, each in a savepoint of its own.

The writes that many handlers of one worker make at about the same time (step puts,
progress, settles, the next claim, lease renewals) go to the store in one transaction, so
that one synced commit (synchronous=FULL) carries them all. Each write runs in a savepoint
of its own: one that fails is rolled back alone and its caller gets the error, while the
others' writes commit. A caller learns its answer only once the transaction that holds its
write has committed: a kept step is on disk before the handler goes on, as with one commit
per write.

Calls of one tinyq function that follow each other in a group (the step puts of many
handlers, say) go to the store as one statement over a JSON array of their arguments: on
a busy event loop each statement costs the SQL thread a wait for the GIL, so a thousand
statements cost far more than one. If that statement fails, it is rolled back and its
calls run one by one, each in its savepoint, so only the failing one fails."""
from __future__ import annotations

import json
import threading
from typing import Any, Callable, List, Optional

from ._context import is_busy
from ._sql import _rows

__all__ = ["Write", "commit_group", "run_reads", "Leader"]


class Write:
    """One caller's write: fn(conn, *args), then its value or its error. `function`
    names the tinyq function when the write is one call of it (see call())."""
    __slots__ = ("fn", "args", "function", "value", "error", "done")

    def __init__(self, fn: Callable[..., Any], args: tuple, function: Optional[str] = None):
        self.fn, self.args, self.function = fn, args, function
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.done = False

    @classmethod
    def call(cls, function: str, *args: Any) -> "Write":
        """`SELECT function(args...)`'s value, as a write that joins its neighbours'."""
        return cls(_call_alone, (function,) + args, function)

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def run_reads(conn: Any, reads: List[Write]) -> None:
    """The reads outside any transaction (they need no commit): each one's value or
    error, marked done."""
    for run in _runs(reads):
        if len(run) > 1:
            try:
                _set_values(run, _rows(conn, _merged_sql(run), _merged_args(run)))
                continue
            except Exception:
                pass   # one by one, below: only the failing one fails
        for read in run:
            try:
                read.value = read.fn(conn, *read.args)
            except Exception as exc:
                read.error = exc
    for read in reads:
        read.done = True


class _TransactionEnded(Exception):
    """A write's error that ended the whole transaction (a full disk, say): nothing of it
    is kept, so every write of the group gets the error."""


def commit_group(conn: Any, writes: List[Write], tries: int = 3) -> None:
    """Every write in a savepoint of one BEGIN IMMEDIATE ... COMMIT on `conn`; sets each
    write's value or error, and marks it done. Busy at BEGIN or COMMIT: the whole group is
    tried again, `tries` times in all. When the transaction itself fails (busy every time,
    the commit, or a write's error that ended it), every write gets that error: none of
    them was committed."""
    for attempt in range(tries):
        for write in writes:
            write.value, write.error = None, None
        try:
            _rows(conn, "BEGIN IMMEDIATE")
            try:
                for run in _runs(writes):
                    if len(run) > 1:
                        _run_merged(conn, run)
                    else:
                        _run_in_savepoint(conn, run[0])
                _rows(conn, "COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            break
        except _TransactionEnded as ended:
            _fail_all(writes, ended.args[0])
            break
        except Exception as exc:
            if is_busy(exc) and attempt < tries - 1:
                continue
            _fail_all(writes, exc)
            break
    for write in writes:
        write.done = True


def _run_in_savepoint(conn: Any, write: Write) -> None:
    _rows(conn, "SAVEPOINT tinyq_write")
    try:
        write.value = write.fn(conn, *write.args)
    except Exception as exc:
        if not _in_transaction(conn):
            raise _TransactionEnded(exc) from exc
        _rows(conn, "ROLLBACK TO tinyq_write")
        _rows(conn, "RELEASE tinyq_write")
        write.error = exc
    else:
        _rows(conn, "RELEASE tinyq_write")


def _run_merged(conn: Any, run: List[Write]) -> None:
    """Calls of one function in one statement, in a savepoint; if it fails, one by one."""
    _rows(conn, "SAVEPOINT tinyq_write")
    try:
        rows = _rows(conn, _merged_sql(run), _merged_args(run))
    except Exception as exc:
        if not _in_transaction(conn):
            raise _TransactionEnded(exc) from exc
        _rows(conn, "ROLLBACK TO tinyq_write")
        _rows(conn, "RELEASE tinyq_write")
        for write in run:
            _run_in_savepoint(conn, write)
        return
    _rows(conn, "RELEASE tinyq_write")
    _set_values(run, rows)


def _runs(writes: List[Write]) -> List[List[Write]]:
    """The writes in order, neighbours that call the same function together."""
    runs: List[List[Write]] = []
    for write in writes:
        if runs and write.function is not None and runs[-1][0].function == write.function:
            runs[-1].append(write)
        else:
            runs.append([write])
    return runs


def _call_alone(conn: Any, function: str, *args: Any) -> Any:
    rows = _rows(conn, "SELECT %s(%s)" % (function, ", ".join("?" * len(args))), *args)
    return rows[0][0]


def _merged_sql(run: List[Write]) -> str:
    """One call per element of a JSON array of argument lists, in the array's order."""
    arity = len(run[0].args) - 1
    return "SELECT %s(%s) FROM json_each(?) ORDER BY key" % (
        run[0].function, ", ".join("json_extract(value, '$[%d]')" % i for i in range(arity)))


def _merged_args(run: List[Write]) -> str:
    return json.dumps([list(write.args[1:]) for write in run])


def _set_values(run: List[Write], rows: List[Any]) -> None:
    for write, row in zip(run, rows):
        write.value = row[0]


def _in_transaction(conn: Any) -> bool:
    return not conn.getautocommit() if hasattr(conn, "getautocommit") else conn.in_transaction  # apsw, sqlite3


def _rollback(conn: Any) -> None:
    if _in_transaction(conn):
        try:
            _rows(conn, "ROLLBACK")
        except Exception:
            pass


def _fail_all(writes: List[Write], exc: BaseException) -> None:
    for write in writes:
        write.value, write.error = None, exc


class Leader:
    """Group commit for threads that share no writer thread: a thread's item (a Write, or
    anything with `done`) joins the pending group; if no thread is serving, it becomes the
    leader and serves every item pending by then on its own connection (`serve(conn,
    group)` marks each done). The others wait until their item is done, or until the
    leader is finished and one of them leads the next group. No caller ever waits for a
    lock behind the others (Python's locks are not fair): an item is served by whichever
    thread leads next, so a heartbeat's renewal never waits behind 200 handler threads."""

    def __init__(self, serve: Callable[[Any, List[Any]], None] = commit_group,
                 lock: Optional["threading.Lock"] = None):
        self._serve = serve
        self._lock = lock or threading.Lock()   # shared by the leaders of several groups
        self._pending: List[Any] = []
        self._leading = False
        self._turn = threading.Condition()

    def submit(self, conn: Any, item: Any) -> None:
        """Returns once `item` has been served, by this thread or another."""
        with self._turn:
            self._pending.append(item)
            while self._leading and not item.done:
                self._turn.wait()
            if item.done:
                return
            self._leading = True
            group, self._pending = self._pending, []
        try:
            with self._lock:
                self._serve(conn, group)
        except BaseException as exc:   # (serve marks its own errors) its waiters must not hang
            for other in group:
                if not other.done:
                    other.error, other.done = exc, True
            raise
        finally:
            with self._turn:
                self._leading = False
                self._turn.notify_all()

    def write(self, conn: Any, write: Write) -> Any:
        """`write`'s answer once the group that holds it has committed (its error raised)."""
        self.submit(conn, write)
        return write.result()
