"""A wheel of cubinforge carries what the code reads at run time, not only its .py files.

An editable install (what `make` does) finds templates/ and the C++ headers in the checkout;
`pip install cubinforge` does not have a checkout, so this builds the real wheel and uses it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools", minversion="70.1")  # bdist_wheel built in
    out = tmp_path_factory.mktemp("wheel")
    # Built from the tracked files only, as a release would be: a checkout's own build/ and
    # *.egg-info (whose SOURCES.txt setuptools trusts) would hide a missing package-data rule.
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(src)],
        capture_output=True, text=True, cwd=out,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = out.glob("cubinforge-*.whl")
    return whl


def test_wheel_carries_runtime_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = {f"cubinforge/templates/{p.relative_to(REPO / 'templates')}" for p in (REPO / "templates").rglob("*.j2")}
    needed |= {f"cubinforge/runtime/{p.relative_to(REPO / 'runtime')}"
               for p in (REPO / "runtime/cpp/include").rglob("*.h")}
    needed |= {f"cubinforge/service/{p.relative_to(REPO / 'service')}"
               for p in (REPO / "service/migrations").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert needed, "nothing to look for: the repository layout changed"
    missing = sorted(needed - names)
    assert not missing, f"the wheel lacks files the code reads at run time: {missing}"
    # Nothing from the test tree or the build outputs rides along.
    assert not [n for n in names if n.startswith(("tests/", "build/", ".cubinforge"))]


def test_wheel_renders_a_variant_without_the_checkout(wheel, tmp_path):
    """Unpacked alone (no repository on the path), the generator still finds its templates."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import cubinforge.generator.render as r, cubinforge.generator.spec as s, pathlib;"
        "assert str(pathlib.Path(r.TEMPLATES_DIR)).startswith(sys.argv[1]), r.TEMPLATES_DIR;"
        "v = s.expand_set('smoke')[0];"
        "print(len(r.render(v).text))"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code, str(site)], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.strip()) > 200
