"""bench/env.commit(): the project's own commit, never that of a repository around a copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cubinforge.bench import env as E

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(cwd), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def exported(tmp_path):
    """This checkout's code (no .git), exported into a folder of another git repository."""
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / "README").write_text("another project\n")
    git(outer, "add", "README")
    git(outer, "commit", "-qm", "outer")
    copy = outer / "vendor" / "cubinforge"
    copy.mkdir(parents=True)
    for folder in ("cubinforge", "bench", "runtime"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("results", "__pycache__"))
    return outer, copy


def commit_in(copy: Path, **env) -> str:
    e = {k: v for k, v in os.environ.items() if k != "CUBINFORGE_COMMIT"}
    e.update(PYTHONPATH=str(copy), **env)
    p = subprocess.run([sys.executable, "-c", "from cubinforge.bench import env; print(env.commit())"],
                       cwd=copy, env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_copy_inside_another_repository_is_unknown_not_its_head(exported):
    outer, copy = exported
    assert commit_in(copy) == "unknown"
    assert git(outer, "rev-parse", "HEAD") not in commit_in(copy)


def test_cubinforge_commit_is_honoured(exported):
    _, copy = exported
    assert commit_in(copy, CUBINFORGE_COMMIT="abc123") == "abc123"
    assert commit_in(copy, CUBINFORGE_COMMIT="unknown") == "unknown"   # the session script's placeholder


def test_copy_that_is_its_own_repository_records_its_own_head(exported):
    _, copy = exported
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "commit", "-qm", "copy")
    assert commit_in(copy) == git(copy, "rev-parse", "HEAD")
    (copy / "bench" / "env.py").write_text((copy / "bench" / "env.py").read_text() + "\n# edited\n")
    assert commit_in(copy) == git(copy, "rev-parse", "HEAD") + "-dirty"


def test_this_checkout(monkeypatch):
    monkeypatch.delenv("CUBINFORGE_COMMIT", raising=False)
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert E.commit().split("-")[0] == git(REPO, "rev-parse", "HEAD")
    monkeypatch.setenv("CUBINFORGE_COMMIT", "deadbeef")
    assert E.commit() == "deadbeef"
