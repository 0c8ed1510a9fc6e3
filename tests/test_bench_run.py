"""cubinforge.bench: the run's orchestration with the GPU parts replaced by fakes: every file
is written, exit codes follow the results, and an abort still leaves the files (no GPU)."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_bench_bootstrap", ROOT / "bench" / "_bootstrap.py")
_boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_boot)
_boot.install(ROOT)

from cubinforge.bench import anchors, cli, cold_start, correctness, env, perf, timing  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_bench_report import synthetic_grid  # noqa: E402


class FakeOurs:
    device_arch = "sm_90a"


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    fake_torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_available=lambda: True, get_device_name=lambda i=0: "NVIDIA H200"))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(env, "gpu_and_driver", lambda: ("NVIDIA H200", "580.159"))
    monkeypatch.setattr(env, "versions", lambda: {"python": "3.12"})
    monkeypatch.setattr(timing, "matmul_ceiling", lambda budget_s=1.0: {"n": 8192, "tflops": 780.0})
    monkeypatch.setattr(anchors, "make_backends",
                        lambda names, log=print: ({"ours": FakeOurs(), "cudnn": object()},
                                                  {"flash2": "not here", "fa4": "not importable"}))
    calls = {}

    def sweep(variants, ours, shapes, seed=0, log=print):
        calls["sweep"] = (len(variants), len(shapes))
        recs = [correctness.case_record(variants[0].name, variants[0].name, s, "bf16", 128, False,
                                        {"rel_err": 1e-3, "lse_err": 1e-6, "unwritten": 0})
                for s in shapes]
        return {"records": recs, "unexercised": [], "skipped": []}

    def grid(cells, backends, missing, mm, budget_s=0.3, seed=0, log=print, stop=None,
             on_record=None, interleaved=False):
        calls["grid"] = [c.id for c in cells]
        calls["interleaved"] = interleaved
        recs = []
        for r in synthetic_grid():
            if r["id"] in calls["grid"]:
                recs.append(r)
                on_record(recs)
        return recs

    def cold(dtype, hd, causal, fa4, log=print):
        calls["cold"] = (dtype, hd, causal, fa4)
        return {"ours": {"ok": True, "total_s": 0.7, "after_context_s": 0.2, "phases_s": {}},
                "fa4": None}

    monkeypatch.setattr(correctness, "run_sweep", sweep)
    monkeypatch.setattr(perf, "run_grid", grid)
    monkeypatch.setattr(cold_start, "cold_start", cold)
    home = tmp_path / "home" / "manifests"
    home.mkdir(parents=True)
    for hd in (64, 128):
        (home / f"v{hd}.json").write_text(json.dumps({
            "variant": f"fa3_fwd-sm_90a-bf16-hd{hd}", "family": "fa3_fwd",
            "axes": {"arch": "sm_90a", "dtype": "bf16", "head_dim": hd, "causal": False},
            "metadata": {"registers": 168, "dynamic_smem_bytes": 1000}}))
    monkeypatch.setenv("CUBINFORGE_HOME", str(tmp_path / "home"))
    return calls


def test_full_run_writes_every_file(tmp_path, fakes, capsys):
    out = tmp_path / "out"
    code = cli.main(["--quick", "--out", str(out), "--no-plots", "--seed", "5"], prog="python3 -m bench")
    assert code == cli.EXIT_OK, capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"results.json", "results.csv", "results.md", "env.txt", "verified.json"}
    # Which cubins the sweep checked, for `cubinforge verify import` (issue 16).
    ver = json.loads((out / "verified.json").read_text())
    assert ver["verification_version"] == 1
    res_ran = sorted({c["ran_variant"] or c["variant"] for c in json.loads((out / "results.json").read_text())["correctness"]})
    assert [r["variant"] for r in ver["records"]] == res_ran and res_ran
    assert all(r["result"] == "passed" and r["device"] == "NVIDIA H200" for r in ver["records"])
    res = json.loads((out / "results.json").read_text())
    assert res["command"] == f"python3 -m bench --quick --out {out} --no-plots --seed 5"
    assert res["gpu"] == "NVIDIA H200" and res["matmul_tflops"] == 780.0 and res["seed"] == 5
    assert res["timing"] == "interleaved" and fakes["interleaved"] is True  # the default since check24
    assert res["correctness_summary"]["passed"] == res["correctness_summary"]["cases"] == 6
    assert len(res["grid"]) == 12 and fakes["cold"] == ("bf16", 128, False, False)
    assert fakes["sweep"] == (2, len(correctness.QUICK_SHAPES))
    assert [v["name"] for v in res["variants"]] == ["fa3_fwd-sm_90a-bf16-hd128", "fa3_fwd-sm_90a-bf16-hd64"]
    assert "fa3_fwd-sm_90a-bf16-hd64: 168 regs" in (out / "env.txt").read_text()
    printed = capsys.readouterr().out
    assert "bench: PASS (exit 0)" in printed.splitlines()[-1]


@pytest.mark.parametrize("flag,timing", [(["--timing", "turns"], "turns"), (["--interleaved"], "interleaved")])
def test_timing_flag_reaches_the_grid_and_the_record(tmp_path, fakes, flag, timing):
    """--timing turns times each backend's calls in a row (the grids before check24);
    --interleaved, session 23's opt-in, still parses and means the default."""
    code = cli.main(["--quick", "--out", str(tmp_path), "--no-plots", "--skip", "correctness,cold_start", *flag])
    assert code == cli.EXIT_OK
    assert fakes["interleaved"] is (timing == "interleaved")
    assert json.loads((tmp_path / "results.json").read_text())["timing"] == timing


def test_correctness_failure_exits_1(tmp_path, fakes, monkeypatch, capsys):
    def failing(variants, ours, shapes, seed=0, log=print):
        rec = correctness.case_record("v", "v", shapes[0], "bf16", 128, False,
                                      {"rel_err": 0.5, "lse_err": 0.0, "unwritten": 0})
        return {"records": [rec], "unexercised": [], "skipped": []}
    monkeypatch.setattr(correctness, "run_sweep", failing)
    code = cli.main(["--quick", "--out", str(tmp_path), "--no-plots", "--skip", "grid,cold_start"])
    assert code == cli.EXIT_FAILED
    out = capsys.readouterr().out
    assert "FAIL v b1-q1-k1-h4: rel_err 0.5 > 0.0025" in out and "bench: FAIL" in out


def test_abort_still_writes_files(tmp_path, fakes, monkeypatch, capsys):
    def sticky(*a, **k):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setattr(perf, "run_grid", sticky)
    code = cli.main(["--quick", "--out", str(tmp_path), "--no-plots"])
    assert code == cli.EXIT_ABORTED
    res = json.loads((tmp_path / "results.json").read_text())
    assert "illegal memory access" in res["aborted"]
    assert res["correctness_summary"]["cases"] == 6  # what ran before the abort is kept
    assert "ABORTED" in (tmp_path / "results.md").read_text()


def test_empty_registry_is_an_environment_failure(tmp_path, fakes, monkeypatch, capsys):
    monkeypatch.setenv("CUBINFORGE_HOME", str(tmp_path / "empty"))
    code = cli.main(["--quick", "--out", str(tmp_path / "o"), "--no-plots"])
    assert code == cli.EXIT_ENV
    assert "PROBLEM: no variants in the registry" in capsys.readouterr().out


def test_watchdog_writes_and_exits(tmp_path, monkeypatch):
    import os
    import threading

    exited = threading.Event()
    codes = []

    def fake_exit(code):
        codes.append(code)
        exited.set()
    monkeypatch.setattr(os, "_exit", fake_exit)
    results = {"grid": [], "correctness": [], "gpu": "X"}
    cli._start_watchdog(0.05, results, tmp_path, t0=0.0)
    assert exited.wait(5)
    assert codes == [cli.EXIT_ABORTED]
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["aborted"].startswith("watchdog")
    t = cli._start_watchdog(0.05, {}, tmp_path, t0=0.0)
    t.cancel()


def test_grid_rounds_in_turns_rotate_and_name_a_backend_that_fails(monkeypatch):
    """perf.time_rounds (--timing turns): each round every backend's calls in a row, in its
    context, the order rotating; a backend that fails is named and not timed again."""
    calls = []
    be = {n: types.SimpleNamespace(context=(lambda n=n: _entered(calls, n))) for n in ("ours", "cudnn", "fa4")}
    timed = {n: (be[n], (lambda n=n: n)) for n in be}

    def fake_time_cuda(fn, budget_s):
        assert abs(budget_s - 0.1) < 1e-12
        name = fn()
        calls.append(name)
        if name == "cudnn":
            raise RuntimeError("cudnn refused the shape")
        return types.SimpleNamespace(median_ms=1.0, iters=5)

    monkeypatch.setattr(perf, "time_cuda", fake_time_cuda)
    rec = {"reasons": {}}
    samples = perf.time_rounds(timed, rec, 0.3)
    assert {n: len(v) for n, v in samples.items()} == {"ours": 3, "fa4": 3}
    assert rec["reasons"] == {"cudnn": "RuntimeError: cudnn refused the shape"}
    # Round 0: ours, then cudnn fails; each alone; ours and fa4 again. Rounds 1 and 2 rotated
    # (cudnn, fa4, ours and fa4, ours, cudnn) without cudnn.
    assert [c for c in calls if not c.startswith("enter ")] == [
        "ours", "cudnn", "ours", "cudnn", "fa4", "ours", "fa4", "fa4", "ours", "fa4", "ours"]
    assert calls[0] == "enter ours"  # each call in its backend's context


def _entered(log, name):
    import contextlib

    log.append(f"enter {name}")
    return contextlib.nullcontext()


def test_grid_rounds_interleave_the_backends_and_name_one_that_fails(monkeypatch):
    """perf.time_rounds_interleaved: each round one interleaved run of every backend, rotating
    which leads, in each backend's context; a backend that fails is timed alone to name it, its
    reason recorded and its samples dropped, and the others keep all their rounds, each timed
    together."""
    runs = []

    def fake_interleaved(fns, contexts, budget_s):
        runs.append(list(fns))
        assert all(contexts[n] == timed[n][0].context for n in fns)
        assert abs(budget_s - 0.1 * len(fns)) < 1e-12  # 0.3 s per backend over 3 rounds, as in turns
        if "fa4" in fns and len(runs) > 1:
            raise RuntimeError("fa4 launch failed\nmore")
        return {n: types.SimpleNamespace(median_ms=1.0, iters=5) for n in fns}

    be = {n: types.SimpleNamespace(context=object()) for n in ("ours", "cudnn", "fa4")}
    timed = {n: (be[n], (lambda n=n: n)) for n in be}
    monkeypatch.setattr(timing, "time_interleaved", fake_interleaved)  # through timing.interleaved_timer
    rec = {"reasons": {}}
    samples = perf.time_rounds_interleaved(timed, rec, 0.3)
    # Round 0 whole; round 1 fails, each alone names fa4 and the rest run together again; round 2
    # without it, its place in the rotation kept.
    assert runs == [["ours", "cudnn", "fa4"], ["cudnn", "fa4", "ours"], ["cudnn"], ["fa4"], ["ours"],
                    ["cudnn", "ours"], ["ours", "cudnn"]]
    assert {n: len(v) for n, v in samples.items()} == {"ours": 3, "cudnn": 3}
    assert rec["reasons"] == {"fa4": "RuntimeError: fa4 launch failed"}
