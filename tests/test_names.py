"""Whose names are whose (#28 Lows): tinyq's SQL names its tables without a schema, and
SQLite finds a TEMP object of that name first, so a TEMP table named like one of tinyq's
is refused at load; tinyq's tables are eponymous, so SQLite resolves `aux.tq_jobs` to the
one table, which reads main's store (documented in docs/guarantees.md)."""
import sqlite3

import pytest

from helpers import EXT, add, connect, one


def bare(path):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.enable_load_extension(True)
    return conn


@pytest.mark.parametrize("shadow", ["CREATE TEMP TABLE tinyq_jobs (id)", "CREATE TEMP TABLE tq_claim (id)",
                                    "CREATE TEMP VIEW tinyq_counts AS SELECT 1 AS queue"])
def test_a_temp_object_named_like_tinyqs_is_refused_at_load_naming_it(tmp_path, shadow):
    conn = bare(str(tmp_path / "app.db"))
    conn.execute(shadow)
    name = shadow.split()[3]
    with pytest.raises(sqlite3.OperationalError, match=f"temp.{name} would hide tinyq's own"):
        conn.load_extension(EXT)
    with pytest.raises(sqlite3.OperationalError, match="no such function: tq_add"):
        conn.execute("SELECT tq_add('q', '{}')")
    conn.execute(f"DROP {shadow.split()[2]} {name}")
    conn.load_extension(EXT)                     # gone: tinyq loads, and its store is main's
    assert one(conn, "SELECT tq_add('q', '{}', '{\"id\": \"a\"}')") == "a"
    assert one(conn, "SELECT count(*) FROM main.tinyq_jobs") == 1
    conn.close()


def test_loading_twice_on_one_connection_is_no_shadow(tmp_path):
    conn = bare(str(tmp_path / "app.db"))
    conn.load_extension(EXT)
    conn.load_extension(EXT)                     # tinyq's own temp.tq_claim is not refused
    add(conn, "q", id="a")
    assert [r[0] for r in conn.execute("SELECT id FROM tq_claim('q', 'w', 1)")] == ["a"]
    conn.close()


def test_tables_named_with_another_schema_read_mains_store(tmp_path):
    """Documented, not changed: SQLite resolves an eponymous table whatever schema names it."""
    conn = connect(str(tmp_path / "app.db"))
    other = str(tmp_path / "other.db")
    conn.execute("ATTACH ? AS aux", (other,))
    add(conn, "q", id="in-main")
    assert [r[0] for r in conn.execute("SELECT id FROM aux.tq_jobs")] == ["in-main"]
    assert one(conn, "SELECT count(*) FROM aux.sqlite_master") == 0    # nothing written to aux
    conn.close()
