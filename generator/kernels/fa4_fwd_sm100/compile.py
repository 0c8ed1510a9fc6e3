"""Cross-compile one SM100 variant to a cubin with fake tensors: no GPU needed (none exists here).

Batch, sequence lengths, head counts and every stride but the head dim's stay symbolic, so
one cubin serves every problem size of the variant.
"""

from __future__ import annotations

import time

from ..common import aot_compile, dsl_environment, fake_problem
from .config import FwdConfig


def compile_cubin(cfg: FwdConfig):
    """Return (compiled object, kernel instance, seconds)."""
    dsl_environment(cfg.arch)
    import cutlass.cute as cute

    from .kernel import DTYPES, FlashFwdSm100

    fake = fake_problem(DTYPES[cfg.dtype], cfg.head_dim, cfg.elem_bytes)
    bshd = fake.bshd
    q, k, v, o = (bshd(fake.seqlen_q, fake.heads_q), bshd(fake.seqlen_k, fake.heads_kv),
                  bshd(fake.seqlen_k, fake.heads_kv), bshd(fake.seqlen_q, fake.heads_q))
    lse = fake.lse()
    kernel = FlashFwdSm100(cfg)
    t0 = time.perf_counter()
    compiled = aot_compile(kernel, q, k, v, o, lse, fake.scale_log2(), options=f"--gpu-arch {cfg.arch} --keep-cubin")
    return compiled, kernel, time.perf_counter() - t0
