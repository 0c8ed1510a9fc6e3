"""kv_gather: copy the used rows of a paged KV cache into a dense one (zeros past seqused_k).

The correct-but-slow path for page sizes the paged attention kernels do not take (not a
multiple of 16, e.g. 1): the runtime gathers, then runs the dense inference form.
"""

from .config import GatherConfig
from .kernel import compile_variant

__all__ = ["GatherConfig", "compile_variant"]
