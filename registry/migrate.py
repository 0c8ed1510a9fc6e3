"""Alembic, driven from code: the one migration history of a registry database (registry/migrations).

`upgrade(url)` is what `cubinforge db upgrade`, `serve` and the service's tools run;
`ensure_schema(db)` is what opening a `Registry` runs: a new database gets the models'
tables stamped at head (no history to replay), an older one is upgraded, one at head is left.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def head() -> str:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current(url: str) -> str | None:
    from sqlalchemy import create_engine
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return MigrationContext.configure(c).get_current_revision()
    finally:
        eng.dispose()


def ensure_schema(engine, url: str) -> None:
    """Bring the database behind `engine` to the head revision."""
    from .models import Base
    with engine.connect() as c:
        rev = MigrationContext.configure(c).get_current_revision()
        tables = set(inspect(c).get_table_names())
    if rev == head():
        return
    if rev is None and not tables:
        Base.metadata.create_all(engine)
        command.stamp(alembic_config(url), "head")
        return
    # A database made before the migrations lived here (a local registry, or the service's).
    upgrade(url)
