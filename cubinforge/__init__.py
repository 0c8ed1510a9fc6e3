"""cubinforge: ahead-of-time FlashAttention-3-class attention cubins.

The subpackages live in the repository's top-level folders and install under this
namespace: cubinforge.generator, cubinforge.registry, cubinforge.runtime, cubinforge.service,
cubinforge.bench.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

# In a plain checkout with no install (the lent GPU machine: PYTHONPATH=<repo>), let
# cubinforge.<folder> resolve to the repository's top-level folder of that name.
_root = _Path(__file__).resolve().parent.parent
if (_root / "runtime" / "__init__.py").is_file() and str(_root) not in __path__:
    __path__.append(str(_root))
del _Path, _root
