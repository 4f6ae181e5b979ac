"""Connections with tinyq loaded: where the extension is, loading it into a sqlite3 or
apsw connection, and the connection a worker wants (tinyq.open)."""
from __future__ import annotations

import os
import sqlite3
from typing import Any, Union

from ._sql import _rows

_HERE = os.path.dirname(os.path.abspath(__file__))
_SUFFIXES = (".so", ".dylib", ".dll")


def extension_path() -> str:
    """Where the tinyq extension is: $TINYQ_EXT, else a copy packaged next to this module,
    else the repository's dist/ (a path SQLite's load_extension accepts)."""
    env = os.environ.get("TINYQ_EXT")
    if env:
        return env
    for folder in (_HERE, os.path.join(_HERE, "..", "..", "dist")):
        for suffix in _SUFFIXES:
            candidate = os.path.normpath(os.path.join(folder, "tinyq" + suffix))
            if os.path.exists(candidate):
                return candidate
    raise FileNotFoundError("tinyq extension not found: set TINYQ_EXT, or build dist/tinyq.so (make)")


def _is_apsw(conn):
    return type(conn).__module__.split(".")[0] == "apsw"


def load(conn: Any) -> Any:
    """Load the tinyq extension into a sqlite3 (or apsw) connection; returns the connection."""
    enable = getattr(conn, "enable_load_extension", None) or getattr(conn, "enableloadextension", None)
    load_ext = getattr(conn, "load_extension", None) or getattr(conn, "loadextension", None)
    if enable is None or load_ext is None:
        raise RuntimeError("this Python's sqlite3 module cannot load extensions (it was built "
                           "without them): use a Python whose sqlite3 can, such as Debian's "
                           "/usr/bin/python3, or apsw")
    enable(True)
    try:
        load_ext(extension_path())
    finally:
        enable(False)
    return conn


def open(path: Union[str, "os.PathLike[str]"], busy_timeout: float = 5.0) -> sqlite3.Connection:  # noqa: A001 (mirrors sqlite3.connect / builtins.open)
    """A sqlite3 connection the way a worker wants one: tinyq loaded, WAL,
    synchronous=FULL, a busy timeout, and autocommit (isolation_level=None)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout)
    try:
        load(conn)
        _configure(conn, busy_timeout)
    except BaseException:
        conn.close()
        raise
    return conn


def _open_like(conn, path, busy_timeout=5.0):
    """A new connection to `path` of the same kind (sqlite3 or apsw) as `conn`."""
    if not _is_apsw(conn):
        return open(path, busy_timeout)
    import apsw
    new = apsw.Connection(path)
    load(new)
    _configure(new, busy_timeout)
    return new


def _configure(conn, busy_timeout):
    _rows(conn, "PRAGMA busy_timeout=%d" % int(busy_timeout * 1000))
    _rows(conn, "PRAGMA journal_mode=WAL")
    _rows(conn, "PRAGMA synchronous=FULL")  # power-safe commits: docs/guarantees.md
