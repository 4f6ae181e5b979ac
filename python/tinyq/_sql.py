"""Small SQL helpers that work on sqlite3 and apsw connections alike."""
import datetime
import json


def _rows(conn, sql, *args):
    """All rows of a statement (always read to the end, so no statement stays open)."""
    return list(conn.execute(sql, args))


def _one(conn, sql, *args):
    rows = _rows(conn, sql, *args)
    return rows[0][0] if rows else None


def _encode(value):
    """Text is stored as is; anything else (dict, list, number, bool, None) as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _decode(value):
    """JSON text back to Python; text that is not JSON (and numbers) come back as they are."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _ms(value):
    """timedelta -> integer ms, datetime -> ms since the epoch; other values go to SQL as they are."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.astimezone()
        return int(value.timestamp() * 1000)
    return value


def _options(**kw):
    """A JSON options object of the given keys that are not None, or None if there are none."""
    opts = {k: _ms(v) for k, v in kw.items() if v is not None}
    return json.dumps(opts) if opts else None


# sqlite3's `autocommit` attribute (Python 3.12+) while the module's legacy transaction
# control applies (sqlite3.LEGACY_TRANSACTION_CONTROL); absent before 3.12: legacy.
LEGACY = -1


def implicit_begin(conn):
    """Before a write on a connection of the caller's: what Python's sqlite3 module does
    before an INSERT in its legacy mode (an isolation_level that is not None): open the
    implicit transaction ("BEGIN " + the level, as the module writes it) when none is
    open, so the write commits and rolls back with the caller's transaction (JOB-02). The
    module sees it at once (in_transaction reads SQLite's own state). With
    isolation_level=None, with autocommit=True or False (3.12), and on apsw, nothing is
    implicit or a transaction is always open: nothing to do, as for an INSERT."""
    level = getattr(conn, "isolation_level", None)     # apsw has none
    if level is None or getattr(conn, "autocommit", LEGACY) != LEGACY or conn.in_transaction:
        return
    _rows(conn, "BEGIN " + level)


def transaction(conn, body):
    """body() inside BEGIN IMMEDIATE ... COMMIT (rolled back if it raises)."""
    _rows(conn, "BEGIN IMMEDIATE")
    try:
        result = body()
        _rows(conn, "COMMIT")
        return result
    except BaseException:
        try:
            _rows(conn, "ROLLBACK")
        except Exception:
            pass
        raise


def atomic(conn, body):
    """body() as one transaction: its own (transaction()) in autocommit, else a savepoint
    inside the caller's, rolled back to if it raises (the caller's transaction goes on)."""
    in_tx = not conn.getautocommit() if hasattr(conn, "getautocommit") else conn.in_transaction  # apsw, sqlite3
    if not in_tx:
        return transaction(conn, body)
    _rows(conn, "SAVEPOINT tinyq")
    try:
        result = body()
    except BaseException:
        _rows(conn, "ROLLBACK TO tinyq")
        _rows(conn, "RELEASE tinyq")
        raise
    _rows(conn, "RELEASE tinyq")
    return result
