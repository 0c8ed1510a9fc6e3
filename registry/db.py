"""Engine and session of a registry database: one engine per process, a short session per unit of work.

For the service, pool and concurrency are sized together: every use of the database runs in a worker thread
(sync routes and dependencies, run_in_threadpool) and holds one connection while it runs, and
service/app.py caps those threads at `pool_size`, so a request never waits on the pool for a
connection that another request's thread is not using (issue 14: 40 threads on a pool of
5+10 timed out after 30 s under load).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker


DEFAULT_POOL_SIZE = 32  # the service's default (CUBINFORGE_DB_POOL_SIZE)


def make_engine(url: str, pool_size: int = DEFAULT_POOL_SIZE) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               pool_size=pool_size, max_overflow=4)

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record):
            # WAL lets readers run while a publish writes; several workers share the file.
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=4)


class Database:
    def __init__(self, url: str, pool_size: int = DEFAULT_POOL_SIZE):
        self.url = url
        self.pool_size = pool_size
        self.engine = make_engine(url, pool_size)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    def session(self) -> Iterator[Session]:
        """A session for one request (a FastAPI dependency: a generator)."""
        with self.sessions() as s:
            yield s

    def dispose(self) -> None:
        self.engine.dispose()
