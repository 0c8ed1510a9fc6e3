"""fp8_quant_sm90: bf16/fp16 (batch, seqlen, heads, head_dim) -> e4m3 with per-(batch, head)
or per-block scales and an optional random-sign Hadamard rotation along head_dim.

`compile_variant(QuantConfig(...))` cross-compiles one variant (no GPU needed).
"""

from __future__ import annotations

from .config import QuantConfig
from .signs import hadamard_sign

__all__ = ["QuantConfig", "compile_variant", "hadamard_sign"]


def compile_variant(cfg: QuantConfig):
    import os
    import tempfile

    # Read when cutlass is imported: --keep-cubin's copies go to scratch, not the working
    # directory (as fa3_fwd_sm90/compile.py does).
    os.environ.setdefault("CUTE_DSL_ARCH", cfg.arch)
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", os.path.join(tempfile.gettempdir(), "cubinforge-dsl-dump"))
    os.makedirs(os.environ["CUTE_DSL_DUMP_DIR"], exist_ok=True)
    from .kernel import compile_variant as _compile

    return _compile(cfg)
