"""tinyq.sqlalchemy.setup(engine): an ORM session's row and its `SELECT tq_add(...)` commit
or roll back together (JOB-02), on the sync pysqlite engine and the asyncio aiosqlite one.

Without setup()'s BEGIN, Python's sqlite3 would run the tq_add, which comes before the
session's first INSERT, in autocommit: the job would stay after the rollback. Runs under
Debian's SQLAlchemy 1.4 (python3-sqlalchemy) and aiosqlite (python3-aiosqlite).
"""
import asyncio
import os
import sys

import pytest

from helpers import ROOT, connect, one

sys.path.insert(0, os.path.join(ROOT, "python"))

sqlalchemy = pytest.importorskip("sqlalchemy")
from sqlalchemy import Column, Integer, String, text  # noqa: E402
from sqlalchemy.orm import Session, declarative_base  # noqa: E402

import tinyq.sqlalchemy  # noqa: E402

Base = declarative_base()


class Order(Base):
    __tablename__ = "orders"
    id = Column(Integer, primary_key=True)
    item = Column(String)


ADD = text("SELECT tq_add('mail', :payload, json_object('id', :id))")


class Boom(Exception):
    pass


def counts(path):
    conn = connect(str(path))
    try:
        return (one(conn, "SELECT count(*) FROM orders"),
                one(conn, "SELECT count(*) FROM tq_jobs WHERE queue = 'mail'"))
    finally:
        conn.close()


def order_and_job(session, n):
    """The job first (before the session's first INSERT), then the row."""
    session.execute(ADD, {"payload": '{"order": %d}' % n, "id": "order:%d" % n})
    session.add(Order(id=n, item="tea"))
    session.flush()


def test_JOB_02_sqlalchemy_session_rolls_back_and_commits_the_row_and_the_job(tmp_path):
    path = tmp_path / "app.db"
    engine = tinyq.sqlalchemy.setup(sqlalchemy.create_engine("sqlite:///%s" % path))
    Base.metadata.create_all(engine)

    with pytest.raises(Boom):
        with Session(engine) as session, session.begin():
            order_and_job(session, 1)
            raise Boom
    assert counts(path) == (0, 0), "the rollback took the row and the job"

    with Session(engine) as session, session.begin():
        order_and_job(session, 2)
    assert counts(path) == (1, 1)
    with engine.connect() as conn:   # every pooled connection has tinyq
        assert conn.execute(text("SELECT tq_get('order:2') ->> 'state'")).scalar() == "waiting"
    engine.dispose()


def test_JOB_02_sqlalchemy_async_session_rolls_back_and_commits_the_row_and_the_job(tmp_path):
    pytest.importorskip("aiosqlite", reason="aiosqlite is not installed (Debian: python3-aiosqlite)")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    path = tmp_path / "app.db"

    async def main():
        engine = tinyq.sqlalchemy.setup(create_async_engine("sqlite+aiosqlite:///%s" % path))
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        with pytest.raises(Boom):
            async with AsyncSession(engine) as session, session.begin():
                await session.run_sync(order_and_job, 1)
                raise Boom
        assert counts(path) == (0, 0), "the rollback took the row and the job"
        async with AsyncSession(engine) as session, session.begin():
            await session.run_sync(order_and_job, 2)
        assert counts(path) == (1, 1)
        await engine.dispose()

    asyncio.run(main())
