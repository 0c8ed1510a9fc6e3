"""Where and with what a run happened: GPU, driver, versions, commit, and env.txt."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
PACKAGES = ("numpy", "torch", "cuda-bindings", "cuda-python", "cupy-cuda13x", "cupy-cuda12x",
            "matplotlib", "flash-attn-4", "nvidia-cutlass-dsl", "jax")


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    s = re.sub(r"^nvidia\s+", "", name.strip().lower())
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "gpu"


def default_out_dir(gpu_name: str, today: _dt.date | None = None) -> Path:
    today = today or _dt.date.today()
    return RESULTS / f"{today.isoformat()}-{gpu_slug(gpu_name)}"


def _run(cmd: list[str], timeout: float = 20.0) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def commit() -> str:
    """The project's own commit, for the record: $CUBINFORGE_COMMIT when set (and not the
    placeholder 'unknown'), else the git rev of the repository whose root is this checkout
    (+ '-dirty' when tracked files differ), else 'unknown'.

    A checkout exported without .git into some other repository must not record that
    repository's head: git is believed only when its top level is this package's root."""
    env = os.environ.get("CUBINFORGE_COMMIT", "").strip()
    if env and env != UNKNOWN:
        return env
    top = _run(["git", "-C", str(REPO), "rev-parse", "--show-toplevel"])
    if top and _same_dir(top, REPO):
        rev = _run(["git", "-C", str(REPO), "rev-parse", "HEAD"])
        if rev:
            dirty = _run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
            return rev + ("-dirty" if dirty else "")
    return UNKNOWN


UNKNOWN = "unknown"


def _same_dir(a: str, b: Path) -> bool:
    try:
        return Path(a).resolve() == b.resolve()
    except OSError:
        return False


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    try:
        import torch

        out["torch_cuda"] = torch.version.cuda
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        out["cudnn"] = cudnn
    except Exception:  # noqa: BLE001 - a missing torch is reported elsewhere
        pass
    return out


def gpu_and_driver() -> tuple[str | None, str | None]:
    q = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    name = driver = None
    if q:
        first = q.splitlines()[0].split(",")
        name, driver = first[0].strip(), first[-1].strip()
    if name is None:
        try:
            import torch

            name = torch.cuda.get_device_name(0)
        except Exception:  # noqa: BLE001
            pass
    return name, driver


def env_text(meta: dict, variants=(), extra: str = "") -> str:
    lines = [f"date: {meta.get('date')}", f"command: {meta.get('command')}",
             f"commit: {meta.get('commit')}", f"gpu: {meta.get('gpu')}",
             f"driver: {meta.get('driver')}", f"host: {platform.node()} {platform.platform()}",
             f"python: {sys.executable}"]
    lines += [f"version {k}: {v}" for k, v in sorted((meta.get("versions") or {}).items())]
    lines += [f"env {k}={v}" for k, v in sorted(os.environ.items())
              if k.startswith(("CUBINFORGE_", "CUDA_", "NVIDIA_", "TORCH_", "PYTHONPATH"))]
    smi = _run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,"
                "temperature.gpu,memory.used,memory.total,persistence_mode,compute_mode",
                "--format=csv"])
    if smi:
        lines += ["", "nvidia-smi:", smi]
    if variants:
        lines += ["", "variants (registers, dynamic smem bytes):"]
        for v in variants:
            md = v.metadata
            lines.append(f"  {v.name}: {md.get('registers')} regs, {md.get('dynamic_smem_bytes')} B")
    if extra:
        lines += ["", extra]
    return "\n".join(lines) + "\n"
