"""Alembic environment: the URL comes from the Config object (see registry/migrate.py)."""

from alembic import context
from sqlalchemy import create_engine, pool

from cubinforge.registry.db import make_engine
from cubinforge.registry.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    engine = make_engine(url) if url.startswith("sqlite") else create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=url.startswith("sqlite"))  # SQLite can't ALTER most things
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
