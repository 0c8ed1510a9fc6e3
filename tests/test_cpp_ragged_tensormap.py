"""The ragged O tensor map (FwdConfig.o_tma_ragged, runtime/tensormap.py ragged_*) through both
launchers with no GPU: the C++ loader (a bundle rendered from the varlen contracts, linked with
the stub libcuda) and the Python runtime must bind the same grid and identical parameter bytes,
every cuTensorMapEncodeTiled request compared argument for argument (tests/test_fa4_params.py's
serialisation), on varlen batches with 0- and 1-token sequences and lengths off the tile."""

from __future__ import annotations

import hashlib
import itertools
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig  # noqa: E402
from cubinforge.generator.kernels.fa3_fwd_sm90.contract import varlen_contract  # noqa: E402
from cubinforge.runtime.arrays import DeviceArray  # noqa: E402
from cubinforge.runtime.contract import bind, load_contract  # noqa: E402
from cubinforge.runtime.params import param_bytes  # noqa: E402
from cubinforge.runtime.tensormap import ragged_extent, ragged_shift  # noqa: E402
from cubinforge.runtime.tensormap import tensormap_args  # noqa: E402

# cuda.h's values of the enums the requests name.
ENUMS = {"CU_TENSOR_MAP_DATA_TYPE_BFLOAT16": 9, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16": 6,
         "CU_TENSOR_MAP_INTERLEAVE_NONE": 0, "CU_TENSOR_MAP_SWIZZLE_NONE": 0, "CU_TENSOR_MAP_SWIZZLE_32B": 1,
         "CU_TENSOR_MAP_SWIZZLE_64B": 2, "CU_TENSOR_MAP_SWIZZLE_128B": 3, "CU_TENSOR_MAP_L2_PROMOTION_NONE": 0,
         "CU_TENSOR_MAP_L2_PROMOTION_L2_64B": 1, "CU_TENSOR_MAP_L2_PROMOTION_L2_128B": 2,
         "CU_TENSOR_MAP_L2_PROMOTION_L2_256B": 3, "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE": 0,
         "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA": 1}


def serialise(recipe, array, tensor=None) -> bytes:
    """runtime/cpp/tests/request_dump.h's bytes for Python's request (unused entries zero)."""
    a = tensormap_args(recipe, array, tensor)
    pad = lambda xs, n: tuple(xs) + (0,) * (n - len(xs))  # noqa: E731
    out = struct.pack("<IIQ", ENUMS[a.data_type], a.rank, a.global_address)
    out += struct.pack("<4Q", *pad(a.global_dim, 4)) + struct.pack("<3Q", *pad(a.global_strides, 3))
    out += struct.pack("<4I", *pad(a.box, 4)) + struct.pack("<4I", *pad(a.element_strides, 4))
    out += struct.pack("<4I", *(ENUMS[x] for x in (a.interleave, a.swizzle, a.l2_promotion, a.oob_fill)))
    return out.ljust(128, b"\0")

# (dtype, causal, o_smem_store, separate_o_smem): the two ragged forms of bench.ab varlen-tma-o.
FORMS = [(dt, c, qbuf, not qbuf) for dt in ("bf16", "fp16") for c in (False, True) for qbuf in (False, True)]
# Sequence lengths: 0- and 1-token sequences, lengths beside tile edges, one long.
BATCHES = [[0, 1, 17, 300], [1], [128, 0, 129, 255, 1, 0], [4096, 3, 1000, 1], [0, 0, 5]]
HEADS = [(16, 4), (8, 8), (32, 8), (16, 16), (4, 1)]
SM = 132


def _name(dt, causal, qbuf):
    return f"fa3-varlen-ragged-{dt}-{'causal' if causal else 'noncausal'}-{'qbuf' if qbuf else 'obuf'}"


def _manifest(dt, causal, qbuf, obuf) -> tuple[dict, bytes]:
    cfg = FwdConfig(arch="sm_90a", dtype=dt, head_dim=128, causal=causal, varlen=True, scheduler="persistent",
                    o_smem_store=qbuf, separate_o_smem=obuf, o_tma_ragged=True,
                    **({"mask_bits": True, "in_order_row_sum": True} if causal else {}))
    boxes = {t: (64, cfg.tile_m if t in "qo" else cfg.tile_n) for t in "qkvo"}
    name = _name(dt, causal, qbuf)
    cubin = b"\x7fELF stand-in for " + name.encode()
    contract = {"contract_version": 1, "variant": name, "arch": "sm_90a", "entry": "kernel_0",
                "block": [cfg.threads, 1, 1], "cluster": [1, 1, 1], "dynamic_smem_bytes": cfg.smem_bytes,
                "static_smem_bytes": 0, **varlen_contract(cfg, boxes, 128)}
    axes = {"arch": "sm_90a", "dtype": dt, "head_dim": 128, "causal": causal, "varlen": True, "paged_kv": False,
            "pack_gqa": False, "split_kv": False, "scheduler": "persistent", "tile_m": cfg.tile_m,
            "tile_n": cfg.tile_n}
    return ({"manifest_version": 1, "variant": name, "family": "fa3_fwd", "axes": axes,
             "cubin": {"sha256": hashlib.sha256(cubin).hexdigest(), "size": len(cubin)},
             "contract": contract, "metadata": {}, "provenance": {}}, cubin)


def _cases():
    """(variant, {tensor: (ptr, shape, strides, dtype)}, scalars) for every form and batch."""
    out = []
    for (dt, causal, qbuf, obuf), (i, lens), (hq, hkv) in zip(
            itertools.cycle(FORMS), enumerate(BATCHES * 2), itertools.cycle(HEADS)):
        b = len(lens)
        total_q = max(1, sum(lens))
        k_lens = [n + 7 * j for j, n in enumerate(lens)]
        total_k = max(1, sum(k_lens))
        base = 0x7F00_0000_0000 + (i << 36)
        # case i % 3 == 1: o a slice of a wider buffer (its row stride is 3 heads' worth more)
        o_strides = ((hq + 3) * 128, 128, 1) if i % 3 == 1 else None
        t = {"q": (base, (total_q, hq, 128), None, dt), "k": (base + (1 << 32), (total_k, hkv, 128), None, dt),
             "v": (base + (2 << 32), (total_k, hkv, 128), None, dt),
             "o": (base + (3 << 32), (total_q, hq, 128), o_strides, dt),
             "lse": (base + (4 << 32), (hq, total_q), None, "f32"),
             "cu_seqlens_q": (base + (5 << 32), (b + 1,), None, "i32"),
             "cu_seqlens_k": (base + (6 << 32), (b + 1,), None, "i32"),
             "seqused_q": (base + (7 << 32), (b,), None, "i32"), "seqused_k": (base + (8 << 32), (b,), None, "i32"),
             # every form here is a packed persistent walk: its tiles come from the counter
             "tile_counter": (base + (9 << 32), (2,), None, "i32")}
        scalars = {"has_seqused_q": i % 2, "has_seqused_k": 0}
        out.append((_name(dt, causal, qbuf), t, scalars))
    return out


def _arrays(t):
    return {n: DeviceArray.from_pointer(p, s, st, dt, device=0) for n, (p, s, st, dt) in t.items()}


def _python(m, t, scalars) -> list[str]:
    c = load_contract(m["contract"])
    b = bind(c, _arrays(t), scalars, {"sm_count": SM})
    return [f"variant {m['variant']}", "grid {} {} {}".format(*b.grid)] + [
        f"param {i} {p.name} {p.offset} {p.size} {param_bytes(p, b, serialise).hex()}"
        for i, p in enumerate(c.params)]


def _stdin(cases) -> str:
    lines = []
    for name, t, scalars in cases:
        lines.append(f"case {name} {SM}")
        for n, a in _arrays(t).items():
            lines.append(f"t {n} {a.dtype} {a.ptr} {a.ndim} {' '.join(map(str, a.shape))} "
                         f"{' '.join(map(str, a.strides))}")
        lines += [f"s {k} {v}" for k, v in scalars.items()]
        lines.append("end")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def cpp_dump(tmp_path_factory):
    harness.skip_unless_bundle_tools()
    made = [_manifest(*f) for f in FORMS]
    exe = harness.build_bundle_program(tmp_path_factory.mktemp("ragged-cpp"), made, "varlen_param_dump")
    cases = _cases()
    out = subprocess.run([str(exe)], input=_stdin(cases), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout, {m["variant"]: m for m, _ in made}, cases, exe


def _blocks(text):
    blocks = []
    for line in text.splitlines():
        if line.startswith("variant "):
            blocks.append([])
        blocks[-1].append(line)
    return blocks


def test_cpp_binds_the_ragged_forms_as_python_does(cpp_dump):
    text, manifests, cases, _ = cpp_dump
    blocks = _blocks(text)
    assert len(blocks) == len(cases) == 2 * len(BATCHES)
    for got, (name, t, scalars) in zip(blocks, cases):
        assert not any(l.startswith("error") for l in got), got
        assert got == _python(manifests[name], t, scalars), name


def test_the_ragged_request_is_the_shifted_map(cpp_dump):
    """Read the C++ tma_o request back: rank 4, (d, rows, heads, rows + 1), the base moved back."""
    text, _, cases, _ = cpp_dump
    for got, (name, t, _) in zip(_blocks(text), cases):
        line = next(l for l in got if l.startswith("param ") and l.split()[2] == "tma_o")
        raw = bytes.fromhex(line.split()[-1])
        rank, address = struct.unpack_from("<IQ", raw, 4)
        dims = struct.unpack_from("<4Q", raw, 16)
        strides = struct.unpack_from("<3Q", raw, 48)
        box = struct.unpack_from("<4I", raw, 72)
        ptr, (rows, heads, d), st, _ = t["o"]
        row = (st or (heads * d, d, 1))[0]
        assert rank == 4 and dims == (d, rows, heads, ragged_extent(rows)), name
        assert strides == (row * 2, d * 2, row * 2) and box == (64, 128, 1, 1), name
        assert address == ptr - ragged_shift(rows, row) * 2, name
        coords = next(l for l in got if l.startswith("param ") and l.split()[2] == "o_tma_coords")
        assert struct.unpack("<3i", bytes.fromhex(coords.split()[-1])) == (rows, heads, rows + 1)


def test_both_refuse_an_o_below_its_own_size(cpp_dump):
    """The shifted base would not be an address: both launchers refuse it."""
    from cubinforge.runtime import InputError

    _, manifests, cases, exe = cpp_dump
    name, t, scalars = cases[0]
    t = dict(t, o=(4096, *t["o"][1:]))
    with pytest.raises(InputError, match="below its own size"):
        _python(manifests[name], t, scalars)
    out = subprocess.run([str(exe)], input=_stdin([(name, t, scalars)]), capture_output=True, text=True, timeout=60)
    assert "error" in out.stdout and "below its own size" in out.stdout, out.stdout
