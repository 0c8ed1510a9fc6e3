"""The `cubinforge` CLI: build, ls, show, the exit codes and the error messages."""

import json
import os
import subprocess
import sys
from pathlib import Path

from cubinforge.cli import main

CLI = [str(Path(sys.executable).parent / "cubinforge")]


def _cli(*args, home, cwd=None):
    env = {**os.environ, "CUBINFORGE_HOME": str(home)}
    env.pop("CUBINFORGE_DATABASE_URL", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=300, cwd=cwd)


def test_build_ls_show(tmp_path):
    home = tmp_path / "home"
    r = _cli("build", "--set", "demo", "--arch", "sm90", "--dtype", "bf16,fp16", "--jobs", "2", home=home, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not list(tmp_path.glob("*.cubin"))  # the DSL's --keep-cubin copies go to the build folder
    assert "2 built, 0 skipped, 0 failed" in r.stdout
    r = _cli("build", "--set", "demo", "--arch", "sm90", home=home)
    assert r.returncode == 0 and "0 built, 2 skipped, 0 failed" in r.stdout

    r = _cli("ls", home=home)
    assert r.returncode == 0 and "demo-scale-sm_90a-bf16" in r.stdout and "2 variant(s)" in r.stdout
    records = json.loads(_cli("ls", "--json", "--dtype", "fp16", home=home).stdout)
    assert [x["name"] for x in records] == ["demo-scale-sm_90a-fp16"]
    assert records[0]["metadata"]["param_table"][1] == {"ordinal": 1, "offset": 16, "size": 4}

    shown = json.loads(_cli("show", "demo-scale-sm_90a-bf16", home=home).stdout)
    assert shown["contract"]["params"][0]["kind"] == "struct" and shown["cubin"]["size"] > 0
    assert (home / "manifests" / "demo-scale-sm_90a-bf16.json").is_file()


def test_list_and_errors(tmp_path, capsys):
    home = tmp_path / "home"
    assert main(["--home", str(home), "build", "--set", "default", "--family", "fa3_fwd", "--pack-gqa", "0", "--softcap", "0",
                 "--learnable-sink", "0", "--varlen", "0", "--head-dim", "128", "--causal", "1", "--list"]) == 0
    assert capsys.readouterr().out.split() == ["fa3-fwd-sm_90a-bf16-hd128-causal-persistent", "fa3-fwd-sm_90a-bf16-hd128-causal-lpt",
                                           "fa3-fwd-sm_90a-fp16-hd128-causal-persistent", "fa3-fwd-sm_90a-fp16-hd128-causal-lpt",
                                           "fa3-fwd-sm_90a-e4m3-hd128-causal-colmajor-persistent-m128n192"]
    assert main(["--home", str(home), "build", "--dtype", "e4m3", "--head-dim", "96"]) == 2
    assert "fp8_quant reads bf16/fp16" in capsys.readouterr().err
    assert main(["--home", str(home), "build", "--head-dim", "80"]) == 2
    assert "unknown head_dim 80" in capsys.readouterr().err
    assert main(["--home", str(home), "show", "fa3-fwd-sm_90a-bf16-hd128-causal"]) == 1


def test_failed_variant_gives_nonzero_exit(tmp_path, test_families, capsys):
    assert main(["--home", str(tmp_path / "h"), "build", "--set", "demo_flaky", "--jobs", "2", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "demo-flaky-sm_90a-bf16  built" in out and "demo-flaky-sm_90a-fp16  failed" in out
