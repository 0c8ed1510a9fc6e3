"""Shared fixtures: a temporary CUBINFORGE_HOME, test kernel families, a built demo registry."""

from __future__ import annotations

import importlib.util

import pytest

from cubinforge.generator import families, spec

# The lent GPU machine runs `make device-test` from a plain checkout without the build and
# server extras: leave out the CPU suites that import them there instead of erroring at
# collection. Where the extras are installed (CI, `make test`) nothing is left out.
_NEEDS = {
    "test_registry.py": ("sqlalchemy",), "test_build_pipeline.py": ("sqlalchemy", "elftools"),
    "test_cubin_elf.py": ("elftools",), "test_cli.py": ("sqlalchemy", "elftools"),
    "test_client_remote.py": ("sqlalchemy", "fastapi"), "test_service_*.py": ("sqlalchemy", "fastapi"),
    "test_fp8_attention.py": ("sqlalchemy",), "test_fp8_quant.py": ("sqlalchemy",),
    "test_build_order.py": ("sqlalchemy",), "test_sass_batch.py": ("sqlalchemy", "elftools"),
    "test_wgmma_serialized.py": ("sqlalchemy", "elftools"), "test_gpu_verification_log.py": ("sqlalchemy",),
}
# CUBINFORGE_VERIFIED_OUT=FILE: verification records of what the GPU tests checked (the plugin says how).
pytest_plugins = ("gpu_verification_log",)
collect_ignore_glob = [
    pattern for pattern, mods in _NEEDS.items()
    if any(importlib.util.find_spec(m) is None for m in mods)
]
from cubinforge.generator.families import Family


def module_available(name: str) -> bool:
    """Whether `name` can be imported, without importing it; a finder that refuses it (as a
    machine without the CuTe DSL may) counts as absent."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False

TEST_FAMILIES = [
    Family(name="demo_badcontract", template="demo_scale_variant.py.j2", package="fixture_kernels.bad_contract",
           config_class="DemoConfig", supported={"arch": ("sm_90a",), "dtype": ("bf16",)},
           config_axes=("arch", "dtype"), in_all=False),
    Family(name="demo_flaky", template="demo_scale_variant.py.j2", package="fixture_kernels.flaky",
           config_class="DemoConfig", supported={"arch": ("sm_90a",), "dtype": ("bf16", "fp16")},
           config_axes=("arch", "dtype"), in_all=False),
    Family(name="demo_wide", template="demo_scale_variant.py.j2", package="fixture_kernels.wide",
           config_class="WideConfig",
           supported={"arch": ("sm_90a",), "dtype": ("bf16", "fp16"), "head_dim": (64, 96, 128, 192, 256),
                      "causal": (False, True)},
           config_axes=("arch", "dtype", "head_dim", "causal"), in_all=False),
]


@pytest.fixture
def mock():
    """bench/host_overhead's mocked CUDA driver, installed for one test (the runtime's CPU
    tests of the launch path); modules using it importorskip cuda.bindings themselves."""
    from cubinforge.bench.host_overhead import MockDriver

    m = MockDriver().install()
    yield m
    m.uninstall()


@pytest.fixture
def home(tmp_path, monkeypatch):
    path = tmp_path / "cfhome"
    monkeypatch.setenv("CUBINFORGE_HOME", str(path))
    monkeypatch.delenv("CUBINFORGE_DATABASE_URL", raising=False)
    return path


@pytest.fixture
def test_families():
    saved_families, saved_sets = dict(families.FAMILIES), dict(spec.SETS)
    for fam in TEST_FAMILIES:
        families.register_family(fam)
        spec.SETS[fam.name] = [(fam.name, {a: spec.ALL for a in fam.axes})]
    yield {f.name: f for f in TEST_FAMILIES}
    families.FAMILIES.clear()
    families.FAMILIES.update(saved_families)
    spec.SETS.clear()
    spec.SETS.update(saved_sets)


@pytest.fixture(scope="session")
def demo_registry(tmp_path_factory):
    """The demo set (sm_90a and sm_100a, bf16 and fp16) really compiled, once per session."""
    from cubinforge.generator import build
    from cubinforge.registry import Registry

    reg = Registry(home=tmp_path_factory.mktemp("demo-home"))
    outcomes = build.build(spec.select("demo"), reg, jobs=2, progress=False)
    failed = [o for o in outcomes if o.status != "built"]
    assert not failed, build.summary(outcomes)
    return reg


def pytest_collection_modifyitems(config, items):
    """CUBINFORGE_TEST_SHARD="i/n" keeps every n-th collected test from the i-th: the GPU
    checks' float64 references are CPU-bound, so the H200 run (bench/h200_check.sh
    GPU_SHARDS) spreads them over parallel processes sharing one GPU."""
    import os

    shard = os.environ.get("CUBINFORGE_TEST_SHARD")
    if not shard:
        return
    try:
        i, n = (int(x) for x in shard.split("/"))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"CUBINFORGE_TEST_SHARD must be 'i/n' with 0 <= i < n; got {shard!r}") from None
    keep = [item for k, item in enumerate(items) if k % n == i]
    config.hook.pytest_deselected(items=[item for k, item in enumerate(items) if k % n != i])
    items[:] = keep
