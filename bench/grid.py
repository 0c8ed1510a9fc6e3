"""The performance grid as data: cells, their ids, and the command-line filters over them.

The default is the FA3 paper's grid: bf16, batch * seqlen = 16k tokens, hidden 2048 =
heads * head_dim, seqlen 512 ... 16k, head_dim 64/128/256, causal and not (36 cells).
Options add other dtypes, GQA ratios and decode-like cells (few queries against long KV).
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass

from .flops import attention_bytes, attention_flops

TOKENS = 16 * 1024
HIDDEN = 2048
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_SEQLENS = (1024, 8192)
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16",)
# Decode-like cells: seqlen_q against seqlen_k, batch * seqlen_k = DECODE_TOKENS.
DECODE_SEQLENS_Q = (1, 16, 64)
DECODE_SEQLENS_K = (8192, 32768)
DECODE_TOKENS = 128 * 1024


@dataclass(frozen=True)
class Cell:
    dtype: str
    head_dim: int
    causal: bool
    batch: int
    heads: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int

    @property
    def gqa(self) -> int:
        return self.heads // self.heads_kv

    @property
    def id(self) -> str:
        if self.seqlen_q == self.seqlen_k:
            s = f"s{self.seqlen_q}"
        else:
            s = f"q{self.seqlen_q}-k{self.seqlen_k}"
        g = f"-gqa{self.gqa}" if self.gqa > 1 else ""
        return f"{self.dtype}-hd{self.head_dim}-{s}{g}-{'causal' if self.causal else 'full'}"

    @property
    def flops(self) -> float:
        return attention_flops(self.batch, self.heads, self.seqlen_q, self.seqlen_k,
                               self.head_dim, self.causal)

    @property
    def bytes(self) -> int:
        return attention_bytes(self.batch, self.heads, self.heads_kv, self.seqlen_q,
                               self.seqlen_k, self.head_dim, self.dtype)

    def as_record(self) -> dict:
        d = asdict(self)
        d["id"] = self.id
        d["seqlen"] = self.seqlen_k  # the grid's x axis; == seqlen_q except for decode cells
        d["gqa"] = self.gqa
        return d


def fa3_cell(dtype: str, head_dim: int, seqlen: int, causal: bool, gqa: int = 1) -> Cell:
    heads = HIDDEN // head_dim
    if heads % gqa:
        raise ValueError(f"heads {heads} (hd{head_dim}) not divisible by GQA ratio {gqa}")
    return Cell(dtype=dtype, head_dim=head_dim, causal=causal, batch=max(1, TOKENS // seqlen),
                heads=heads, heads_kv=heads // gqa, seqlen_q=seqlen, seqlen_k=seqlen)


def decode_cell(dtype: str, head_dim: int, seqlen_q: int, seqlen_k: int, causal: bool,
                gqa: int = 1) -> Cell:
    heads = HIDDEN // head_dim
    if heads % gqa:
        raise ValueError(f"heads {heads} (hd{head_dim}) not divisible by GQA ratio {gqa}")
    return Cell(dtype=dtype, head_dim=head_dim, causal=causal,
                batch=max(1, DECODE_TOKENS // seqlen_k), heads=heads, heads_kv=heads // gqa,
                seqlen_q=seqlen_q, seqlen_k=seqlen_k)


def build_grid(dtypes=DTYPES, head_dims=HEAD_DIMS, seqlens=SEQLENS, causals=(False, True),
               gqas=(1,), decode: bool = False, patterns=None) -> list[Cell]:
    """Every cell of the product, in a stable order, filtered by `patterns` (globs on ids)."""
    cells: list[Cell] = []
    for dtype in dtypes:
        for gqa in gqas:
            for hd in head_dims:
                if (HIDDEN // hd) % gqa:
                    continue  # e.g. hd256 has 8 heads: GQA 16 does not divide them
                for causal in causals:
                    for s in seqlens:
                        cells.append(fa3_cell(dtype, hd, s, causal, gqa))
                    if decode:
                        for sk in DECODE_SEQLENS_K:
                            for sq in DECODE_SEQLENS_Q:
                                cells.append(decode_cell(dtype, hd, sq, sk, causal, gqa))
    return filter_cells(cells, patterns)


def filter_cells(cells: list[Cell], patterns) -> list[Cell]:
    """Keep cells whose id matches any glob in `patterns` (all when none given).

    A pattern without glob characters matches as a substring: `hd128` keeps every hd128 cell,
    `s4096-causal` both head dims' 4k causal cells.
    """
    if not patterns:
        return list(cells)
    globs = []
    for p in patterns:
        p = p.strip()
        if not p:
            continue
        globs.append(p if any(ch in p for ch in "*?[") else f"*{p}*")
    return [c for c in cells if any(fnmatch.fnmatchcase(c.id, g) for g in globs)]


def parse_int_list(text: str) -> tuple[int, ...]:
    """'512,1k,16k' -> (512, 1024, 16384)."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        mult = 1
        if part.endswith("k"):
            mult, part = 1024, part[:-1]
        out.append(int(part) * mult)
    if not out:
        raise ValueError(f"empty list: {text!r}")
    return tuple(out)


def parse_causal(text: str) -> tuple[bool, ...]:
    """'0' | '1' | 'both' (also false/true/no/yes)."""
    t = text.strip().lower()
    if t in ("both", "all", "0,1", "1,0"):
        return (False, True)
    if t in ("0", "false", "no", "full", "noncausal"):
        return (False,)
    if t in ("1", "true", "yes", "causal"):
        return (True,)
    raise ValueError(f"--causal takes 0, 1 or both, not {text!r}")
