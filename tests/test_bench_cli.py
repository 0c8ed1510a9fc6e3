"""cubinforge.bench: the command line from a plain checkout, its loud failures without a GPU,
the cold-start and ncu plumbing, and the torch-free DLPack arrays (no GPU)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_bench_bootstrap", ROOT / "bench" / "_bootstrap.py")
_boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_boot)
_boot.install(ROOT)

from cubinforge.bench import cli  # noqa: E402
from cubinforge.bench import cold_start as CS  # noqa: E402
from cubinforge.bench import ncu as N  # noqa: E402
from cubinforge.bench import readme as RM  # noqa: E402
from cubinforge.bench import report as R  # noqa: E402

FOLDERS = ("cubinforge", "bench", "runtime", "generator", "registry", "service")


@pytest.fixture
def checkout(tmp_path):
    """A copy of the repository's package folders: no pip install, no .venv, no .git."""
    dst = tmp_path / "checkout"
    for f in FOLDERS:
        if (ROOT / f).is_dir():
            shutil.copytree(ROOT / f, dst / f, ignore=shutil.ignore_patterns("__pycache__", "results"))
    return dst


def bare_python(args, cwd, **kw):
    """The interpreter with no site-packages (-S: no editable install, no numpy), no user site
    (-s) and no PYTHON* variables (-E)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-E", "-s", "-S", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, **kw)


def test_help_from_a_plain_checkout(checkout):
    p = bare_python(["-m", "bench", "--help"], checkout)
    assert p.returncode == 0, p.stderr
    assert "usage: python3 -m bench" in p.stdout and "--cells" in p.stdout and "--ncu" in p.stdout
    p = bare_python(["-m", "bench", "readme", "--help"], checkout)
    assert p.returncode == 0, p.stderr
    assert "results:begin" in p.stdout


def test_bootstrap_maps_the_checkout(checkout):
    code = ("import sys; sys.path.insert(0, '.'); from bench._bootstrap import install; install('.');"
            "import cubinforge.bench.cli, cubinforge.runtime.errors as e, cubinforge;"
            "print(cubinforge.bench.cli.__file__); print(e.__file__); print(cubinforge.__file__)")
    p = bare_python(["-c", code], checkout)
    assert p.returncode == 0, p.stderr
    files = p.stdout.split()
    assert files[0] == str(checkout / "bench" / "cli.py")
    assert files[1] == str(checkout / "runtime" / "errors.py")
    assert files[2] == str(checkout / "cubinforge" / "__init__.py")


def test_run_without_torch_fails_loudly(checkout):
    p = bare_python(["-m", "bench", "--quick"], checkout)
    assert p.returncode == cli.EXIT_ENV
    assert "FATAL" in p.stderr and "torch" in p.stderr


def test_unknown_step_or_backend():
    assert cli.main(["--skip", "everything"]) == cli.EXIT_ENV
    assert cli.main(["--backends", "ours,triton"]) == cli.EXIT_ENV


def test_cells_from_args():
    ap = cli.run_parser("x")
    assert len(cli.cells_from_args(ap.parse_args([]))) == 36
    assert len(cli.cells_from_args(ap.parse_args(["--quick"]))) == 12
    a = ap.parse_args(["--head-dims", "128", "--causal", "1", "--seqlens", "1k,16k", "--gqa", "1,8"])
    assert [c.id for c in cli.cells_from_args(a)] == [
        "bf16-hd128-s1024-causal", "bf16-hd128-s16384-causal",
        "bf16-hd128-s1024-gqa8-causal", "bf16-hd128-s16384-gqa8-causal"]
    a = ap.parse_args(["--cells", "hd64-s512-full,hd256-s16384-causal"])
    assert len(cli.cells_from_args(a)) == 2
    assert len(cli.cells_from_args(ap.parse_args(["--decode", "--head-dims", "64"]))) == 12 + 12
    assert cli.find_cell("bf16-hd128-s4096-full").batch == 4
    with pytest.raises(ValueError):
        cli.find_cell("bf16-hd100-s1-full")


def test_readme_subcommand(tmp_path, capsys):
    d = tmp_path / "results" / "2026-11-29-h200"
    d.mkdir(parents=True)
    R.write_json({"gpu": "NVIDIA H200", "date": "2026-11-29", "command": "python3 -m bench",
                  "grid": [], "correctness_summary": {"cases": 3, "passed": 3}}, d / "results.json")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    assert cli.main(["readme", "--readme", str(readme), "--results-root", str(tmp_path / "results")]) == 0
    assert RM.BEGIN in readme.read_text() and "3 of 3 cases passed" in readme.read_text()
    assert cli.main(["readme", "--readme", str(readme), "--results", str(d)]) == 0
    assert cli.main(["readme", "--readme", str(readme), "--results-root", str(tmp_path / "no")]) == cli.EXIT_ENV


# ----------------------------------------------------------------------------- cold start

def test_summarize_child():
    res = {"ok": True, "stamps": {"t_start": 100.05, "t_context": 100.45, "t_import": 100.5,
                                  "t_inputs": 100.55, "t_done": 100.65}}
    s = CS.summarize_child(res, t_spawn=100.0)
    assert s["total_s"] == pytest.approx(0.65)
    assert s["after_context_s"] == pytest.approx(0.20)
    assert s["phases_s"]["python_start"] == pytest.approx(0.05)
    assert s["phases_s"]["context"] == pytest.approx(0.40)
    assert s["phases_s"]["first_call"] == pytest.approx(0.10)
    assert "stamps" not in s
    partial = CS.summarize_child({"ok": False, "stamps": {"t_start": 1.0}, "error": "context: x"}, 0.5)
    assert partial["total_s"] is None and partial["after_context_s"] is None


def test_parse_child_output():
    out = "some log\n{\"ok\": true, \"x\": 1}\n"
    assert CS.parse_child_output(out) == {"ok": True, "x": 1}
    assert CS.parse_child_output("no json here\n{broken") == {}


def test_cold_children_report_failure_as_json():
    """Without a GPU the child must still answer: a JSON line naming the phase that failed."""
    res = CS.run_child("_cold_ours.py", CS.shape_args("bf16", 128, False) + ["--arrays", "raw"],
                       timeout_s=60)
    assert res["ok"] is False
    assert res.get("error", "").startswith(("context:", "import:")), res
    assert res["returncode"] == 1
    assert res["phases_s"]["python_start"] >= 0
    fa4 = CS.run_child("_cold_fa4.py", CS.shape_args("bf16", 128, False), timeout_s=60)
    assert fa4["ok"] is False and fa4["error"]


# ----------------------------------------------------------------------------- ncu plumbing

QUERY = """Device NVIDIA H200 (GH100)
------------------------------------------------------------------------
Metric Name                                     Metric Description
dram__bytes                                     # of bytes accessed in DRAM
gpu__time_duration                              total duration in nanoseconds
sm__inst_executed_pipe_tensor_op_gmma           # of warp instructions executed by tensor pipe (GMMA)
sm__pipe_tensor_op_gmma_cycles_active           # of cycles where tensor pipe (GMMA) was active
sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on  sparse
smsp__inst_executed_op_utmaldg                  # of UTMALDG instructions
sm__throughput                                  SM throughput
l1tex__t_bytes                                  bytes
"""

RAW = '''==PROF== Connected to process 123
"ID","Process ID","Kernel Name","gpu__time_duration.sum","sm__inst_executed_pipe_tensor_op_gmma.sum"
"","","","nsecond","inst"
"0","123","kernel_fa3_fwd","3,104","1,048,576"
==PROF== Disconnected
'''


def test_ncu_varlen_profiles_both_backends_by_kernel_name_in_the_torch_child():
    cell = N.Shape("bf16", 256, 256, True, 1, 16, 0, varlen=True)
    assert cell.id == "bf16-hd256-varlen16-causal"
    for backend in ("ours", "fa4"):
        filters, cmd = N.target_command(backend, cell)
        assert filters[0] == "--kernel-name" and cmd[1].endswith("_ncu_torch_child.py")
        assert "--varlen" in cmd and cmd[cmd.index("--backend") + 1] == backend
        assert cmd[cmd.index("--head-dim") + 1] == "256" and cmd[cmd.index("--causal") + 1] == "1"
    dense = N.Shape("bf16", 256, 256, True, 1, 16, 4096)
    assert "--varlen" not in N.target_command("fa4", dense)[1]
    assert N.target_command("ours", dense)[1][1].endswith("_cold_ours.py")


def test_ncu_metric_choice():
    names = N.metric_names(QUERY)
    assert "dram__bytes" in names and "Metric" not in names
    chosen = N.choose_metrics(names)
    assert "gpu__time_duration.sum" in chosen
    assert "sm__inst_executed_pipe_tensor_op_gmma.sum" in chosen
    assert "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active" in chosen
    assert "smsp__inst_executed_op_utmaldg.sum" in chosen
    assert "sm__throughput.avg.pct_of_peak_sustained_active" in chosen
    assert not any("sparsity" in m or m.startswith(("dram", "l1tex")) for m in chosen)
    assert N.choose_metrics([]) == list(N.FALLBACK)


def test_ncu_csv_parse():
    v = N.parse_raw_csv(RAW)
    assert v["Kernel Name"] == "kernel_fa3_fwd"
    assert v["gpu__time_duration.sum (nsecond)"] == "3,104"
    assert v["sm__inst_executed_pipe_tensor_op_gmma.sum (inst)"] == "1,048,576"
    assert N.parse_raw_csv("==ERROR== no kernels were profiled") == {}


# ----------------------------------------------------------------------------- DLPack arrays

def test_devarray_capsule_is_what_the_runtime_reads():
    arrays = pytest.importorskip("cubinforge.runtime.arrays")
    from cubinforge.bench.devarray import DeviceArray

    class NoDriver(DeviceArray):
        def __dlpack_device__(self):
            return (2, 0)

    a = object.__new__(NoDriver)  # no cuMemAlloc: fill the fields a capsule needs
    a.shape, a.dtype, a.ptr, a._keep = (2, 3, 4, 64), "bf16", 0x7F0000001000, []
    a.strides_elems = (3 * 4 * 64, 4 * 64, 64, 1)
    cap = a.__dlpack__(stream=1, max_version=(1, 0))
    got = arrays.parse_dlpack_capsule(cap, producer=a)
    assert got.ptr == 0x7F0000001000 and got.shape == (2, 3, 4, 64)
    assert got.strides == (768, 256, 64, 1) and got.dtype == "bf16" and got.device == 0
    with pytest.raises(AttributeError):
        a.__cuda_array_interface__  # noqa: B018 - bf16 has no CAI typestr


def test_ncu_picks_stall_reasons_as_ratios():
    names = N.metric_names(QUERY + "smsp__average_warps_issue_stalled_barrier_per_issue_active  stalls\n"
                           "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active  stalls\n")
    chosen = N.choose_metrics(names)
    assert "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio" in chosen
    assert "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio" in chosen
    # More tensor/TMA names than the cap (as the H200's ncu lists) leave the stalls in.
    many = [f"sm__inst_executed_pipe_tensor_op_x{i}" for i in range(2 * N.MAX_METRICS)]
    chosen = N.choose_metrics(many + names)
    assert len(chosen) == N.MAX_METRICS
    assert "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio" in chosen


FAKE_NCU = r'''#!/usr/bin/env python3
import sys
args = sys.argv[1:]
if args == ["--query-metrics"]:
    print(open(sys.argv[0] + ".query").read())
    sys.exit(0)
target = " ".join(args)
if "--backend cudnn" in target:
    print("==ERROR== No kernels were profiled.", file=sys.stderr)
    sys.exit(1)
name = "kernel_flash_fwd_sm90" if "--backend fa4" in target else "kernel_cubinforge_FlashFwdSm90"
print('"ID","Process ID","Kernel Name","gpu__time_duration.sum",'
      '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"')
print('"","","","nsecond",""')
print(f'"0","1","{name}","{3000 if "fa4" in target else 3100}","0.5"')
'''


def test_ncu_profiles_each_backend_and_the_report_sets_them_side_by_side(tmp_path, monkeypatch):
    from cubinforge.bench.grid import fa3_cell
    from cubinforge.bench.report import ncu_section

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ncu").write_text(FAKE_NCU)
    (bindir / "ncu").chmod(0o755)
    (bindir / "ncu.query").write_text(QUERY + "smsp__average_warps_issue_stalled_barrier_per_issue_active  x\n")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    cell = fa3_cell("bf16", 128, 8192, False)
    res = N.run_ncu(cell, tmp_path, log=lambda *a: None)
    b = res["backends"]
    assert b["ours"]["kernel"] == "kernel_cubinforge_FlashFwdSm90"
    assert b["fa4"]["kernel"] == "kernel_flash_fwd_sm90"
    assert "--kernel-name regex:flash_fwd" in b["fa4"]["command"]
    assert b["cudnn"]["skipped"].startswith("ncu gave no metrics")
    assert "skipped" not in res  # two of three ran
    text = ncu_section({"ncu": res})
    assert "| metric | ours | fa4 |" in text
    assert "| gpu__time_duration.sum (nsecond) | 3100 | 3000 |" in text
    assert "cudnn: skipped" in text
    assert (tmp_path / "ncu.txt").read_text().count("$ ") == 3
