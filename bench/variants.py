"""The built variants: read from the local registry's manifests with the stdlib alone.

$CUBINFORGE_HOME (default ./.cubinforge) holds manifests/<variant>.json, each with
{"variant", "family", "axes": {"arch", "dtype", "head_dim", "causal", ...}, "metadata": {...}}.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

FAMILY = "fa3_fwd"


def registry_home() -> Path:
    return Path(os.environ.get("CUBINFORGE_HOME", ".cubinforge")).expanduser()


@dataclass(frozen=True)
class Variant:
    name: str
    arch: str
    dtype: str
    head_dim: int
    causal: bool
    axes: dict = field(default_factory=dict, compare=False, hash=False)
    metadata: dict = field(default_factory=dict, compare=False, hash=False)
    path: str = ""

    @property
    def key(self) -> tuple:
        """What the runtime selects on: (arch, dtype, head_dim, causal)."""
        return (self.arch, self.dtype, self.head_dim, self.causal)


def _as_bool(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "causal")
    return bool(v)


def load_variants(home: Path | None = None, family: str = FAMILY) -> tuple[list[Variant], list[str]]:
    """(variants of `family` sorted by name, problems met while reading manifests)."""
    home = registry_home() if home is None else Path(home)
    mdir = home / "manifests"
    problems: list[str] = []
    if not mdir.is_dir():
        return [], [f"no manifests folder at {mdir} (set CUBINFORGE_HOME or run `make kernels`)"]
    out = []
    for p in sorted(mdir.glob("*.json")):
        try:
            m = json.loads(p.read_text())
            if m.get("family", family) != family:
                continue
            axes = m.get("axes", {})
            out.append(Variant(name=m.get("variant") or p.stem, arch=str(axes["arch"]),
                               dtype=str(axes["dtype"]), head_dim=int(axes["head_dim"]),
                               causal=_as_bool(axes.get("causal", False)), axes=axes,
                               metadata=m.get("metadata", {}) or {}, path=str(p)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            problems.append(f"{p.name}: unreadable manifest ({type(e).__name__}: {e})")
    return sorted(out, key=lambda v: v.name), problems


def arch_of_capability(major: int, minor: int) -> str:
    """The arch string a device of compute capability major.minor runs (sm_90a on H100/H200)."""
    return f"sm_{major}{minor}a" if (major, minor) in ((9, 0), (10, 0)) else f"sm_{major}{minor}"
