"""On a GPU machine (`make device-test`): the C++ loader against the real driver. A probe kernel
with the fa3_fwd parameter layout (runtime/cpp/tests/gpu_probe/probe.cu) writes back every
parameter byte it received and the launch it saw; the host (probe_host.cpp) loads it through a
rendered bundle (cubin file and embedded), launches it with the loader (tensor maps from
cuTensorMapEncodeTiled, a 2x1x1 cluster, 164,864 B of dynamic smem) and compares."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

PROBE = harness.CPP / "tests" / "gpu_probe"


def _has_sm90_driver() -> bool:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    major, minor, dev = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0:
        return False
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # COMPUTE_CAPABILITY_MAJOR
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # COMPUTE_CAPABILITY_MINOR
    return (major.value, minor.value) == (9, 0)


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(harness.missing_tools("nvcc", "g++") is not None,
                       reason=f"C++ GPU probe: {harness.missing_tools('nvcc', 'g++')}"),
    pytest.mark.skipif(not _has_sm90_driver(), reason="C++ GPU probe: needs an sm_90 GPU and libcuda.so.1"),
]


@pytest.mark.parametrize("embed", [False, True], ids=["cubin-file", "embedded"])
def test_probe_receives_exactly_what_the_loader_packed(tmp_path: Path, embed: bool):
    cubin = tmp_path / "probe.cubin"
    harness.run(["nvcc", "-cubin", "-arch=sm_90a", "-O2", PROBE / "probe.cu", "-o", cubin])
    bundle = tmp_path / "bundle"
    harness.run([sys.executable, PROBE / "make_bundle.py", cubin, bundle] + (["--embed"] if embed else []))
    exe = tmp_path / "probe"
    harness.run([shutil.which("g++"), "-std=c++17", "-O2", f"-I{harness.INCLUDE}", f"-I{bundle}",
                 f"-I{harness.cuda_include()}", PROBE / "probe_host.cpp", "-o", exe, "-l:libcuda.so.1"])
    proc = subprocess.run([str(exe), str(bundle)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "PROBE OK" in proc.stdout, proc.stdout + proc.stderr
