"""Make ``cubinforge.*`` importable from a plain checkout (no pip install).

The repository keeps each subpackage in a top-level folder (runtime/, bench/, ...) that
installs as ``cubinforge.<folder>``. Where that install is missing (the lent device) or stale
(an editable install made before bench/ existed), `install` appends a finder to
``sys.meta_path`` that maps those names onto the folders. It is consulted last, so an
installed cubinforge always wins. Stdlib only: the cold-start child imports it too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# cubinforge.<name> -> folder, relative to the repository root.
SUBPACKAGES = {
    "cubinforge": "cubinforge",
    "cubinforge.bench": "bench",
    "cubinforge.generator": "generator",
    "cubinforge.registry": "registry",
    "cubinforge.runtime": "runtime",
    "cubinforge.service": "service",
}


class _CheckoutFinder:
    """Finds ``cubinforge`` and ``cubinforge.<sub>`` in a checkout's folders."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def find_spec(self, fullname, path=None, target=None):
        folder = SUBPACKAGES.get(fullname)
        if folder is None:
            return None
        init = self.root / folder / "__init__.py"
        if not init.is_file():
            return None
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[str(init.parent)])


def install(root: Path | str = REPO_ROOT) -> None:
    """Register the checkout finder once (idempotent)."""
    root = Path(root).resolve()
    for finder in sys.meta_path:
        if isinstance(finder, _CheckoutFinder) and finder.root == root:
            return
    sys.meta_path.append(_CheckoutFinder(root))
