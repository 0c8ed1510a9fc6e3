"""Cold start in fresh processes: interpreter start to the first correct output.

Each child prints wall-clock stamps; with the parent's spawn time they give
  total_s          spawn -> first output synchronized (interpreter, context, import, launch)
  after_context_s  context ready -> first output synchronized (what a warm process pays)
and the phases in between. Ours runs torch-free (devarray.py) when the runtime takes those
arrays, else with torch tensors (then torch's import is in its `inputs` phase).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PHASES = (("python_start", "t_spawn", "t_start"), ("context", "t_start", "t_context"),
          ("import", "t_context", "t_import"), ("inputs", "t_import", "t_inputs"),
          ("first_call", "t_inputs", "t_done"))


def summarize_child(res: dict, t_spawn: float) -> dict:
    """Turn a child's stamps into seconds: total, after_context and each phase."""
    st = dict(res.get("stamps", {}))
    st["t_spawn"] = t_spawn
    out = {k: v for k, v in res.items() if k != "stamps"}
    out["phases_s"] = {name: st[b] - st[a] for name, a, b in PHASES if a in st and b in st}
    if "t_torch" in st:
        out["phases_s"]["torch_import"] = st["t_torch"] - st["t_start"]
    out["total_s"] = st["t_done"] - t_spawn if "t_done" in st else None
    out["after_context_s"] = st["t_done"] - st["t_context"] if {"t_done", "t_context"} <= st.keys() else None
    return out


def parse_child_output(stdout: str) -> dict:
    """The last line of the child's stdout that is a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}


def run_child(script: str, args: list[str], timeout_s: float = 180.0) -> dict:
    cmd = [sys.executable, str(HERE / script), "--repo", str(REPO), *args]
    t_spawn = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env=dict(os.environ))
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout_s:.0f} s", "command": cmd}
    res = parse_child_output(p.stdout)
    if not res:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        return {"ok": False, "error": f"no result (exit {p.returncode}): " + " | ".join(tail)}
    out = summarize_child(res, t_spawn)
    out["returncode"] = p.returncode
    return out


def shape_args(dtype: str, head_dim: int, causal: bool) -> list[str]:
    return ["--dtype", dtype, "--head-dim", str(head_dim), "--causal", str(int(causal))]


def cold_start(dtype: str, head_dim: int, causal: bool, fa4: bool, log=print) -> dict:
    """{'ours': {...}, 'fa4': {...} or None}: each with total_s, after_context_s, phases_s."""
    sa = shape_args(dtype, head_dim, causal)
    ours = run_child("_cold_ours.py", sa + ["--arrays", "raw"])
    if not ours.get("ok"):
        raw_error = ours.get("error") or "; ".join(ours.get("failures", []))
        log(f"  cold start (torch-free arrays) did not pass: {raw_error}; retrying with torch tensors")
        ours = run_child("_cold_ours.py", sa + ["--arrays", "torch"])
        ours["raw_arrays_error"] = raw_error
    ours["shape"] = {"dtype": dtype, "head_dim": head_dim, "causal": causal}
    res = {"ours": ours, "fa4": None}
    if fa4:
        res["fa4"] = run_child("_cold_fa4.py", sa, timeout_s=300.0)
        res["fa4"]["shape"] = ours["shape"]
    return res
