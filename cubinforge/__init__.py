"""cubinforge: ahead-of-time FlashAttention-3-class attention cubins.

The subpackages live in the repository's top-level folders and install under this
namespace: cubinforge.generator, cubinforge.registry, cubinforge.runtime, cubinforge.service.
"""

__version__ = "0.1.0"
