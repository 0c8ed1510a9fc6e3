""".ci/postgres.sh hands back its URL without waiting on the server it starts.

Session 1's CI hung for 90 minutes: the PostgreSQL server, a daemon, inherited the pipe that
`$(bash .ci/postgres.sh)` reads, so the command substitution never saw EOF. Here fake
cluster tools start a stand-in daemon (a background `sleep`) the same way; the script must
still return at once with the export lines.
"""

from __future__ import annotations

import glob
import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

FAKES = {
    # The cluster exists and is down; starting it leaves a daemon behind holding our fds.
    "pg_lsclusters": "#!/bin/sh\necho '15 main 5432 down postgres /x /y'\n",
    "pg_ctlcluster": "#!/bin/sh\n[ \"$3\" = start ] && { sleep 60 & }\nexit 0\n",
    "pg_createcluster": "#!/bin/sh\nexit 0\n",
    # `su postgres -c CMD` runs CMD; psql answers every query with 1.
    "su": "#!/bin/sh\nexec sh -c \"$3\"\n",
    "psql": "#!/bin/sh\necho 1\n",
}


@pytest.mark.skipif(not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                    reason="the script installs PostgreSQL first where it is missing (CI has it)")
def test_postgres_script_does_not_wait_for_the_daemon(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in FAKES.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "CUBINFORGE_PG_START_LOG": str(tmp_path / "start.log")}
    t0 = time.monotonic()
    # Exactly how .ci/run used to read it: through a pipe, to EOF.
    try:
        proc = subprocess.run(["bash", "-c", 'x=$(bash .ci/postgres.sh); echo "$x"'], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=50)
    finally:
        subprocess.run(["pkill", "-f", "^sleep 60$"], check=False)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert took < 20, f"the script waited {took:.0f} s for its daemon: a CI run would hang"
    assert "export CUBINFORGE_TEST_PG_URL=postgresql+psycopg://" in proc.stdout
    assert "export CUBINFORGE_PG_STOP=" in proc.stdout
