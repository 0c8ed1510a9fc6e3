"""kv_append: write new k/v tokens into a dense or paged KV cache at cache_seqlens.

flash_attn_with_kvcache's companion kernel: it runs before attention on the same stream
and also writes seqused_k = cache_seqlens + seqlen_new, the key counts attention then reads.
"""

from .config import AppendConfig
from .kernel import compile_variant

__all__ = ["AppendConfig", "compile_variant"]
