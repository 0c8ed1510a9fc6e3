"""Compile on a miss: with CUBINFORGE_COMPILE_ON_MISS=1, a select that finds no variant builds
the one asked for into the local registry, then selects again.

The runtime imports nothing of the generator (nor cutlass, jinja2, sqlalchemy): it runs
`python -m cubinforge.cli --home HOME build --exact --family F --AXIS V ...` in a subprocess,
and only on a miss with the variable set. The build takes exactly the asked axis values (the
spec refuses what it does not allow, and that refusal is the error); it never substitutes.
Off by default: a miss stays an error naming the nearest variants.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

ENV = "CUBINFORGE_COMPILE_ON_MISS"
TIMEOUT_S = 900  # one variant compiles in seconds; the limit only stops a hung toolchain


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def unavailable() -> str | None:
    """Why this interpreter cannot compile (the DSL or the generator is not installed), or None."""
    for module, extra in (("cutlass", "build"), ("jinja2", "build"), ("sqlalchemy", "server")):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a finder that refuses it: as good as absent
            found = False
        if not found:
            return (f"{ENV}=1 but {module!r} is not installed here; compiling needs the CuTe DSL: "
                    f"pip install 'cubinforge[build,server]'")
    return None


def _text(value: Any) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def command(home: Path, family: str, axes: Mapping[str, Any]) -> list[str]:
    cmd = [sys.executable, "-m", "cubinforge.cli", "--home", str(home), "build", "--exact", "--family", family,
           "--jobs", "1", "--no-progress"]
    for axis, value in axes.items():
        cmd += [f"--{axis.replace('_', '-')}", _text(value)]
    return cmd


def compile_variant(home: Path, family: str, axes: Mapping[str, Any]) -> tuple[bool, str]:
    """Build the variant of `family` with `axes` into the registry at `home`: (ok, what the build said)."""
    why = unavailable()
    if why:
        return False, why
    try:
        r = subprocess.run(command(home, family, axes), capture_output=True, text=True, timeout=TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"the build did not finish within {TIMEOUT_S} s"
    said = (r.stdout + r.stderr).strip()
    return r.returncode == 0, said[-3000:]
