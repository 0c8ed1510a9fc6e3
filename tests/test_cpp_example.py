"""examples/cpp: the host program configures and builds with CMake against a rendered bundle and
a stub libcuda (no GPU here; it must then fail cleanly at cuInit), and check.py accepts a
correct attention result and rejects a wrong one."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

needs_build = pytest.mark.skipif(harness.missing_tools("cmake", "g++") is not None,
                                 reason=f"C++ example build: {harness.missing_tools('cmake', 'g++')}")


@pytest.fixture(scope="module")
def stub(tmp_path_factory) -> Path:
    if harness.missing_tools("cmake", "g++"):
        pytest.skip(harness.missing_tools("cmake", "g++"))
    return harness.build_stub(tmp_path_factory.mktemp("stub"))


def configure(src: Path, build: Path, bundle: Path, stub: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["cmake", "-S", str(src), "-B", str(build), f"-DCUBINFORGE_BUNDLE_DIR={bundle}",
                           f"-DCUBINFORGE_LIBCUDA={stub}", "-DCMAKE_BUILD_TYPE=Release"],
                          capture_output=True, text=True, timeout=300)


@needs_build
@pytest.mark.parametrize("embed", [False, True], ids=["cubin-files", "embedded"])
def test_example_builds_and_fails_cleanly_without_a_gpu(tmp_path: Path, stub: Path, embed: bool):
    bundle = harness.render_sample(tmp_path / "bundle", embed=embed)
    build = tmp_path / "build"
    proc = configure(harness.EXAMPLE, build, bundle, stub)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    harness.run(["cmake", "--build", build, "--parallel", "2"])
    exe = build / "flash_attn_example"
    assert exe.is_file()

    # With the stub there is no device: a Status with the driver's name, exit 1, no crash.
    proc = subprocess.run([str(exe), "--batch", "1", "--out", str(tmp_path)], capture_output=True, text=True,
                          env={"LD_LIBRARY_PATH": str(stub.parent)}, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "error: CUDA_ERROR_NO_DEVICE: cuInit failed"

    proc = subprocess.run([str(exe), "--bogus", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr

    kv = build / "kvcache_example"   # flash_attn_with_kvcache from C++: builds, fails as cleanly
    proc = subprocess.run([str(kv), "--batch", "1", "--out", str(tmp_path)], capture_output=True, text=True,
                          env={"LD_LIBRARY_PATH": str(stub.parent)}, timeout=60)
    assert proc.returncode == 1 and proc.stderr.strip() == "error: CUDA_ERROR_NO_DEVICE: cuInit failed", proc.stderr
    proc = subprocess.run([str(kv), "--bogus", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr


@needs_build
def test_configure_names_a_missing_bundle(tmp_path: Path, stub: Path):
    proc = configure(harness.EXAMPLE, tmp_path / "build", tmp_path / "nowhere", stub)
    assert proc.returncode != 0
    assert "holds no cubinforge_bundle.h" in proc.stderr


# ---- check.py --------------------------------------------------------------------------------

def _load_check():
    spec = importlib.util.spec_from_file_location("cpp_example_check", harness.EXAMPLE / "check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _to_bf16_bits(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _fake_run(out: Path, b=1, sq=40, sk=24, hq=4, hkv=2, d=32, causal=True, seed=0) -> dict:
    """Files as flash_attn_example writes them, with O and LSE from the float64 reference."""
    check = _load_check()
    rng = np.random.default_rng(seed)
    bits = {n: _to_bf16_bits(rng.standard_normal(s)) for n, s in
            (("q", (b, sq, hq, d)), ("k", (b, sk, hkv, d)), ("v", (b, sk, hkv, d)))}
    scale = 1.0 / np.sqrt(d)
    o, lse, _ = check.reference(*(_from_bf16_bits(bits[n]) for n in "qkv"), scale, causal)
    bits["o"] = _to_bf16_bits(o)
    lse32 = lse.astype(np.float32)
    dims = {"q": ["batch", "seqlen_q", "heads_q", "head_dim"], "k": ["batch", "seqlen_k", "heads_kv", "head_dim"],
            "v": ["batch", "seqlen_k", "heads_kv", "head_dim"], "o": ["batch", "seqlen_q", "heads_q", "head_dim"],
            "lse": ["batch", "heads_q", "seqlen_q"]}
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, arr in list(bits.items()) + [("lse", lse32)]:
        (out / f"{name}.bin").write_bytes(arr.tobytes())
        tensors[name] = {"file": f"{name}.bin", "dtype": "f32" if name == "lse" else "bf16",
                         "dims": dims[name], "shape": list(arr.shape)}
    meta = {"variant": "fake", "arch": "sm_90a", "dtype": "bf16", "causal": causal, "seed": seed,
            "softmax_scale": scale, "grid": [1, hq, b], "tensors": tensors}
    (out / "meta.json").write_text(json.dumps(meta))
    return meta


def test_check_accepts_the_reference_rounded_to_bf16(tmp_path: Path, capsys):
    _fake_run(tmp_path, causal=True)  # seqlen_q > seqlen_k: 16 rows see no key (O = 0 there)
    assert _load_check().main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "rows that see no key (16)" in out


def test_check_rejects_a_wrong_output(tmp_path: Path, capsys):
    meta = _fake_run(tmp_path, causal=False, sq=24, sk=40)
    o = np.frombuffer((tmp_path / "o.bin").read_bytes(), dtype=np.uint16).copy()
    o[::7] ^= 0x0040  # flip a mantissa bit in every 7th element
    (tmp_path / "o.bin").write_bytes(o.tobytes())
    assert _load_check().main([str(tmp_path)]) == 1
    assert "FAIL" in capsys.readouterr().out
    # And a causal mask applied where none was asked for is caught as well.
    meta["causal"] = True
    _fake_run(tmp_path, causal=False, sq=24, sk=40)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert _load_check().main([str(tmp_path)]) == 1


@pytest.mark.parametrize("script", ["compare_with_python.py", "compare_inference_with_python.py"])
def test_compare_script_is_importable(script):
    """The compare scripts run on the GPU machine; here only their syntax and CLI are checked."""
    spec = importlib.util.spec_from_file_location("cmp", harness.EXAMPLE / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as e:
        mod.main(["--help"])
    assert e.value.code == 0
