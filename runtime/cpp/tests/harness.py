"""What tests/test_cpp_*.py share: finding the toolchain, building the stub libcuda, rendering
the sample bundle. No GPU and no driver are needed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CPP = REPO / "runtime" / "cpp"
INCLUDE = CPP / "include"
STUB_SOURCE = CPP / "stub" / "cuda_stub.c"
UNIT_TEST_SOURCE = CPP / "tests" / "test_loader.cpp"
EXAMPLE = REPO / "examples" / "cpp"


def cuda_include() -> Path | None:
    """The toolkit's include directory (cuda.h), from CUDA_HOME/CUDA_PATH, nvcc, or /usr/local/cuda."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if c and (Path(c) / "include" / "cuda.h").is_file():
            return Path(c) / "include"
    return None


def missing_tools(*tools: str) -> str | None:
    """A skip reason naming what is missing, or None."""
    missing = [t for t in tools if shutil.which(t) is None]
    if cuda_include() is None:
        missing.append("cuda.h (set CUDA_HOME)")
    return f"needs {', '.join(missing)}" if missing else None


def run(cmd: list, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def build_stub(out_dir: Path) -> Path:
    """libcuda.so from runtime/cpp/stub/cuda_stub.c: every call says there is no device."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / "libcuda.so"
    cc = shutil.which("gcc") or shutil.which("cc") or "g++"
    lang = ["-x", "c"] if Path(cc).name.endswith("++") else []
    # soname libcuda.so.1, as the driver's: a binary linked here loads the real driver elsewhere.
    run([cc, "-shared", "-fPIC", "-O1", *lang, f"-I{cuda_include()}", STUB_SOURCE, "-o", lib,
         "-Wl,-soname,libcuda.so.1"])
    versioned = out_dir / "libcuda.so.1"  # what the binaries ask the loader for
    if not versioned.exists():
        versioned.symlink_to(lib.name)
    return lib


def render_sample(out_dir: Path, embed: bool) -> Path:
    import sys
    sys.path.insert(0, str(CPP / "tests"))
    from sample_manifests import sample_bundle  # noqa: E402

    from cubinforge.generator.cpp_bundle import render_cpp_bundle

    manifests, blobs = sample_bundle()
    render_cpp_bundle(manifests, blobs, out_dir, embed=embed)
    return out_dir


def skip_unless_bundle_tools() -> None:
    """Skip the calling test where build_bundle_program cannot run: no g++ or cuda.h, or no
    jinja2 (the build extra) to render the bundle."""
    import pytest

    missing = missing_tools("g++")
    if missing:
        pytest.skip(f"C++ loader: {missing}")
    pytest.importorskip("jinja2", reason="rendering the C++ bundle needs the build extra")


def build_bundle_program(tmp: Path, made: list, program: str) -> Path:
    """The test program runtime/cpp/tests/<program>.cpp built against a bundle of `made`
    ((manifest, cubin) pairs, rendered into tmp/bundle, cubins beside it) and the stub libcuda
    (tmp/stub): the executable, tmp/<program>."""
    from cubinforge.generator.cpp_bundle import render_cpp_bundle

    stub = build_stub(tmp / "stub")
    render_cpp_bundle([m for m, _ in made], {m["cubin"]["sha256"]: c for m, c in made}, tmp / "bundle", embed=False)
    exe = tmp / program
    run([shutil.which("g++"), "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror",
         f"-I{INCLUDE}", f"-I{tmp / 'bundle'}", f"-I{cuda_include()}", CPP / "tests" / f"{program}.cpp",
         "-o", exe, f"-L{stub.parent}", "-lcuda", f"-Wl,-rpath,{stub.parent}"])
    return exe
