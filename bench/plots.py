"""The two figures: TFLOPS against seqlen (per head dim and mask), and ours / best anchor.

matplotlib with the Agg backend, imported inside the functions. `square_cells` and
`ratio_matrix` are pure, so their logic is testable where matplotlib is not installed.
"""

from __future__ import annotations

import math
from collections import Counter

from .report import BACKEND_LABELS

STYLE = {"ours": dict(color="#d62728", lw=2.4, marker="o"),
         "cudnn": dict(color="#1f77b4", lw=1.4, marker="s"),
         "flash2": dict(color="#7f7f7f", lw=1.4, marker="^"),
         "fa4": dict(color="#2ca02c", lw=1.4, marker="D")}


def square_cells(grid: list[dict]) -> list[dict]:
    """The seqlen_q == seqlen_k cells of the most common (dtype, gqa) group: the FA3 grid."""
    sq = [r for r in grid if r.get("seqlen_q") == r.get("seqlen_k")]
    if not sq:
        return []
    group = Counter((r.get("dtype"), r.get("gqa", 1)) for r in sq).most_common(1)[0][0]
    return [r for r in sq if (r.get("dtype"), r.get("gqa", 1)) == group]


def ratio_matrix(cells: list[dict]):
    """(row labels, seqlens, rows of ratios with None where missing) for the heatmap."""
    seqlens = sorted({r["seqlen_q"] for r in cells})
    keys = sorted({(r["head_dim"], bool(r["causal"])) for r in cells})
    at = {(r["head_dim"], bool(r["causal"]), r["seqlen_q"]): r.get("ratio") for r in cells}
    labels = [f"hd{hd} {'causal' if c else 'full'}" for hd, c in keys]
    rows = [[at.get((hd, c, s)) for s in seqlens] for hd, c in keys]
    return labels, seqlens, rows


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_tflops(results: dict, path) -> bool:
    cells = square_cells(results.get("grid") or [])
    if not cells:
        return False
    plt = _plt()
    hds = sorted({r["head_dim"] for r in cells})
    masks = sorted({bool(r["causal"]) for r in cells})
    fig, axes = plt.subplots(len(masks), len(hds), figsize=(4.2 * len(hds), 3.4 * len(masks)),
                             squeeze=False, sharey=True)
    mm = results.get("matmul_tflops")
    for i, causal in enumerate(masks):
        for j, hd in enumerate(hds):
            ax = axes[i][j]
            sel = sorted((r for r in cells if r["head_dim"] == hd and bool(r["causal"]) == causal),
                         key=lambda r: r["seqlen_q"])
            for b, style in STYLE.items():
                pts = [(r["seqlen_q"], r[b]) for r in sel if r.get(b) is not None]
                if pts:
                    ax.plot(*zip(*pts), label=BACKEND_LABELS[b], **style)
            if mm:
                ax.axhline(mm, color="k", ls=":", lw=1, label="bf16 matmul")
            ax.set_xscale("log", base=2)
            xs = [r["seqlen_q"] for r in sel]
            ax.set_xticks(xs, [f"{x // 1024}k" if x >= 1024 else str(x) for x in xs])
            ax.minorticks_off()
            ax.set_title(f"hd{hd}, {'causal' if causal else 'non-causal'}", fontsize=10)
            ax.grid(alpha=0.3)
            if i == len(masks) - 1:
                ax.set_xlabel("seqlen")
            if j == 0:
                ax.set_ylabel("TFLOPS")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    dtype = cells[0].get("dtype")
    fig.suptitle(f"attention forward, {dtype}, 16k tokens, hidden 2048 "
                 f"({results.get('gpu')}, {results.get('date')})", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_ratio_heatmap(results: dict, path) -> bool:
    cells = square_cells(results.get("grid") or [])
    if not cells:
        return False
    labels, seqlens, rows = ratio_matrix(cells)
    plt = _plt()
    data = [[(x if x is not None else math.nan) for x in row] for row in rows]
    fig, ax = plt.subplots(figsize=(1.1 * len(seqlens) + 2.5, 0.55 * len(labels) + 1.6))
    im = ax.imshow(data, cmap="RdYlGn", vmin=0.5, vmax=1.5, aspect="auto")
    ax.set_xticks(range(len(seqlens)), [str(s) for s in seqlens])
    ax.set_yticks(range(len(labels)), labels)
    for i, row in enumerate(rows):
        for j, x in enumerate(row):
            ax.text(j, i, "–" if x is None else f"{x:.2f}", ha="center", va="center", fontsize=9)
    ax.set_xlabel("seqlen")
    ax.set_title("ours / best anchor (1.0 = parity)", fontsize=11)
    fig.colorbar(im, ax=ax, fraction=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_plots(results: dict, out_dir, log=print) -> list[str]:
    """Both figures into out_dir; a failure is logged, never fatal (the numbers matter more)."""
    from pathlib import Path

    made = []
    for name, fn in (("tflops.png", plot_tflops), ("ratio_heatmap.png", plot_ratio_heatmap)):
        try:
            if fn(results, Path(out_dir) / name):
                made.append(name)
        except Exception as e:  # noqa: BLE001
            log(f"  plot {name} not written: {type(e).__name__}: {e}")
    return made
