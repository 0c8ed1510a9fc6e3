"""Where the local registry lives: one setting, CUBINFORGE_HOME (default ./.cubinforge).

CUBINFORGE_DATABASE_URL overrides the database (default sqlite:///$CUBINFORGE_HOME/registry.db).
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("CUBINFORGE_HOME") or ".cubinforge").absolute()


def database_url(home_dir: Path | None = None) -> str:
    url = os.environ.get("CUBINFORGE_DATABASE_URL")
    if url:
        return url
    return f"sqlite:///{(home_dir or home()) / 'registry.db'}"
