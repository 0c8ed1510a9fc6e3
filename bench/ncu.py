"""--ncu: Nsight Compute counters on one cell, ours beside FA4 and cuDNN (tensor pipe,
WGMMA, TMA, and the warp stall reasons that say what the schedule waits on).

Ours runs in the torch-free cold-start child with --repeat, so every kernel in its process
is ours; the anchors run in _ncu_torch_child.py, their kernel picked by name. ncu skips the
first launch and profiles the second, with `--clock-control none` (the card's clocks are
left alone). Metric names differ between ncu releases, so they are picked from
`ncu --query-metrics` by pattern. Anything missing -> {"skipped": why}, per backend.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .cold_start import HERE, REPO

PATTERN = re.compile(r"(gmma|tma|pipe_tensor)", re.I)
# Average warps stalled per issued instruction, by reason (barrier, long_scoreboard, wait,
# math_pipe_throttle, ...): where the two schedules differ.
STALLS = re.compile(r"^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active$")
ALWAYS = ("gpu__time_duration", "sm__throughput", "sm__cycles_elapsed", "smsp__inst_executed",
          "lts__t_sector_hit_rate", "dram__bytes_read", "gpc__cycles_elapsed")
# Roll-ups that the name rules below would get wrong: L2's hit rate is a percentage, and the
# GPC clock is asked as a rate, so a cell run at a lower clock (power, heat) shows as such.
ROLLUPS = {"lts__t_sector_hit_rate": ".pct", "gpc__cycles_elapsed": ".avg.per_second"}
FALLBACK = ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__inst_executed_pipe_tensor_op_gmma.sum", "gpu__time_duration.sum")
MAX_METRICS = 48
BACKENDS = ("ours", "fa4", "cudnn")


def find_ncu() -> str | None:
    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"):
        if cand and Path(cand).exists():
            return cand
    return None


def metric_names(query_output: str) -> list[str]:
    """Base metric names from `ncu --query-metrics` output."""
    names = []
    for line in query_output.splitlines():
        tok = line.strip().split(" ")[0] if line.strip() else ""
        if re.fullmatch(r"[a-z0-9]+__[a-z0-9_]+", tok):
            names.append(tok)
    return names


def with_rollup(base: str) -> str:
    if base in ROLLUPS:
        return base + ROLLUPS[base]
    if STALLS.match(base):
        return base + ".ratio"
    if base == "gpu__time_duration":
        return base + ".sum"
    if base in ("sm__throughput",) or base.endswith(("cycles_active", "_active")):
        return base + ".avg.pct_of_peak_sustained_active"
    if base.endswith("cycles_elapsed"):
        return base + ".avg"
    return base + ".sum"


def choose_metrics(names: list[str]) -> list[str]:
    # Stall reasons before the tensor/TMA pattern: on the H200 that pattern alone matched more
    # than MAX_METRICS names and the stalls, the reason one schedule is slower, fell off
    # (check6/c1/ncu, session 6).
    picked = [n for n in names if n in ALWAYS]
    picked += [n for n in names if STALLS.match(n)]
    picked += [n for n in names if PATTERN.search(n) and n.startswith(("sm__", "smsp__"))
               and "sparsity" not in n]
    seen, out = set(), []
    for n in picked:
        m = with_rollup(n)
        if m not in seen:
            seen.add(m)
            out.append(m)
    return out[:MAX_METRICS] or list(FALLBACK)


def parse_raw_csv(text: str) -> dict:
    """{metric: value} from `ncu --csv --page raw` (header, units row, one row per kernel)."""
    rows = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(rows) < 3:
        return {}
    table = list(csv.reader(io.StringIO("\n".join(rows))))
    header, units, first = table[0], table[1], table[2]
    out = {}
    for h, u, v in zip(header, units, first):
        if "__" not in h and h not in ("Kernel Name",):
            continue
        out[h if not u else f"{h} ({u})"] = v
    return out


def target_command(backend: str, cell, repeat: int = 1) -> tuple[list[str], list[str]]:
    """(ncu filter args, the process to profile) for one backend on one cell."""
    shape = ["--dtype", cell.dtype, "--head-dim", str(cell.head_dim), "--causal", str(int(cell.causal)),
             "--batch", str(cell.batch), "--seqlen", str(cell.seqlen_q), "--heads", str(cell.heads)]
    if getattr(cell, "head_dim_v", None) not in (None, cell.head_dim):
        shape += ["--head-dim-v", str(cell.head_dim_v)]
    if getattr(cell, "varlen", False):  # both through the torch child, each kernel by name
        from ._ncu_torch_child import KERNEL_REGEX

        return (["--kernel-name", KERNEL_REGEX[backend]],
                [sys.executable, str(HERE / "_ncu_torch_child.py"), "--backend", backend, *shape, "--varlen",
                 "--repeat", str(repeat)])
    if backend == "ours":
        return [], [sys.executable, str(HERE / "_cold_ours.py"), "--repo", str(REPO), *shape,
                    "--arrays", "raw", "--repeat", str(repeat), "--verify", "0"]
    from ._ncu_torch_child import KERNEL_REGEX

    return (["--kernel-name", KERNEL_REGEX[backend]],
            [sys.executable, str(HERE / "_ncu_torch_child.py"), "--backend", backend, *shape,
             "--repeat", str(repeat)])


def run_ncu(cell, out_dir: Path, log=print, backends=BACKENDS) -> dict:
    ncu = find_ncu()
    if ncu is None:
        return {"skipped": "ncu not found on PATH or in /usr/local/cuda/bin", "cell": cell.id}
    if (cell.seqlen_q != cell.seqlen_k or cell.heads != cell.heads_kv) and not getattr(cell, "varlen", False):
        return {"skipped": "--ncu profiles square, non-GQA cells only", "cell": cell.id}
    q = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120)
    names = metric_names(q.stdout) if q.returncode == 0 else []
    metrics = choose_metrics(names)
    results, transcript = {}, []
    for backend in backends:
        results[backend] = profile_one(ncu, backend, cell, metrics, transcript, log)
    (Path(out_dir) / "ncu.txt").write_text("\n\n".join(transcript))
    out = {"cell": cell.id, "metrics_requested": metrics, "backends": results}
    if all(r.get("skipped") for r in results.values()):
        out["skipped"] = "; ".join(f"{b}: {r['skipped']}" for b, r in results.items())
    return out


def profile_one(ncu: str, backend: str, cell, metrics: list[str], transcript: list[str], log) -> dict:
    filters, target = target_command(backend, cell)
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           *filters, "--launch-skip", "1", "--launch-count", "1", "--metrics", ",".join(metrics), *target]
    log(f"  ncu {backend}: {' '.join(cmd[:8])} ... ({len(metrics)} metrics)")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"skipped": "ncu timed out after 300 s"}
    transcript.append(f"## {backend}\n$ " + " ".join(cmd) + "\n\n" + p.stdout
                      + ("\n--- stderr ---\n" + p.stderr[-4000:] if p.stderr else ""))
    values = parse_raw_csv(p.stdout)
    if not values:
        tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-4:])
        return {"skipped": f"ncu gave no metrics (exit {p.returncode}): {tail}", "command": " ".join(cmd)}
    kernel = values.pop("Kernel Name", None)
    return {"kernel": kernel, "metrics": values, "command": " ".join(cmd)}


@dataclass(frozen=True)
class Shape:
    """A square, non-GQA problem the grid does not hold (e.g. (192, 128)), for `main`."""

    dtype: str
    head_dim: int
    head_dim_v: int
    causal: bool
    batch: int
    heads: int
    seqlen: int
    varlen: bool = False  # bench/inference.py's 16-sequence packed case (batch, seqlen, heads ignored)

    seqlen_q = property(lambda self: self.seqlen)
    seqlen_k = property(lambda self: self.seqlen)
    heads_kv = property(lambda self: self.heads)

    @property
    def id(self) -> str:
        dv = f"-dv{self.head_dim_v}" if self.head_dim_v != self.head_dim else ""
        if self.varlen:
            return f"{self.dtype}-hd{self.head_dim}{dv}-varlen16-" + ("causal" if self.causal else "full")
        return f"{self.dtype}-hd{self.head_dim}{dv}-b{self.batch}-h{self.heads}-s{self.seqlen}-" + (
            "causal" if self.causal else "full")


def main(argv=None) -> int:
    """`python -m bench.ncu --head-dim 192 --head-dim-v 128 --causal 1 --batch 2 --seqlen 8192
    --heads 16 --out DIR`: the --ncu profile of one shape outside the grid."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--head-dim-v", type=int, default=0, help="0: --head-dim")
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--backends", default="ours,fa4")
    ap.add_argument("--varlen", action="store_true",
                    help="bench/inference.py's 16-sequence packed varlen case (--batch/--seqlen/--heads ignored)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    cell = Shape(a.dtype, a.head_dim, a.head_dim_v or a.head_dim, bool(a.causal), a.batch, a.heads, a.seqlen,
                 varlen=a.varlen)
    a.out.mkdir(parents=True, exist_ok=True)
    res = run_ncu(cell, a.out, backends=tuple(a.backends.split(",")))
    (a.out / "ncu.json").write_text(json.dumps(res, indent=1))
    for backend, r in res.get("backends", {}).items():
        print(backend, r.get("skipped") or f"{len(r.get('metrics', {}))} metrics, kernel {str(r.get('kernel'))[:60]}")
    return 0 if not res.get("skipped") else 1


if __name__ == "__main__":
    raise SystemExit(main())
