"""The GPU tests' verification log (tests/gpu_verification_log.py, bench/verified.py records_from_gpu_tests /
merge_docs) on the CPU: the plugin's hooks driven by hand around launches through the mocked
driver, then its file read back by the registry's record loader and stamped."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("cuda.bindings.driver")

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import fa_arrays, manifest, registry_source  # noqa: E402

from cubinforge.bench.verified import merge_docs, records_from_gpu_tests  # noqa: E402
from cubinforge.registry.verification import load_records, stamp  # noqa: E402

GPU_TESTS = Path(__file__).parent / "gpu"
PLUGIN = Path(__file__).parent / "gpu_verification_log.py"


def _plugin(monkeypatch, out: Path):
    """tests/gpu_verification_log.py loaded afresh with CUBINFORGE_VERIFIED_OUT=out; every global it
    patches is restored by monkeypatch afterwards."""
    from cubinforge.runtime.launcher import Kernel

    monkeypatch.setenv("CUBINFORGE_VERIFIED_OUT", str(out))
    monkeypatch.setenv("CUBINFORGE_COMMIT", "abc1234")
    monkeypatch.delenv("CUBINFORGE_TEST_SHARD", raising=False)
    monkeypatch.syspath_prepend(str(GPU_TESTS))
    spec = importlib.util.spec_from_file_location("gpu_conftest_under_test", PLUGIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import _helpers

    monkeypatch.setattr(Kernel, "run", Kernel.run)
    monkeypatch.setattr(_helpers, "CHECK_LISTENERS", [])
    monkeypatch.setattr(mod, "_device", lambda: ("NVIDIA H200", "580.159.04"))
    mod.pytest_configure(None)
    return mod, _helpers


def _finish(mod, failed=False, skipped=False):
    for when in ("setup", "call", "teardown"):
        bad = failed and when == "call"
        mod.pytest_runtest_logreport(SimpleNamespace(when=when, failed=bad, skipped=skipped and when == "call"))


def test_checked_launches_become_records_and_a_failing_test_fails_what_it_launched(mock, tmp_path, monkeypatch):
    from cubinforge.runtime import flash_attn_func

    out = tmp_path / "verified.json"
    mod, helpers = _plugin(monkeypatch, out)
    cubins = [b"\x7fELF non-causal", b"\x7fELF causal", b"\x7fELF never checked"]
    ms = [manifest(causal=False, cubin=cubins[0]), manifest(causal=True, cubin=cubins[1]),
          manifest(hd=64, cubin=cubins[2])]
    nc, c, other = (m["variant"] for m in ms)
    with registry_source(tmp_path / "home", ms, cubins) as src:
        def call(causal, hd=128):
            t = fa_arrays(d=hd)
            flash_attn_func(t["q"], t["k"], t["v"], causal=causal, out=t["o"], lse=t["lse"], source=src)

        # a passing test: the non-causal launch is compared, the causal one after the comparison is not
        mod.pytest_runtest_logstart("t::one", None)
        call(False)
        helpers.numerics_checked()
        call(True)
        _finish(mod)
        # a failing test that launched the causal form: it fails, checked or not
        mod.pytest_runtest_logstart("t::two", None)
        call(True)
        helpers.numerics_checked()
        _finish(mod, failed=True)
        # a second passing check of the non-causal form; a skipped test counts for nothing
        mod.pytest_runtest_logstart("t::three", None)
        call(False)
        helpers.numerics_checked()
        _finish(mod)
        mod.pytest_runtest_logstart("t::four", None)
        call(False, hd=64)
        helpers.numerics_checked()
        _finish(mod, skipped=True)
        # launched, never compared: no record
        mod.pytest_runtest_logstart("t::five", None)
        call(False, hd=64)
        _finish(mod)
    assert mod._marker().exists()   # a process that dies before the end leaves it
    mod.pytest_sessionfinish(None, 0)
    assert not mod._marker().exists()
    records = {r["variant"]: r for r in load_records(mod._out_path())}
    assert sorted(records) == sorted([nc, c]) and other not in records
    assert (records[nc]["result"], records[nc]["cases"]) == ("passed", 2)
    assert (records[c]["result"], records[c]["cases"]) == ("failed", 1)
    assert records[nc]["cubin_sha256"] == ms[0]["cubin"]["sha256"]
    assert records[nc]["commit"] == "abc1234" and records[nc]["device"] == "NVIDIA H200"
    assert stamp("fa3_fwd", "sm_90a", ms[0]["cubin"]["sha256"], records.values())["status"] == "verified"
    assert "FAILED" in stamp("fa3_fwd", "sm_90a", ms[1]["cubin"]["sha256"], records.values())["reason"]


def _doc(result, cases, sha="a" * 64, variant="v"):
    key = (variant, sha)
    t = {"outcome": result, "launched": {key: ("fa3_fwd", "sm_90a")}, "checked": [key]}
    return records_from_gpu_tests([t] * cases, device="d", driver="r", commit="c", date="2026-12-04T00:00:00", source="s")


def test_shards_merge_failed_over_passed_and_sum_cases():
    merged = merge_docs([_doc("passed", 2), _doc("passed", 3)])["records"]
    assert [(r["result"], r["cases"]) for r in merged] == [("passed", 5)]
    assert merged[0]["source"].startswith("s: 5 test(s) compared it")   # the summed count, not a shard's
    merged = merge_docs([_doc("passed", 2), _doc("failed", 1), _doc("passed", 1)])["records"]
    assert [(r["result"], r["cases"]) for r in merged] == [("failed", 1)]
    # another cubin of the same variant (a rebuild) keeps its own record
    merged = merge_docs([_doc("passed", 1), _doc("passed", 1, sha="b" * 64)])["records"]
    assert len(merged) == 2


def test_a_candidate_with_the_shipped_name_keeps_its_own_record():
    # An A/B candidate's cubin has the shipped variant's name: a failing run of one must not
    # be booked to the other's sha256, nor a passing one vouch for it.
    shipped, candidate = ("v", "a" * 64), ("v", "b" * 64)
    tests = [{"outcome": "passed", "launched": {shipped: ("fa3_fwd", "sm_90a")}, "checked": [shipped]},
             {"outcome": "failed", "launched": {candidate: ("fa3_fwd", "sm_90a")}, "checked": [candidate]}]
    records = records_from_gpu_tests(tests, device="d", driver="r", commit="c", date="2026-12-04T00:00:00",
                                     source="s")["records"]
    assert {(r["cubin_sha256"], r["result"]) for r in records} == {("a" * 64, "passed"), ("b" * 64, "failed")}
    # a manifest with no sha256 sorts beside the others rather than stopping the file being written
    unknown = ("v", None)
    tests.append({"outcome": "passed", "launched": {unknown: ("fa3_fwd", "sm_90a")}, "checked": [unknown]})
    records = records_from_gpu_tests(tests, device="d", driver="r", commit="c", date="2026-12-04T00:00:00",
                                     source="s")["records"]
    assert [r["cubin_sha256"] for r in records] == [None, "a" * 64, "b" * 64]


def test_an_unset_log_patches_nothing(monkeypatch):
    from cubinforge.runtime.launcher import Kernel

    monkeypatch.delenv("CUBINFORGE_VERIFIED_OUT", raising=False)
    monkeypatch.syspath_prepend(str(GPU_TESTS))
    spec = importlib.util.spec_from_file_location("gpu_conftest_unset", PLUGIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    run = Kernel.run
    mod.pytest_configure(None)
    assert Kernel.run is run
