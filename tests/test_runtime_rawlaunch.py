"""runtime/rawlaunch.py: the launch replay through libcuda by ctypes. Under the bench's fake
driver (bench/host_overhead.py) with a C library standing in for libcuda's two entry points
(it records what it was passed, and can fail or report another context): a repeated call
launches through it with the launch config's own C struct, the function and the kernelParams
array; another current context or a failed launch falls back to the bindings path (which
then launches, or raises the usual CudaError); with the bindings replaced (a fake driver) and
no library chosen it stays off."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import fa_arrays, manifest, write_registry  # noqa: E402

from cubinforge.bench.host_overhead import MockDriver  # noqa: E402
from cubinforge.runtime import CudaError, LocalSource, clear_cache, flash_attn_func, launch_count  # noqa: E402
from cubinforge.runtime import rawlaunch  # noqa: E402
from cubinforge.runtime.attention import plan_attention  # noqa: E402

CUBIN = b"\x7fELF not really"
FAKE = r"""
typedef void *CUcontext;
void *ctx = (void *)0xC0C0;           /* the mock driver's context */
int launch_rc = 0, launches = 0;
const void *last_cfg; void *last_fn; void **last_params; void **last_extra;
int cuCtxGetCurrent(CUcontext *c) { *c = ctx; return 0; }
int cuLaunchKernelEx(const void *cfg, void *f, void **params, void **extra) {
  last_cfg = cfg; last_fn = f; last_params = params; last_extra = extra; ++launches; return launch_rc;
}
"""


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    d = tmp_path_factory.mktemp("fake_raw")
    (d / "fake.c").write_text(FAKE)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", str(d / "fake.c"), "-o", str(d / "libfake.so")], check=True)
    return d / "libfake.so"


@pytest.fixture
def env(tmp_path, fake_lib):
    write_registry(tmp_path, [manifest(dtype=dt, hd=128, causal=True, cubin=CUBIN) for dt in ("bf16", "fp16")], [CUBIN])
    clear_cache()
    m = MockDriver().install()
    rawlaunch.use_library(str(fake_lib))
    lib = ctypes.CDLL(str(fake_lib))
    for n in ("launch_rc", "launches"):
        ctypes.c_int.in_dll(lib, n).value = 0
    ctypes.c_void_p.in_dll(lib, "ctx").value = 0xC0C0
    yield m, lib, LocalSource(tmp_path)
    rawlaunch.use_library("auto")
    m.uninstall()
    clear_cache()


def _get(lib, name, kind=ctypes.c_void_p):
    return kind.in_dll(lib, name).value


def test_a_repeated_launch_goes_through_the_library_with_the_prepared_arguments(env):
    mock, lib, source = env
    t = fa_arrays()
    plan = plan_attention(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], causal=True, stream=0x77, source=source)
    plan.launch()                                        # the first two: through the bindings (the
    plan.launch()                                        # first loads the module in the context)
    assert mock.counts["cuLaunchKernelEx"] == 2 and _get(lib, "launches", ctypes.c_int) == 0
    cfg, fn, params = mock.last_launch
    mock.counts.clear()
    before = launch_count()
    for _ in range(3):
        plan.launch()
    assert _get(lib, "launches", ctypes.c_int) == 3 and launch_count() == before + 3
    assert dict(mock.counts) == {}                       # nothing through the bindings
    assert _get(lib, "last_cfg") == cfg.getPtr() and _get(lib, "last_fn") == int(fn)
    assert _get(lib, "last_params") == params and _get(lib, "last_extra") is None


def test_another_context_or_a_failed_launch_falls_back_to_the_bindings(env):
    mock, lib, source = env
    t = fa_arrays()
    call = dict(q=t["q"], k=t["k"], v=t["v"], out=t["o"], lse=t["lse"], causal=True, source=source)
    for _ in range(3):
        flash_attn_func(**call)
    assert _get(lib, "launches", ctypes.c_int) == 1
    ctypes.c_void_p.in_dll(lib, "ctx").value = 0xBEEF   # another context is current: not replayed
    mock.counts.clear()
    flash_attn_func(**call)
    assert _get(lib, "launches", ctypes.c_int) == 1 and mock.counts["cuLaunchKernelEx"] == 1
    ctypes.c_void_p.in_dll(lib, "ctx").value = 0xC0C0
    flash_attn_func(**call)                              # the bindings launch rebuilt the fast path...
    flash_attn_func(**call)
    assert _get(lib, "launches", ctypes.c_int) == 3
    ctypes.c_int.in_dll(lib, "launch_rc").value = 719    # ...and its launch fails:
    mock.counts.clear()
    flash_attn_func(**call)                              # the bindings launch again, and succeed
    assert mock.counts["cuLaunchKernelEx"] == 1
    mock.launch_error = mock.d.CUresult.CUDA_ERROR_LAUNCH_FAILED   # both fail: the bindings' error
    with pytest.raises(CudaError, match="cuLaunchKernelEx"):
        flash_attn_func(**call)


def test_off_under_a_fake_driver_unless_a_library_is_chosen(env):
    mock, _lib, _src = env
    rawlaunch.use_library("auto")
    assert rawlaunch.available(mock.d) is None           # the bindings' functions are the mock's
    rawlaunch.use_library(None)
    assert rawlaunch.available(mock.d) is None


@pytest.mark.parametrize("raw", ["auto", "off"])
def test_bench_times_the_real_bindings_against_a_fake_libcuda(raw):
    """bench/host_overhead.py --mock --fake-libcuda (in a child: it loads a libcuda.so.1): the
    replay's two calls reach the fake library, through ctypes or the real bindings, not the
    Python fakes."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("needs a C compiler")
    import json
    proc = subprocess.run([sys.executable, "-m", "cubinforge.bench.host_overhead", "--mock", "--fake-libcuda",
                           "--raw", raw, "--kinds", "plan,floor,pyref", "--iters", "300", "--repeats", "1", "--json"],
                          capture_output=True, text=True, timeout=300)
    if "holds no fa3_fwd variants" in proc.stderr or "VariantNotFound" in proc.stderr:
        pytest.skip("no kernels in .cubinforge (make kernels ARCH=sm90)")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["plan"]["median_us"] > 0
    assert "cuLaunchKernelEx" not in res["plan:driver_calls_per_call"]   # not the Python fake's
    assert res["pyref"]["median_us"] > 0
    # floor: the replay's launch alone, through ctypes; with the replay off there is none.
    if raw == "auto":
        assert res["floor"]["median_us"] > 0 and not res["floor:driver_calls_per_call"]
    else:
        assert "ctypes launch replay" in res["skipped"]["floor"]


def test_the_bench_floor_replay_keeps_the_plan_its_arguments_point_into(env, monkeypatch, tmp_path):
    """bench/host_overhead.py's `floor` launches with raw addresses (the launch config's C struct,
    the kernelParams array): the plan owning them must live as long as the replay does. It did
    not (the plan was dropped when _floor_call returned), and on the H200 the replay read freed
    memory: an illegal instruction at the next sync, one run in three."""
    import gc
    import weakref

    from cubinforge.bench import host_overhead as ho

    mock, lib, source = env
    monkeypatch.setenv("CUBINFORGE_HOME", str(tmp_path))
    monkeypatch.delenv("CUBINFORGE_REGISTRY_URL", raising=False)
    floor = ho._floor_call(fa_arrays(), 0x77, True)
    owner = weakref.ref(floor.plan._plan)     # the launcher plan: buffers, pointers, config
    gc.collect()
    assert owner() is not None
    launches = _get(lib, "launches", ctypes.c_int)
    floor()
    assert _get(lib, "launches", ctypes.c_int) == launches + 1
    assert _get(lib, "last_params") == owner().pointers._addr
    assert _get(lib, "last_cfg") == owner().fast[2].getPtr()
    ctypes.c_int.in_dll(lib, "launch_rc").value = 1
    with pytest.raises(RuntimeError, match="floor replay"):
        floor()
