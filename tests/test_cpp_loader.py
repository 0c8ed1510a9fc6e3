"""The C++ loader's pure parts (runtime/cpp/tests/test_loader.cpp): RPN evaluation, binding and
validation messages, parameter packing at the contract's offsets, tensor-map requests, launch
configuration, variant selection. Compiled against a bundle rendered from hand-written
manifests and linked with a stub libcuda: no GPU, no driver."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

pytestmark = pytest.mark.skipif(harness.missing_tools("g++") is not None,
                                reason=f"C++ loader tests: {harness.missing_tools('g++')}")


@pytest.fixture(scope="module")
def stub(tmp_path_factory) -> Path:
    return harness.build_stub(tmp_path_factory.mktemp("stub"))


@pytest.mark.parametrize("embed", [False, True], ids=["cubin-files", "embedded"])
def test_pure_parts(tmp_path: Path, stub: Path, embed: bool):
    bundle = harness.render_sample(tmp_path / "bundle", embed=embed)
    exe = tmp_path / "test_loader"
    harness.run([shutil.which("g++"), "-std=c++17", "-O1", "-Wall", "-Wextra", "-pedantic", "-Werror",
                 f"-I{harness.INCLUDE}", f"-I{bundle}", f"-I{harness.cuda_include()}",
                 harness.UNIT_TEST_SOURCE, "-o", exe, f"-L{stub.parent}", "-lcuda", f"-Wl,-rpath,{stub.parent}"])
    proc = harness.run([exe])
    assert " 0 failures" in proc.stdout, proc.stdout
    print(proc.stdout.strip())


def test_headers_compile_standalone(tmp_path: Path):
    """Each header includes what it uses (one concern per header, usable alone)."""
    headers = sorted((harness.INCLUDE / "cubinforge").glob("*.h"))
    assert {h.name for h in headers} >= {"status.h", "expr.h", "contract.h", "tensor.h", "tensormap.h",
                                         "params.h", "launch.h", "select.h", "module.h"}
    for h in headers:
        one = tmp_path / f"{h.stem}.cpp"
        one.write_text(f'#include "cubinforge/{h.name}"\n')
        harness.run([shutil.which("g++"), "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-pedantic", "-Werror",
                     f"-I{harness.INCLUDE}", f"-I{harness.cuda_include()}", one])
