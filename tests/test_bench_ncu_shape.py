"""bench.ncu's Shape: a problem outside the grid ((192, 128)) profiled with V's own head dim
on both sides; no GPU, no ncu."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ncu import Shape, target_command  # noqa: E402


def _arg(cmd, flag):
    return cmd[cmd.index(flag) + 1] if flag in cmd else None


def test_a_narrower_v_reaches_both_children():
    cell = Shape("bf16", 192, 128, True, 2, 16, 8192)
    assert cell.id == "bf16-hd192-dv128-b2-h16-s8192-causal"
    for backend in ("ours", "fa4"):
        filters, cmd = target_command(backend, cell)
        assert _arg(cmd, "--head-dim") == "192" and _arg(cmd, "--head-dim-v") == "128", backend
        assert _arg(cmd, "--seqlen") == "8192" and _arg(cmd, "--batch") == "2"
    # Equal head dims: no flag, the grid cells' command lines stay as they were.
    _, cmd = target_command("ours", Shape("bf16", 128, 128, False, 1, 16, 4096))
    assert "--head-dim-v" not in cmd
