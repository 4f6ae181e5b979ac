"""tinyq.sqlalchemy.setup(engine): tinyq on every pooled connection, and real transactions.

    engine = sqlalchemy.create_engine("sqlite:///app.db")
    tinyq.sqlalchemy.setup(engine)
    with Session(engine) as session, session.begin():
        session.add(Order(...))
        session.execute(text("SELECT tq_add('mail', :p)"), {"p": payload})   # both or neither

Python's sqlite3 module (SQLAlchemy's pysqlite driver) opens its implicit transaction only
before INSERT/UPDATE/DELETE/REPLACE, so a `SELECT tq_add(...)` that comes first would run
in autocommit and stay when the session rolls back. setup() applies SQLAlchemy's documented
pysqlite recipe: the driver's own transaction handling off (`isolation_level = None` on
each new connection) and a `BEGIN` from the engine's `begin` event, so every transaction
begins before its first statement. The asyncio engine (`sqlite+aiosqlite`) works the same
through its `sync_engine`. Call setup() before the engine's first connection.
"""
from __future__ import annotations

from typing import Any

import sqlalchemy  # the real SQLAlchemy: imports are absolute, this module is tinyq.sqlalchemy

from ._connection import extension_path, load


def setup(engine: Any) -> Any:
    """Load tinyq on each connection `engine` (an Engine or an AsyncEngine) opens, and make
    each of its transactions begin before its first statement. Returns the engine."""
    sync = getattr(engine, "sync_engine", engine)
    sqlalchemy.event.listen(sync, "connect", _on_connect)
    sqlalchemy.event.listen(sync, "begin", _on_begin)
    return engine


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    run_async = getattr(dbapi_connection, "run_async", None)
    if run_async is None:
        load(dbapi_connection)
    else:   # an asyncio driver's adapter (aiosqlite): its methods are coroutines
        path = extension_path()
        run_async(lambda conn: conn.enable_load_extension(True))
        try:
            run_async(lambda conn: conn.load_extension(path))
        finally:
            run_async(lambda conn: conn.enable_load_extension(False))
    dbapi_connection.isolation_level = None   # no implicit BEGIN: _on_begin issues it


def _on_begin(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN")
