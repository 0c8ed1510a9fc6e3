"""attn_combine: reduce split-KV partial outputs (fp32 O and LSE per split) to O and LSE.

The second half of split-KV decode (fa3_fwd with split_kv=True writes the partials). Its own
AOT family, so a runtime can launch it after any split kernel with the same layout.
"""

from .config import CombineConfig
from .kernel import compile_variant

__all__ = ["CombineConfig", "compile_variant"]
