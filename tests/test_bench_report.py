"""cubinforge.bench: results.{json,csv,md}, the plots and the README section, from synthetic
numbers (no GPU). The plot tests need matplotlib and skip without it."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_bench_bootstrap", ROOT / "bench" / "_bootstrap.py")
_boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_boot)
_boot.install(ROOT)

from cubinforge.bench import correctness as C  # noqa: E402
from cubinforge.bench import grid as G  # noqa: E402
from cubinforge.bench import perf as P  # noqa: E402
from cubinforge.bench import plots as PL  # noqa: E402
from cubinforge.bench import readme as RM  # noqa: E402
from cubinforge.bench import report as R  # noqa: E402
from cubinforge.bench.env import default_out_dir, gpu_slug  # noqa: E402

MATMUL = 780.0


def synthetic_grid() -> list[dict]:
    recs = []
    for i, cell in enumerate(G.build_grid()):
        rec = P.empty_record(cell)
        base = 300 + 20 * math.log2(cell.seqlen_q) + (100 if cell.head_dim >= 128 else 0)
        for j, b in enumerate(("ours", "cudnn", "flash2", "fa4")):
            tf = base * (1.0, 0.95, 0.55, 0.97)[j]
            if b == "fa4" and cell.head_dim == 256:
                rec["reasons"][b] = "Unavailable: hd256 not compiled"
                continue
            ms = cell.flops / (tf * 1e12) * 1e3
            rec["ms"][b] = ms
            rec[b] = tf
        rec["variant"] = f"fa3_fwd-sm_90a-bf16-hd{cell.head_dim}" + ("-causal" if cell.causal else "")
        if i == 3:
            rec["flags"].append("ours differs from cuDNN: rel 0.02")
        P.finish_record(rec, MATMUL)
        recs.append(rec)
    return recs


def synthetic_results() -> dict:
    sh = C.SHAPES
    corr = [C.case_record("fa3_fwd-sm_90a-bf16-hd128", "fa3_fwd-sm_90a-bf16-hd128", s, "bf16",
                          128, False, {"rel_err": 1.5e-3, "lse_err": 2e-6, "unwritten": 0})
            for s in sh]
    corr.append(C.case_record("fa3_fwd-sm_90a-bf16-hd64-causal", None, sh[8], "bf16", 64, True,
                              {"rel_err": float("nan"), "lse_err": math.inf, "unwritten": 12}))
    sweep = {"records": corr, "unexercised": [], "skipped": []}
    return {
        "schema": 1, "date": "2026-11-29T10:00:00", "gpu": "NVIDIA H200", "driver": "580.159",
        "versions": {"python": "3.12.3", "torch": "2.11.0+cu130", "cudnn": 91900},
        "commit": "0123456789abcdef0123", "command": "python3 -m bench --quick", "seed": 7,
        "tolerances": {"rel_err": C.REL_TOL, "lse_err": C.LSE_TOL},
        "matmul_tflops": MATMUL, "matmul": {"n": 8192, "tflops": MATMUL},
        "cold_start": {"ours": {"ok": True, "total_s": 0.61, "after_context_s": 0.12,
                                "phases_s": {"python_start": 0.03, "context": 0.4}},
                       "fa4": {"ok": True, "total_s": 19.2, "after_context_s": 14.0,
                               "phases_s": {"import": 12.0}}},
        "correctness": corr, "correctness_summary": C.summarize(sweep),
        "grid": synthetic_grid(), "ncu": None, "backends_unavailable": {}, "aborted": None,
        "wall_s": 301.0,
    }


def test_finish_record_ratio_and_pct():
    cell = G.fa3_cell("bf16", 128, 4096, False)
    rec = P.empty_record(cell)
    rec.update(ours=600.0, cudnn=500.0, flash2=300.0)
    rec["ms"] = {"ours": 1.0, "cudnn": 1.2, "flash2": 2.0}
    P.finish_record(rec, 800.0)
    assert rec["best_anchor"] == "cudnn"
    assert rec["ratio"] == pytest.approx(1.2)
    assert rec["pct_matmul"]["ours"] == pytest.approx(75.0)
    lonely = P.empty_record(cell)
    lonely["ours"], lonely["ms"] = 600.0, {"ours": 1.0}
    P.finish_record(lonely, None)
    assert lonely["ratio"] is None and lonely["best_anchor"] is None
    assert "ratio -" in P.one_line(lonely)


def test_json_has_every_number_and_no_nan(tmp_path):
    res = synthetic_results()
    R.write_json(res, tmp_path / "results.json")
    text = (tmp_path / "results.json").read_text()
    def no_constants(c):
        raise AssertionError(f"non-finite {c} in results.json")
    back = json.loads(text, parse_constant=no_constants)
    for key in ("gpu", "driver", "versions", "commit", "command", "matmul_tflops", "cold_start",
                "correctness", "grid"):
        assert key in back
    assert len(back["grid"]) == 36
    for rec in back["grid"]:
        for key in ("dtype", "head_dim", "causal", "batch", "heads", "seqlen", "ours", "cudnn",
                    "flash2", "fa4", "ratio"):
            assert key in rec
    hd256 = [r for r in back["grid"] if r["head_dim"] == 256]
    assert all(r["fa4"] is None and "fa4" in r["reasons"] for r in hd256)
    failed = [r for r in back["correctness"] if not r["passed"]]
    assert len(failed) == 1 and failed[0]["rel_err"] is None and failed[0]["failures"]
    assert back["cold_start"]["ours"]["total_s"] == 0.61


def test_csv_round_trip(tmp_path):
    res = synthetic_results()
    R.write_csv(res["grid"], tmp_path / "results.csv")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "results.csv").read_text())))
    assert len(rows) == 36
    assert tuple(rows[0].keys()) == R.CSV_COLUMNS
    r = next(x for x in rows if x["id"] == "bf16-hd128-s4096-full")
    assert float(r["ours"]) > float(r["cudnn"]) and float(r["ratio"]) > 1
    assert float(r["ours_pct_matmul"]) == pytest.approx(100 * float(r["ours"]) / MATMUL, rel=1e-4)
    hd256 = next(x for x in rows if x["head_dim"] == "256")
    assert hd256["fa4"] == "" and "hd256 not compiled" in hd256["notes"]


def test_markdown(tmp_path):
    res = synthetic_results()
    md = R.markdown(res)
    assert md.startswith("# cubinforge bench: NVIDIA H200")
    assert "python3 -m bench --quick" in md
    assert "| bf16-hd128-s4096-causal |" in md
    assert "### Failed cases" in md and "unwritten" in md
    assert "14 of 15 cases passed" in md
    assert "## Cold start" in md and "0.610" in md
    assert "ours differs from cuDNN" in md
    # every table row has as many cells as its header
    for block in md.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.startswith("| ")]
        if lines:
            n = lines[0].count(" | ")
            assert all(ln.count(" | ") - ln.count("\\|") == n for ln in lines), block
    aborted = dict(res, aborted="RuntimeError: illegal address", grid=[], correctness=[],
                   correctness_summary={}, cold_start=None)
    md2 = R.markdown(aborted)
    assert "ABORTED" in md2 and "Not run." in md2


def test_pipes_in_notes_do_not_break_tables():
    t = R.md_table(["a", "b"], [["x|y", "z"]])
    assert "x\\|y" in t


def test_correctness_by_variant():
    res = synthetic_results()
    rows = {r["variant"]: r for r in R.correctness_by_variant(res["correctness"])}
    good = rows["fa3_fwd-sm_90a-bf16-hd128"]
    assert good["passed"] == good["cases"] == len(C.SHAPES)
    bad = rows["fa3_fwd-sm_90a-bf16-hd64-causal"]
    assert bad["passed"] == 0 and bad["max_rel_err"] == math.inf and bad["unwritten"] == 12


def test_out_dir_names():
    import datetime as dt

    assert gpu_slug("NVIDIA H200") == "h200"
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    d = default_out_dir("NVIDIA H200", dt.date(2026, 11, 29))
    assert d.name == "2026-11-29-h200" and d.parent.name == "results"


def test_plot_inputs_are_pure():
    res = synthetic_results()
    extra = P.empty_record(G.decode_cell("bf16", 128, 16, 8192, False))
    cells = PL.square_cells(res["grid"] + [extra])
    assert len(cells) == 36
    labels, seqlens, rows = PL.ratio_matrix(cells)
    assert seqlens == [512, 1024, 2048, 4096, 8192, 16384]
    assert labels[0] == "hd64 full" and len(labels) == 6
    assert all(x is not None for row in rows for x in row)


def test_plots_written(tmp_path):
    pytest.importorskip("matplotlib")
    res = synthetic_results()
    made = PL.write_plots(res, tmp_path, log=lambda m: None)
    assert made == ["tflops.png", "ratio_heatmap.png"]
    for name in made:
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plots_never_fatal(tmp_path):
    logs = []
    assert PL.write_plots({"grid": []}, tmp_path, log=logs.append) == []


# ----------------------------------------------------------------------------- README

def _results_dir(root: Path, name: str, res: dict) -> Path:
    d = root / name
    d.mkdir(parents=True)
    R.write_json(res, d / "results.json")
    (d / "tflops.png").write_bytes(b"\x89PNG")
    return d


def test_readme_appends_section_when_markers_missing(tmp_path):
    root = tmp_path / "bench" / "results"
    _results_dir(root, "2026-11-28-h200", dict(synthetic_results(), gpu="OLD GPU"))
    _results_dir(root, "2026-11-29-h200", synthetic_results())
    readme = tmp_path / "README.md"
    readme.write_text("# cubinforge\n\nIntro text.\n")
    used = RM.update_readme(readme, root)
    assert used.parent.name == "2026-11-29-h200"
    text = readme.read_text()
    assert text.startswith("# cubinforge\n\nIntro text.\n\n" + RM.BEGIN)
    assert text.rstrip().endswith(RM.END)
    assert "NVIDIA H200" in text and "OLD GPU" not in text
    assert "](bench/results/2026-11-29-h200/tflops.png)" in text
    assert "ratio_heatmap.png" not in text  # only plots that exist are linked
    assert "| bf16-hd64-s512-full |" in text
    assert "14 of 15 cases passed" in text


def test_readme_replaces_only_the_section(tmp_path):
    root = tmp_path / "bench" / "results"
    _results_dir(root, "2026-11-29-h200", synthetic_results())
    readme = tmp_path / "README.md"
    readme.write_text(f"# top\n\n{RM.BEGIN}\nold numbers\n{RM.END}\n\n## After\nkept\n")
    RM.update_readme(readme, root)
    once = readme.read_text()
    assert "old numbers" not in once and once.startswith("# top\n\n" + RM.BEGIN)
    assert once.endswith(f"{RM.END}\n\n## After\nkept\n")
    RM.update_readme(readme, root)
    assert readme.read_text() == once  # idempotent
    assert once.count(RM.BEGIN) == 1


def test_readme_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        RM.update_readme(tmp_path / "README.md", tmp_path / "none")
    with pytest.raises(ValueError):
        RM.splice(f"x\n{RM.BEGIN}\n", "s")
    assert RM.splice("", "S") == "S\n"
    assert RM.splice("a", "S") == "a\n\nS\n"


def test_newest_results_breaks_ties_by_name_date(tmp_path):
    root = tmp_path
    _results_dir(root, "2026-12-01-h200", synthetic_results())
    _results_dir(root, "2026-11-30-h100", synthetic_results())
    assert RM.newest_results(root).parent.name == "2026-12-01-h200"
    assert RM.newest_results(tmp_path / "empty") is None
