"""bench/fa4_sass.py's failure path, without FA4: a python that cannot import it gets a clear
error naming the interpreter, not a traceback or an empty table."""

from __future__ import annotations

import sys

import pytest


def test_a_python_without_fa4_is_refused_by_name():
    from cubinforge.bench.fa4_sass import fa4_cubin

    with pytest.raises(SystemExit, match="FA4's compile failed") as e:
        fa4_cubin(sys.executable, 64, 64, False, "bf16")
    assert sys.executable in str(e.value)
