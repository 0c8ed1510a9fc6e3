"""The runtime stays torch-free: in a fresh interpreter, use it and check sys.modules."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

BANNED = ("torch", "cutlass", "jinja2", "sqlalchemy", "fastapi", "cupy", "jax")

SCRIPT = textwrap.dedent(r"""
    import sys, tempfile
    sys.path.insert(0, sys.argv[1])
    import cubinforge.runtime as rt
    assert "cuda.bindings" not in sys.modules, "cuda-bindings must load lazily"
    from test_runtime_fixtures import fa_arrays, fa_contract, manifest, write_registry
    from pathlib import Path
    c = rt.load_contract(fa_contract())
    b = rt.bind(c, fa_arrays())
    from cubinforge.runtime.params import build_params
    build_params(b, encode=lambda r, a, n: bytes(128))
    a = fa_arrays()["q"]
    back = rt.arrays.parse_dlpack_capsule(a.__dlpack__(max_version=(1, 0)))
    assert back.ptr == a.ptr
    with tempfile.TemporaryDirectory() as d:
        write_registry(Path(d), [manifest(hd=128)])
        m = rt.select("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False,
                      source=rt.LocalSource(d))
        assert m.variant == "fa3_fwd-sm_90a-bf16-hd128"
    banned = sorted(m for m in sys.modules if m.split(".")[0] in %r)
    print("BANNED:", banned)
    sys.exit(1 if banned else 0)
""" % (BANNED,))


def test_runtime_imports_nothing_heavy():
    # -P: the interpreter must find cubinforge as installed, not as the folder in the cwd.
    r = subprocess.run([sys.executable, "-P", "-c", SCRIPT, str(Path(__file__).parent)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BANNED: []" in r.stdout


def test_runtime_sources_do_not_mention_banned_imports():
    root = Path(__file__).resolve().parents[1] / "runtime"
    for path in root.glob("*.py"):
        text = path.read_text()
        for name in BANNED + ("numpy",):
            assert f"import {name}" not in text and f"from {name}" not in text, (path, name)
