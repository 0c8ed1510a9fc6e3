"""Per-variant manifests, `$CUBINFORGE_HOME/manifests/<variant>.json`: what the runtime reads.

Format (manifest_version 1): variant, family, axes, cubin {sha256, size}, contract (the full
launch contract), metadata, provenance. Written atomically on every put; removed on yank.
"""

from __future__ import annotations

import json
from pathlib import Path

from .blobstore import atomic_write

MANIFEST_VERSION = 1


def manifest_path(manifests_dir: Path, variant: str) -> Path:
    if not variant or "/" in variant or variant.startswith("."):
        raise ValueError(f"bad variant name {variant!r}")
    return Path(manifests_dir) / f"{variant}.json"


def make_manifest(*, variant, family, axes, cubin_sha256, cubin_size, contract, metadata, provenance) -> dict:
    return {
        "manifest_version": MANIFEST_VERSION,
        "variant": variant,
        "family": family,
        "axes": axes,
        "cubin": {"sha256": cubin_sha256, "size": cubin_size},
        "contract": contract,
        "metadata": metadata,
        "provenance": provenance,
    }


def write_manifest(manifests_dir: Path, manifest: dict) -> Path:
    path = manifest_path(manifests_dir, manifest["variant"])
    atomic_write(path, (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode())
    return path


def read_manifest(manifests_dir: Path, variant: str) -> dict:
    return json.loads(manifest_path(manifests_dir, variant).read_text())


def remove_manifest(manifests_dir: Path, variant: str) -> None:
    manifest_path(manifests_dir, variant).unlink(missing_ok=True)
