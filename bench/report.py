"""results.json, results.csv and results.md: pure functions of the results dict.

results.json holds every number (NaN and infinities become null; a failed case carries its
`failures` text). The CSV is the grid, one row per cell. The markdown has everything a reader
needs: provenance, the rerun command, correctness, the grid, cold start, ncu.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

SCHEMA = 1
CSV_COLUMNS = ("id", "dtype", "head_dim", "causal", "batch", "heads", "heads_kv", "seqlen_q",
               "seqlen_k", "ours", "cudnn", "flash2", "fa4", "best_anchor", "ratio",
               "ours_pct_matmul", "ours_ms", "cudnn_ms", "flash2_ms", "fa4_ms", "variant",
               "ours_vs_cudnn", "ours_host_us", "notes")
BACKEND_LABELS = {"ours": "ours", "cudnn": "cuDNN", "flash2": "FA2 (torch)", "fa4": "FA4"}


def sanitize(obj):
    """JSON-safe copy: non-finite floats -> None, tuples -> lists, other objects -> str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)


def write_json(results: dict, path: Path) -> None:
    Path(path).write_text(json.dumps(sanitize(results), indent=1, allow_nan=False) + "\n")


def _notes(rec: dict) -> str:
    parts = list(rec.get("flags") or [])
    parts += [f"{b}: {why}" for b, why in sorted((rec.get("reasons") or {}).items())]
    return "; ".join(parts)


def csv_rows(grid: list[dict]) -> list[dict]:
    rows = []
    for r in grid:
        row = {c: r.get(c) for c in CSV_COLUMNS}
        row["ours_pct_matmul"] = (r.get("pct_matmul") or {}).get("ours")
        for b in ("ours", "cudnn", "flash2", "fa4"):
            row[f"{b}_ms"] = (r.get("ms") or {}).get(b)
        row["notes"] = _notes(r)
        rows.append(row)
    return rows


def csv_text(grid: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in csv_rows(grid):
        w.writerow({k: _csv_value(v) for k, v in row.items()})
    return buf.getvalue()


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:.6g}"
    return v


def write_csv(grid: list[dict], path: Path) -> None:
    Path(path).write_text(csv_text(grid))


# ----------------------------------------------------------------------------- markdown

def fmt(x, spec: str = ".1f", none: str = "–") -> str:
    if x is None:
        return none
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)  # 'nan', 'inf': a failed number must not look like a missing one
    return format(x, spec)


def md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(s):
        return str(s).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def grid_table(grid: list[dict], compact: bool = False) -> str:
    header = ["cell", "ours", "cuDNN", "FA2 (torch)", "FA4", "ours / best", "% matmul"]
    if not compact:
        header += ["variant", "notes"]
    rows = []
    for r in grid:
        row = [r.get("id", "?"), fmt(r.get("ours")), fmt(r.get("cudnn")), fmt(r.get("flash2")),
               fmt(r.get("fa4")), fmt(r.get("ratio"), ".2f"),
               fmt((r.get("pct_matmul") or {}).get("ours"), ".0f")]
        if not compact:
            row += [r.get("variant") or "–", _notes(r) or ""]
        rows.append(row)
    return md_table(header, rows)


def correctness_by_variant(records: list[dict]) -> list[dict]:
    by: dict[str, dict] = {}
    for r in records:
        v = by.setdefault(r["variant"], {"variant": r["variant"], "cases": 0, "passed": 0,
                                         "max_rel_err": None, "max_lse_err": None,
                                         "unwritten": 0})
        v["cases"] += 1
        v["passed"] += bool(r.get("passed"))
        for key in ("rel_err", "lse_err"):
            x = r.get(key)
            mk = "max_" + key
            if x is None or (isinstance(x, float) and not math.isfinite(x)):
                if not r.get("passed"):
                    v[mk] = math.inf
                continue
            v[mk] = x if v[mk] is None else max(v[mk], x)
        v["unwritten"] += r.get("unwritten") or 0
    return list(by.values())


def correctness_section(results: dict) -> str:
    recs = results.get("correctness") or []
    s = results.get("correctness_summary") or {}
    out = ["## Correctness", ""]
    if not recs:
        out.append("Not run." if not s.get("error") else f"Did not run: {s['error']}")
        return "\n".join(out)
    out.append(f"{s.get('passed', 0)} of {s.get('cases', len(recs))} cases passed "
               f"(rel err <= {results.get('tolerances', {}).get('rel_err', 2.5e-3)}, "
               f"LSE err <= {results.get('tolerances', {}).get('lse_err', 1e-3)}, "
               f"no unwritten element). Max rel err {fmt(s.get('max_rel_err'), '.2e')}, "
               f"max LSE err {fmt(s.get('max_lse_err'), '.2e')}.")
    out.append("")
    rows = [[v["variant"], f"{v['passed']}/{v['cases']}", fmt(v["max_rel_err"], ".2e"),
             fmt(v["max_lse_err"], ".2e"), str(v["unwritten"])]
            for v in correctness_by_variant(recs)]
    out.append(md_table(["variant", "passed", "max rel err", "max LSE err", "unwritten"], rows))
    failed = [r for r in recs if not r.get("passed")]
    if failed:
        out += ["", "### Failed cases", ""]
        out.append(md_table(["variant", "shape", "causal", "rel err", "LSE err", "unwritten", "why"],
                            [[r["variant"], r["shape"], str(r.get("causal")),
                              fmt(r.get("rel_err"), ".2e"), fmt(r.get("lse_err"), ".2e"),
                              str(r.get("unwritten")), "; ".join(r.get("failures", []))]
                             for r in failed]))
    if s.get("unexercised"):
        out += ["", "Variants the runtime never selected (not checked): "
                + ", ".join(s["unexercised"])]
    if s.get("skipped"):
        out += ["", "Skipped: " + "; ".join(f"{x['variant']} ({x['reason']})" for x in s["skipped"])]
    return "\n".join(out)


def cold_start_section(results: dict) -> str:
    cs = results.get("cold_start") or {}
    out = ["## Cold start", ""]
    if not cs:
        out.append("Not run.")
        return "\n".join(out)
    rows = []
    for name in ("ours", "fa4"):
        r = cs.get(name)
        if r is None:
            rows.append([BACKEND_LABELS[name], "–", "–", "not available", ""])
            continue
        ph = r.get("phases_s") or {}
        phases = ", ".join(f"{k} {v:.3f}" for k, v in ph.items())
        status = "ok" if r.get("ok") else f"FAILED: {r.get('error') or '; '.join(r.get('failures', []))}"
        rows.append([BACKEND_LABELS[name], fmt(r.get("total_s"), ".3f"),
                     fmt(r.get("after_context_s"), ".3f"), status, phases])
    out.append("Seconds from a fresh interpreter to the first correct output; `after context` "
               "leaves out interpreter start and CUDA context creation.")
    out.append("")
    out.append(md_table(["backend", "total s", "after context s", "status", "phases (s)"], rows))
    return "\n".join(out)


def ncu_section(results: dict) -> str:
    n = results.get("ncu")
    if not n:
        return ""
    out = ["## Nsight Compute", ""]
    if n.get("skipped"):
        out.append(f"Skipped: {n['skipped']}")
        return "\n".join(out)
    backends = n.get("backends") or {"ours": {"kernel": n.get("kernel"), "metrics": n.get("metrics") or {}}}
    out.append(f"Cell `{n.get('cell')}`, second launch of each backend's kernel, `--clock-control none`.")
    out.append("")
    for b, r in backends.items():
        out.append(f"- {b}: " + (f"skipped ({r['skipped']})" if r.get("skipped") else f"kernel `{r.get('kernel')}`"))
    ran = [b for b, r in backends.items() if not r.get("skipped")]
    metrics = list(dict.fromkeys(m for b in ran for m in backends[b].get("metrics") or {}))
    out.append("")
    out.append(md_table(["metric", *ran], [[m, *[str(backends[b]["metrics"].get(m, "")) for b in ran]]
                                           for m in metrics]))
    return "\n".join(out)


def markdown(results: dict) -> str:
    mm = results.get("matmul_tflops")
    head = [f"# cubinforge bench: {results.get('gpu')}, {results.get('date')}", "",
            f"- commit: `{results.get('commit')}`",
            f"- driver: {results.get('driver')}; "
            + ", ".join(f"{k} {v}" for k, v in (results.get("versions") or {}).items()),
            f"- command: `{results.get('command')}`",
            f"- bf16 8192^3 matmul ceiling: {fmt(mm)} TFLOPS (measured in this run)",
            f"- wall time: {fmt(results.get('wall_s'), '.0f')} s"]
    if results.get("aborted"):
        head.append(f"- **ABORTED**: {results['aborted']}")
    parts = ["\n".join(head), correctness_section(results)]
    grid = results.get("grid") or []
    perf = ["## Performance (TFLOPS)", "",
            "Median of CUDA-event timings after warm-up; TFLOPS = 4·B·H·Sq·Sk·D / t, halved for "
            "causal; `ours / best` against the fastest anchor that ran; `% matmul` of the "
            "ceiling above. `–`: not run (the notes say why).", ""]
    perf.append(grid_table(grid) if grid else "Not run.")
    parts.append("\n".join(perf))
    parts.append(cold_start_section(results))
    n = ncu_section(results)
    if n:
        parts.append(n)
    return "\n\n".join(parts) + "\n"


def write_markdown(results: dict, path: Path) -> None:
    Path(path).write_text(markdown(results))
