"""Cross-compile one SM100 variant to a cubin with fake tensors: no GPU needed (none exists here).

Batch, sequence lengths, head counts and every stride but the head dim's stay symbolic, so
one cubin serves every problem size of the variant.
"""

from __future__ import annotations

import math
import os
import tempfile
import time

from .config import FwdConfig


def compile_cubin(cfg: FwdConfig):
    """Return (compiled object, kernel instance, seconds)."""
    os.environ.setdefault("CUTE_DSL_ARCH", cfg.arch)
    # --keep-cubin also writes a copy into CUTE_DSL_DUMP_DIR; it must exist (see fa3_fwd_sm90).
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", os.path.join(tempfile.gettempdir(), "cubinforge-dsl-dump"))
    os.makedirs(os.environ["CUTE_DSL_DUMP_DIR"], exist_ok=True)
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from .kernel import DTYPES, FlashFwdSm100

    dt = DTYPES[cfg.dtype]
    align_elems = 16 // cfg.elem_bytes  # 16-byte aligned strides, as TMA requires

    def sym(div=1):
        return cute.sym_int64(divisibility=div)

    batch, seqlen_q, seqlen_k = cute.sym_int(), cute.sym_int(), cute.sym_int()
    heads_q, heads_kv = cute.sym_int(), cute.sym_int()
    d = cfg.head_dim

    def bshd(seqlen, heads):
        return make_fake_tensor(
            dt, (batch, seqlen, heads, d),
            stride=(sym(align_elems), sym(align_elems), sym(align_elems), 1),
            assumed_align=16,
        )

    q, k, v, o = bshd(seqlen_q, heads_q), bshd(seqlen_k, heads_kv), bshd(seqlen_k, heads_kv), bshd(seqlen_q, heads_q)
    lse = make_fake_tensor(cutlass.Float32, (batch, heads_q, seqlen_q), stride=(sym(), sym(), 1), assumed_align=4)
    kernel = FlashFwdSm100(cfg)
    t0 = time.perf_counter()
    compiled = cute.compile(
        kernel, q, k, v, o, lse, cutlass.Float32(1.0 / math.sqrt(d) * math.log2(math.e)),
        options=f"--gpu-arch {cfg.arch} --keep-cubin",
    )
    return compiled, kernel, time.perf_counter() - t0
