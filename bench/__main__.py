"""Entry point: ``python -m cubinforge.bench`` (installed) or ``python3 -m bench`` (checkout)."""

import sys

if __package__ == "cubinforge.bench":
    PROG = "python -m cubinforge.bench"
else:
    # `python3 -m bench` from a plain checkout (or `python3 bench`): map the repository's
    # folders into the `cubinforge` namespace so every bench module is imported once, under
    # cubinforge.bench.*, and the runtime as cubinforge.runtime.
    from pathlib import Path

    PROG = "python3 -m bench"
    _root = Path(__file__).resolve().parent.parent
    if str(_root) not in sys.path:
        sys.path.insert(0, str(_root))
    from bench._bootstrap import install

    install(_root)

from cubinforge.bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog=PROG))
