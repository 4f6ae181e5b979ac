"""The asyncio helper's SQL thread: _DbThread, one thread and connection, its group commits.

Every SQLite call of an AsyncQueue or of one queue of its work() runs on a _DbThread, never
on the event loop. Writes are group-committed (_group.py): the writes asked for while the
thread commits the last group go to the store in one transaction, each caller resumed once
its own write has committed; the step puts and progress that handlers wait for commit apart
from the settles, claims and renewals that nobody waits for (_DbThread._next_group). Reads
go to a thread and connection of their own."""
from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, List, Optional, Tuple

from ._connection import OwnedConnection
from ._group import Write, commit_group, run_reads


HANDLER_WRITES = ("tq_step_put", "tq_progress")   # the writes a handler waits for
PUTS_PER_COMMIT = 200   # ... in one group commit at most (_DbThread._next_group)
PUT_TURNS = 4           # turns of those alone in a row, at most, before the other writes go


class _DbThread:
    """One thread and one connection (an OwnedConnection: closed before a fork while idle,
    reopened in each process): every call runs there, in order, so the loop never waits
    for SQLite and no two calls share the connection."""

    def __init__(self, connect: Callable[[], Any], name: str):
        self._owned = OwnedConnection(connect)
        self._connect = connect
        self._name = name
        self._pid = 0
        self._pool: Optional[ThreadPoolExecutor] = None
        # for the next turn of the thread: (write, is it a read, its caller's future)
        self._pending: List[Tuple[Write, bool, "asyncio.Future[Any]"]] = []
        self._committer: Optional["asyncio.Task[None]"] = None
        self._put_turns = 0        # turns in a row that committed handlers' writes alone, others pending
        self._reader: Optional["_DbThread"] = None   # reads' own thread and connection (read())

    def _run(self, fn: Callable[..., Any], args: tuple) -> Any:
        with self._owned.lock:
            return fn(self._owned.get(), *args)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pid != os.getpid():   # a forked child has no thread
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
            self._pid = os.getpid()
        return self._pool

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor(), self._run, fn, args)

    async def write(self, write: Write) -> Any:
        """`write` in the next group commit: its answer (or its error) once the transaction
        that holds it has committed. Writes asked for in the same turn of the loop, or while
        the thread commits the previous group, share one commit (the handlers' own writes
        apart from the others: _next_group)."""
        return await self._next_turn(write, False)

    async def read(self, read: Write) -> Any:
        """`read` in the next turn of a thread of its own (and its own connection: in WAL a
        read does not wait for a writer), beside the other reads asked for meanwhile (one hop
        to that thread for all of them), outside a transaction. A handler that starts reads
        its kept steps at once, rather than after the commit the writes' thread is in."""
        if self._reader is None:
            self._reader = _DbThread(self._connect, self._name + "-reads")
        return await self._reader._next_turn(read, True)

    async def _next_turn(self, write: Write, read: bool) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((write, read, future))
        if self._committer is None:
            self._committer = asyncio.ensure_future(self._turns())
        return await future

    async def _turns(self) -> None:
        """Runs the pending reads, then commits the pending writes, one group per turn of
        the thread, until none is left (_next_group: the handlers' writes first)."""
        try:
            while self._pending:
                turn, self._pending = self._next_group(self._pending)
                reads = [(write, future) for write, read, future in turn if read]
                writes = [(write, future) for write, read, future in turn if not read]
                if reads:
                    await self._serve(run_reads, reads)
                if writes:
                    await self._serve(commit_group, writes)
        finally:
            self._committer = None

    def _next_group(self, pending: List[Tuple[Write, bool, "asyncio.Future[Any]"]]) -> Tuple[list, list]:
        """This turn's part of `pending`, and what is left for the next. A handler waits for
        its step put or progress, while a settle, a claim ahead or a renewal waits for
        nobody: so the handlers' writes commit alone, PUTS_PER_COMMIT at most, and the
        others wait while those are pending, for PUT_TURNS turns in a row at most, then go
        alone. A wave of puts is then never held by a commit of hundreds of settles or a
        claim of hundreds of jobs, which go between waves."""
        puts = [item for item in pending if item[0].function in HANDLER_WRITES]
        if len(puts) == len(pending):
            self._put_turns = 0
            return puts[:PUTS_PER_COMMIT], puts[PUTS_PER_COMMIT:]
        others = [item for item in pending if item[0].function not in HANDLER_WRITES]
        if not puts or self._put_turns >= PUT_TURNS:
            self._put_turns = 0
            return others, puts
        self._put_turns += 1
        return puts[:PUTS_PER_COMMIT], puts[PUTS_PER_COMMIT:] + others

    async def _serve(self, run: Callable[[Any, List[Write]], None], part: List[Tuple[Write, "asyncio.Future[Any]"]]) -> None:
        """`run(conn, writes)` on the thread, then each caller's answer."""
        try:
            await self.call(run, [write for write, _ in part])
        except BaseException as exc:   # no connection, or cancelled: every caller hears it
            error = exc if isinstance(exc, Exception) else RuntimeError(
                "tinyq: the group commit was interrupted (%r)" % (exc,))
            for _, future in part:
                if not future.done():
                    future.set_exception(error)
            if error is not exc:
                raise
            return
        for write, future in part:
            if not future.done():
                _resolve(future, write)

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
        if self._pool is not None and self._pid == os.getpid():
            await asyncio.get_running_loop().run_in_executor(self._pool, self._owned.close)
            self._pool.shutdown(wait=False)
        self._pool = None


def _resolve(future: "asyncio.Future[Any]", write: Write) -> None:
    if write.error is not None:
        future.set_exception(write.error)
    else:
        future.set_result(write.value)
