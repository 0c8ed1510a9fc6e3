"""Compile on a miss in the runtime: off by default; on, it builds exactly the asked variant in a
subprocess (the runtime process imports no generator, DSL or database code) and selects it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import cubinforge.runtime as rt
from cubinforge.runtime import compile_on_miss
from cubinforge.runtime.registry_source import LocalSource

needs_dsl = pytest.mark.skipif(compile_on_miss.unavailable() is not None,
                               reason="compiling needs the DSL and the build and server extras")
BANNED = ("cutlass", "jinja2", "sqlalchemy", "fastapi", "torch", "distributed")


def test_a_miss_is_an_error_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv(compile_on_miss.ENV, raising=False)
    with pytest.raises(rt.VariantNotFound, match="no demo_scale variant") as e:
        rt.select("demo_scale", {"arch": "sm_90a", "dtype": "bf16"}, source=LocalSource(tmp_path))
    assert "tried to compile" not in str(e.value)
    assert not (tmp_path / "manifests").exists()


@needs_dsl
def test_compile_on_miss_builds_the_asked_variant_then_selects_it(tmp_path):
    """In a fresh interpreter: the select compiles demo_scale sm_100a fp16 into an empty registry,
    returns its verified manifest, and loads nothing heavy in the runtime's own process."""
    script = textwrap.dedent(f"""
        import json, sys
        import cubinforge.runtime as rt
        from cubinforge.runtime.registry_source import LocalSource, fetch_cubin
        src = LocalSource({str(tmp_path)!r})
        m = rt.select("demo_scale", {{"arch": "sm_100a", "dtype": "fp16"}}, source=src)
        cubin = fetch_cubin(m, src)
        again = rt.select("demo_scale", {{"arch": "sm_100a", "dtype": "fp16"}}, source=src)
        banned = sorted(n for n in sys.modules if n.split(".")[0] in {BANNED!r})
        print(json.dumps({{"variant": m.variant, "again": again.variant, "size": len(cubin),
                           "entry": m.contract.entry, "banned": banned}}))
    """)
    env = {"CUBINFORGE_COMPILE_ON_MISS": "1", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["variant"] == got["again"] == "demo-scale-sm_100a-fp16"
    assert got["size"] > 0 and got["entry"]
    assert got["banned"] == [], "the runtime process imported build-side modules on a miss"
    assert [p.stem for p in (tmp_path / "manifests").glob("*.json")] == ["demo-scale-sm_100a-fp16"]


@needs_dsl
def test_compile_on_miss_never_substitutes(tmp_path, monkeypatch):
    """What the spec does not allow is refused with the spec's reason, and nothing is built."""
    monkeypatch.setenv(compile_on_miss.ENV, "1")
    with pytest.raises(rt.VariantNotFound) as e:
        rt.select("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": False,
                              "varlen": True, "split_kv": True}, source=LocalSource(tmp_path))
    msg = str(e.value)
    assert "CUBINFORGE_COMPILE_ON_MISS=1 tried to compile it" in msg and "varlen runs one tile per CTA" in msg
    assert not list(tmp_path.glob("manifests/*.json"))


def test_compile_on_miss_says_when_the_dsl_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_on_miss.ENV, "1")
    real = compile_on_miss.importlib.util.find_spec
    monkeypatch.setattr(compile_on_miss.importlib.util, "find_spec",
                        lambda name, *a: None if name == "cutlass" else real(name, *a))
    with pytest.raises(rt.VariantNotFound, match=r"'cutlass' is not installed here.*cubinforge\[build"):
        rt.select("demo_scale", {"arch": "sm_90a", "dtype": "bf16"}, source=LocalSource(tmp_path))


def test_the_build_command_names_each_axis():
    cmd = compile_on_miss.command("/h", "fa3_fwd", {"arch": "sm_90a", "head_dim": 96, "causal": True,
                                                    "paged_kv": False})
    assert cmd[1:] == ["-m", "cubinforge.cli", "--home", "/h", "build", "--exact", "--family", "fa3_fwd", "--jobs",
                       "1", "--no-progress", "--arch", "sm_90a", "--head-dim", "96", "--causal", "1",
                       "--paged-kv", "0"]
