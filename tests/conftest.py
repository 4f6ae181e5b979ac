"""The fixtures and hooks of the suite; what tests import (helpers) is in helpers.py.

Run with Debian's /usr/bin/python3 (its sqlite3 module can load extensions).
"""
import os
import sys

import pytest

from helpers import SO, connect


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "store.db")


@pytest.fixture
def db(db_path):
    conn = connect(db_path)
    yield conn
    conn.close()


@pytest.fixture(autouse=True, scope="session")
def _built():
    assert os.path.exists(SO), f"{SO} is missing: run `make` first"
    assert sys.version_info >= (3, 9)
