"""The content key: what a variant's cubin depends on, hashed without importing cutlass.

sha256 over the rendered source, every .py file of the family's kernel package (sorted by
path), the DSL toolchain versions (importlib.metadata), the compile options and the arch. If
the registry already holds the variant under the same key, the build skips it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from functools import lru_cache
from pathlib import Path

# Bump when what the pipeline stores beside the cubin (metadata, contract assembly) changes shape.
PIPELINE_VERSION = 1
DSL_DISTRIBUTION = "nvidia-cutlass-dsl"
_TOOLCHAIN = (
    DSL_DISTRIBUTION,
    "nvidia-cutlass-dsl-libs-base",
    "nvidia-cutlass-dsl-libs-core",
    "nvidia-cutlass-dsl-libs-cu12",
    "nvidia-cutlass-dsl-libs-cu13",
)


def dsl_version() -> str:
    try:
        return importlib.metadata.version(DSL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "not-installed"


@lru_cache(maxsize=None)
def toolchain() -> str:
    """`name==version` of each installed DSL distribution (the libs wheel carries ptxas)."""
    parts = []
    for name in _TOOLCHAIN:
        try:
            parts.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ";".join(parts)


def package_dir(module: str) -> Path:
    """The folder of a kernel package, found without executing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"kernel package {module!r} is not importable (is it written yet?)")
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=None)
def library_digest(module: str) -> str:
    """sha256 over every .py file of a kernel package: relative path and contents, sorted."""
    root = package_dir(module)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def content_key(rendered_source: str, package: str, compile_options: str, arch: str) -> str:
    h = hashlib.sha256()
    for label, value in (
        ("pipeline", str(PIPELINE_VERSION)),
        ("source", rendered_source),
        ("library", library_digest(package)),
        ("toolchain", toolchain()),
        ("options", compile_options),
        ("arch", arch),
    ):
        data = value.encode()
        h.update(label.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()
