"""GPU tests of cubinforge.runtime against a float64 numpy reference.

Every fa3_fwd variant in the local registry ($CUBINFORGE_HOME, default ./.cubinforge) that
the device can run is launched on fresh random inputs with NaN-poisoned outputs. Inputs
come from CuPy when it is importable, else torch. Skipped where there is no GPU or no
variant for the device's arch.
"""

from __future__ import annotations

import hashlib
import math
import zlib

import numpy as np
import pytest

from cubinforge.runtime import (DeviceArray, InputError, Kernel, OwnedDeviceArray, as_device_array,
                                bind, driver, flash_attn_func, last_launch, load_contract,
                                select_attention_variant)
from cubinforge.runtime.params import build_params
from cubinforge.runtime.registry_source import default_source, load_manifest, manifests
from _helpers import ATOL_LSE, NAN_BITS, RTOL_O, backend, compare, download, from_bits, gpu_probe, softmax_rows  # noqa: F401
from _helpers import to_bits as host_bits


def _probe():
    """(skip reason for any GPU test, arch, runnable fa3_fwd manifests, skip reason for those)."""
    no_gpu, arch = gpu_probe()
    if no_gpu is not None:
        return no_gpu, None, [], "no GPU"
    found, _broken = manifests(default_source(), "fa3_fwd")
    plain = [m for m in found if m.contract.arch == arch
             and not any(m.axes.get(a) for a in ("varlen", "paged_kv", "split_kv",
                                                 # test_variants_gpu.py checks these
                                                 "softcap", "local", "learnable_sink"))
             and m.axes.get("head_dim_v", m.axes.get("head_dim")) == m.axes.get("head_dim")
             and set(m.contract.tensors) <= {"q", "k", "v", "o", "lse"}]
    if not plain:
        return None, arch, [], f"the local registry ({default_source().home}) has no fa3_fwd variant for {arch}"
    return None, arch, sorted(plain, key=lambda m: m.variant), None


NO_GPU, ARCH, VARIANTS, NO_VARIANTS = _probe()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]
needs_variants = pytest.mark.skipif(NO_VARIANTS is not None, reason=NO_VARIANTS or "")
needs_sm90 = pytest.mark.skipif(ARCH not in ("sm_90a", "sm_100a"), reason="TMA/cluster PTX needs sm_90a+")


# --------------------------------------------------------------------------- host <-> device

BACKEND, XP = backend() if NO_GPU is None else (None, None)


def upload(bits: np.ndarray, dtype: str):
    """A framework array holding ``bits`` (bf16 travels as uint16 in CuPy, which lacks bf16)."""
    if BACKEND == "cupy":
        if dtype == "fp16":
            return XP.asarray(bits.view(np.float16))
        if dtype == "f32":
            return XP.asarray(bits.view(np.float32))
        return XP.asarray(bits)
    t = XP.from_numpy(bits.view({"bf16": np.int16, "fp16": np.float16, "f32": np.float32}[dtype]).copy()).cuda()
    return t.view(XP.bfloat16) if dtype == "bf16" else t


def wrap(x, dtype: str):
    """What the caller passes: the framework array itself, except CuPy's bf16 bits (dtype= view)."""
    if BACKEND == "cupy" and dtype == "bf16":
        return as_device_array(x, dtype="bf16")
    return x


def poisoned(shape, dtype: str):
    np_t, nan = NAN_BITS[dtype]
    return upload(np.full(shape, nan, np_t), dtype)


# --------------------------------------------------------------------------- reference

def reference(q, k, v, scale, causal):
    """float64 attention; q (b, sq, hq, d), k/v (b, sk, hkv, d). Causal is bottom-right aligned:
    query i sees keys j <= i + sk - sq; a row with no key gives O = 0, LSE = -inf."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    kk = np.repeat(k, g, axis=2).transpose(0, 2, 3, 1)      # (b, hq, d, sk)
    vv = np.repeat(v, g, axis=2).transpose(0, 2, 1, 3)      # (b, hq, sk, d)
    s = np.matmul(q.transpose(0, 2, 1, 3), kk) * scale      # (b, hq, sq, sk)
    if causal:
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        s = np.where(j <= i + sk - sq, s, -np.inf)
    p, lse = softmax_rows(s)
    return np.matmul(p, vv).transpose(0, 2, 1, 3), lse


def make_inputs(rng, b, sq, sk, hq, hkv, d, dtype, packed=False, dv=None):
    """Random q, k, v (host float64 of the rounded values, device arrays). ``packed`` slices
    q/k/v out of one (b, s, 3, h, d) tensor, so they are strided, not contiguous. ``dv``: V's
    head dim where it is not d."""
    if packed:
        assert sq == sk and hq == hkv
        bits = host_bits(rng.standard_normal((b, sq, 3, hq, d)), dtype)
        dev = upload(bits, dtype)
        host = from_bits(bits, dtype)
        return [host[:, :, i] for i in range(3)], [dev[:, :, i] for i in range(3)]
    hosts, devs = [], []
    for shape in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, dv or d)):
        bits = host_bits(rng.standard_normal(shape), dtype)
        hosts.append(from_bits(bits, dtype))
        devs.append(upload(bits, dtype))
    return hosts, devs


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): seqlen 1 / 17 / 1000, sq != sk both ways,
# GQA ratios 1, 2, 4, 8, batch 1-3.
CASES = [
    (1, 1, 1, 4, 4),
    (2, 17, 17, 4, 2),
    (1, 1000, 1000, 8, 1),
    (3, 100, 1000, 4, 1),
    (1, 1000, 100, 2, 2),
    (2, 128, 257, 8, 4),
]


def reference_errors(kernel, m, cases) -> list[str]:
    """Each (batch, seqlen_q, seqlen_k, heads_q, heads_kv) of `cases` through `kernel` (of
    manifest m) against the float64 reference, outputs NaN-poisoned, every other case at a
    softmax scale of its own: what did not match."""
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    dv = int(m.axes.get("head_dim_v") or d)
    rng = np.random.default_rng(zlib.crc32(m.variant.encode()))
    errs = []
    for n, (b, sq, sk, hq, hkv) in enumerate(cases):
        (qh, kh, vh), (q, k, v) = make_inputs(rng, b, sq, sk, hq, hkv, d, dtype, dv=dv)
        o, lse = poisoned((b, sq, hq, dv), dtype), poisoned((b, hq, sq), "f32")
        scale = None if n % 2 else 0.7 / math.sqrt(d)
        kernel.launch({"q": wrap(q, dtype), "k": wrap(k, dtype), "v": wrap(v, dtype),
                       "o": wrap(o, dtype), "lse": lse},
                      {} if scale is None else {"softmax_scale": scale})
        ref_o, ref_lse = reference(qh, kh, vh, scale or 1 / math.sqrt(d), causal)
        errs += compare(download(wrap(o, dtype)), download(lse), ref_o, ref_lse,
                        f"b={b} sq={sq} sk={sk} hq={hq} hkv={hkv}")
    return errs


@needs_variants
@pytest.mark.parametrize("variant", [m.variant for m in VARIANTS] or ["none"])
def test_every_variant_matches_reference(variant):
    m = next(m for m in VARIANTS if m.variant == variant)
    errs = reference_errors(Kernel.from_manifest(m, default_source()), m, CASES)
    assert not errs, f"{variant}:\n" + "\n".join(errs)


def _first(dtype=None, causal=None):
    for m in VARIANTS:
        if (dtype is None or m.axes["dtype"] == dtype) and (causal is None or m.axes["causal"] == causal):
            return m
    return VARIANTS[0]


@needs_variants
def test_flash_attn_func_allocates_and_reports_variant():
    m = _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    # The dispatcher chooses by the problem's sizes too (runtime/dispatch.py).
    chosen = select_attention_variant(dtype, d, causal, sizes=dict(batch=2, seqlen_q=333, seqlen_k=333,
                                                                   heads_q=4, heads_kv=2))
    rng = np.random.default_rng(1)
    (qh, kh, vh), (q, k, v) = make_inputs(rng, 2, 333, 333, 4, 2, d, dtype)
    out, lse = flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), causal=causal)
    rec = last_launch()
    assert rec.variant == chosen.variant
    assert len(rec.grid) == 3 and all(g >= 1 for g in rec.grid)
    assert rec.block == tuple(chosen.contract.block)
    assert rec.dynamic_smem_bytes == chosen.contract.dynamic_smem_bytes
    assert out.shape == (2, 333, 4, d) and lse.shape == (2, 4, 333) and lse.dtype == "f32"
    assert hasattr(out, "__dlpack__") and hasattr(out, "__cuda_array_interface__")
    ref_o, ref_lse = reference(qh, kh, vh, 1 / math.sqrt(d), causal)
    errs = compare(download(out), download(lse), ref_o, ref_lse, "allocated outputs")
    assert not errs, "\n".join(errs)


@needs_variants
def test_outputs_flow_back_through_dlpack_and_cai():
    m = _first()
    dtype, d = m.axes["dtype"], int(m.axes["head_dim"])
    rng = np.random.default_rng(2)
    _, (q, k, v) = make_inputs(rng, 1, 64, 64, 2, 2, d, dtype)
    out, lse = flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype))
    want_lse = download(lse)
    if BACKEND == "cupy":
        via_cai = XP.asarray(lse)                      # __cuda_array_interface__ (f32)
        via_dlpack = XP.from_dlpack(lse)
        np.testing.assert_array_equal(XP.asnumpy(via_cai), want_lse.astype(np.float32))
        np.testing.assert_array_equal(XP.asnumpy(via_dlpack), want_lse.astype(np.float32))
    else:
        t_lse = XP.from_dlpack(lse)
        t_out = XP.from_dlpack(out)                    # bf16/fp16 via DLPack
        np.testing.assert_array_equal(t_lse.cpu().numpy(), want_lse.astype(np.float32))
        np.testing.assert_array_equal(t_out.float().cpu().numpy().astype(np.float64), download(out))
    del out, lse                                       # frees stream-ordered; must not crash
    driver.call("cuCtxSynchronize")


@needs_variants
def test_given_outputs_strided_inputs_and_stream():
    m = _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    rng = np.random.default_rng(3)
    (qh, kh, vh), (q, k, v) = make_inputs(rng, 2, 200, 200, 4, 4, d, dtype, packed=True)
    assert as_device_array(wrap(q, dtype)).strides[1] == 3 * 4 * d     # really strided
    o, lse = poisoned((2, 200, 4, d), dtype), poisoned((2, 4, 200), "f32")
    stream = XP.cuda.Stream(non_blocking=True) if BACKEND == "cupy" else XP.cuda.Stream()
    got = flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), causal=causal,
                          out=wrap(o, dtype), lse=lse, stream=stream)
    assert got[1] is lse                                 # the caller's arrays come back
    assert last_launch().stream == driver.resolve_stream(stream)[0] != 0
    stream.synchronize()
    ref_o, ref_lse = reference(qh, kh, vh, 1 / math.sqrt(d), causal)
    errs = compare(download(wrap(o, dtype)), download(lse), ref_o, ref_lse, "packed qkv on a stream")
    assert not errs, "\n".join(errs)


@needs_variants
def test_raw_pointer_entry():
    m = _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    rng = np.random.default_rng(4)
    (qh, kh, vh), devs = make_inputs(rng, 1, 77, 130, 8, 2, d, dtype)
    o, lse = poisoned((1, 77, 8, d), dtype), poisoned((1, 8, 77), "f32")

    def raw(x, dt):
        a = as_device_array(wrap(x, dt))
        return DeviceArray.from_pointer(a.ptr, a.shape, a.strides, dt)   # no device: asked of the driver
    flash_attn_func(raw(devs[0], dtype), raw(devs[1], dtype), raw(devs[2], dtype), causal=causal,
                    out=raw(o, dtype), lse=raw(lse, "f32"))
    ref_o, ref_lse = reference(qh, kh, vh, 1 / math.sqrt(d), causal)
    errs = compare(download(wrap(o, dtype)), download(lse), ref_o, ref_lse, "raw pointers")
    assert not errs, "\n".join(errs)


@needs_variants
def test_graph_capture_with_given_outputs():
    if BACKEND != "cupy":
        pytest.skip("capture test written against CuPy's stream capture API")
    m = _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    rng = np.random.default_rng(5)
    (qh, kh, vh), (q, k, v) = make_inputs(rng, 1, 150, 150, 2, 2, d, dtype)
    args = [wrap(x, dtype) for x in (q, k, v)]
    o, lse = poisoned((1, 150, 2, d), dtype), poisoned((1, 2, 150), "f32")
    flash_attn_func(*args, causal=causal, out=wrap(o, dtype), lse=lse)   # warm: module loaded
    driver.call("cuCtxSynchronize")
    o2, lse2 = poisoned((1, 150, 2, d), dtype), poisoned((1, 2, 150), "f32")
    # Wrap before capturing: wrapping without a stream orders the producer against the legacy
    # stream, which a capturing stream forbids. Inside, everything is given `stream=s`.
    o2w = wrap(o2, dtype)
    s = XP.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        try:
            flash_attn_func(*args, causal=causal, out=o2w, lse=lse2, stream=s)
        finally:
            graph = s.end_capture()       # never leave the stream capturing for later tests
    graph.launch(s)
    s.synchronize()
    ref_o, ref_lse = reference(qh, kh, vh, 1 / math.sqrt(d), causal)
    errs = compare(download(wrap(o2, dtype)), download(lse2), ref_o, ref_lse, "graph replay")
    assert not errs, "\n".join(errs)


@needs_variants
def test_errors_before_launch_on_device():
    m = _first()
    dtype, d = m.axes["dtype"], int(m.axes["head_dim"])
    rng = np.random.default_rng(6)
    _, (q, k, v) = make_inputs(rng, 1, 16, 16, 6, 4, d, dtype)
    with pytest.raises(InputError, match=r"heads_q \(6\) must be a multiple of heads_kv \(4\)"):
        flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype))


# --------------------------------------------------------------------------- launch machinery
# Hand-written PTX kernels with hand-written contracts: they check, with no registry, that
# parameters arrive byte for byte, that grid/block/cluster/smem are what the contract says,
# and that the driver-encoded tensor map loads the box the contract's recipe describes.

def _kernel_from_ptx(ptx: str, contract: dict) -> Kernel:
    image = ptx.encode() + b"\0"
    sha = hashlib.sha256(image).hexdigest()
    m = load_manifest({"manifest_version": 1, "variant": contract["variant"], "family": "test",
                       "axes": {"arch": contract["arch"]}, "cubin": {"sha256": sha, "size": len(image)},
                       "contract": contract, "metadata": {}})
    return Kernel(m, image)


def upload_bits(bits: np.ndarray, dtype: str) -> OwnedDeviceArray:
    """A stream-ordered allocation filled from host bits (driver only, no framework)."""
    a = OwnedDeviceArray.empty(bits.shape, dtype, 0)
    with driver.device_context(0):
        driver.call("cuMemcpyHtoD", a.ptr, np.ascontiguousarray(bits).ctypes.data, bits.nbytes)
    return a


def download_bits(a: DeviceArray, np_t) -> np.ndarray:
    with driver.device_context(0):
        driver.call("cuCtxSynchronize")
        out = np.empty(a.span_bytes // np.dtype(np_t).itemsize, np_t)
        driver.call("cuMemcpyDtoH", out.ctypes.data, a.ptr, a.span_bytes)
    return out


_DUMP_WORDS = 10 + 32 + 1 + 1     # p0 40 B, p1 128 B, p2 4 B, p3 4 B


def _dump_ptx(arch: str) -> str:
    lines = [".version 8.0", f".target {arch}", ".address_size 64", "",
             ".visible .entry dump(.param .align 8 .b8 p0[40], .param .align 64 .b8 p1[128],",
             "                     .param .f32 p2, .param .u32 p3)",
             "{", "  .reg .b32 %r<8>;", "  .reg .b64 %rd<4>;", "  .reg .pred %p<2>;",
             "  mov.u32 %r1, %tid.x;", "  mov.u32 %r2, %ctaid.x;", "  or.b32 %r3, %r1, %r2;",
             "  setp.ne.u32 %p1, %r3, 0;", "  @%p1 bra DONE;",
             "  ld.param.u64 %rd1, [p0];", "  cvta.to.global.u64 %rd1, %rd1;"]
    w = 0
    for name, nbytes in (("p0", 40), ("p1", 128), ("p2", 4), ("p3", 4)):
        for off in range(0, nbytes, 4):
            lines += [f"  ld.param.b32 %r4, [{name}+{off}];", f"  st.global.b32 [%rd1+{4 * w}], %r4;"]
            w += 1
    for reg in ("%nctaid.x", "%ntid.x", "%cluster_nctarank", "%dynamic_smem_size"):
        lines += [f"  mov.u32 %r4, {reg};", f"  st.global.b32 [%rd1+{4 * w}], %r4;"]
        w += 1
    lines += ["DONE:", "  ret;", "}"]
    return "\n".join(lines) + "\n"


def _dump_contract(arch: str) -> dict:
    return {
        "contract_version": 1, "variant": "test-dump", "arch": arch, "entry": "dump",
        "block": [128, 1, 1], "cluster": [2, 1, 1], "dynamic_smem_bytes": 100000, "static_smem_bytes": 0,
        "grid": [["n", 16, "ceil_div"], [1], [1]],
        "symbols": {"n": {"tensor": "x", "dim": 0, "min": 1}, "m": {"tensor": "x", "dim": 1}},
        "tensors": {"x": {"role": "input", "dtype": "f32", "dims": ["n", "m"], "contiguous_dim": 1, "align_bytes": 16},
                    "out": {"role": "output", "dtype": "f32", "dims": [_DUMP_WORDS + 4], "contiguous_dim": 0,
                            "align_bytes": 16}},
        "scalars": {"scale": {"type": "f32", "default": [0.125]}},
        "checks": [{"expr": ["m", 8, "%", 0, "=="], "message": "m must be a multiple of 8"}],
        "params": [
            {"ordinal": 0, "offset": 0, "size": 40, "align": 8, "name": "s", "kind": "struct",
             "fields": [{"offset": 0, "type": "ptr", "value": ["out.ptr"]},
                        {"offset": 8, "type": "i32", "value": ["n"]},
                        {"offset": 12, "type": "i32", "value": ["m"]},
                        {"offset": 16, "type": "i32", "value": [-7]},
                        {"offset": 24, "type": "i64", "value": ["x.stride.0"]},
                        {"offset": 32, "type": "i64", "value": ["n", "m", "*", -1, "*"]}]},
            {"ordinal": 1, "offset": 64, "size": 128, "align": 64, "name": "tma_x", "kind": "tensormap",
             "tensor": "x", "dtype": "f32", "dims": [1, 0], "box": [16, 8], "element_strides": [1, 1],
             "interleave": "none", "swizzle": "none", "l2_promotion": "128B", "oob_fill": "none"},
            {"ordinal": 2, "offset": 192, "size": 4, "align": 4, "name": "scale_log2", "kind": "scalar",
             "type": "f32", "value": ["scale", "log2e_mul"]},
            {"ordinal": 3, "offset": 196, "size": 4, "align": 4, "name": "nm", "kind": "scalar",
             "type": "i32", "value": ["n", "m", "+"]},
        ]}


@needs_sm90
def test_params_grid_cluster_and_smem_arrive_as_the_contract_says():
    kernel = _kernel_from_ptx(_dump_ptx(ARCH), _dump_contract(ARCH))
    x = upload_bits(np.arange(64 * 40, dtype=np.float32).reshape(64, 40).view(np.uint32), "f32")
    out = upload_bits(np.zeros(_DUMP_WORDS + 4, np.uint32), "f32")
    rec = kernel.launch({"x": x, "out": out}, {"scale": 0.5})
    assert rec.grid == (4, 1, 1) and rec.cluster == (2, 1, 1)
    got = download_bits(out, np.uint32)
    with driver.device_context(0):
        want = b"".join(bytes(b) for b in build_params(bind(kernel.contract, {"x": x, "out": out}, {"scale": 0.5})))
    assert len(want) == 4 * _DUMP_WORDS and got[:_DUMP_WORDS].tobytes() == want
    assert got[0:2].view(np.uint64)[0] == out.ptr
    assert got[_DUMP_WORDS:].tolist() == [4, 128, 2, 100000]   # grid.x, block.x, cluster size, dyn smem
    with pytest.raises(InputError, match=r"m must be a multiple of 8 \(m=36\)"):
        kernel.launch({"x": upload_bits(np.zeros((64, 36), np.uint32), "f32"), "out": out})


def _tma_ptx(arch: str, box_bytes: int) -> str:
    return f""".version 8.0
.target {arch}
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.shared .align 8 .b64 mbar;

.visible .entry tma_box(.param .align 64 .b8 tmap[128], .param .u64 out,
                        .param .u32 c1, .param .u32 c2, .param .u32 c3)
{{
  .reg .b32 %r<12>;
  .reg .b64 %rd<8>;
  .reg .pred %p<4>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  mov.u64 %rd1, tmap;
  cvta.param.u64 %rd2, %rd1;
  mov.u32 %r2, smem;
  mov.u32 %r3, mbar;
  mbarrier.init.shared::cta.b64 [%r3], 1;
  fence.mbarrier_init.release.cluster;
  fence.proxy.async.shared::cta;
  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], {box_bytes};
  ld.param.u32 %r5, [c1];
  ld.param.u32 %r6, [c2];
  ld.param.u32 %r7, [c3];
  mov.u32 %r4, 0;
  cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd2, {{%r4, %r5, %r6, %r7}}], [%r3];
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
  @!%p2 bra WAIT;
  ld.param.u64 %rd3, [out];
  cvta.to.global.u64 %rd3, %rd3;
  mov.u32 %r8, 0;
LOOP:
  add.u32 %r9, %r2, %r8;
  ld.shared.u32 %r10, [%r9];
  cvt.u64.u32 %rd4, %r8;
  add.u64 %rd5, %rd3, %rd4;
  st.global.u32 [%rd5], %r10;
  add.u32 %r8, %r8, 4;
  setp.lt.u32 %p3, %r8, {box_bytes};
  @%p3 bra LOOP;
DONE:
  ret;
}}
"""


@needs_sm90
def test_tensormap_loads_the_box_of_a_strided_tensor():
    # q is a slice of a packed (b, s, 12, d) tensor: heads 4..7, so strides are not compact
    # and the base is offset; the map is the FA recipe's (head_dim, seqlen, heads, batch).
    b, s, H, d = 2, 40, 12, 64
    full_bits = np.random.default_rng(7).integers(0, 0x7F00, (b, s, H, d), dtype=np.uint16)
    full = upload_bits(full_bits, "bf16")
    q = DeviceArray.from_pointer(full.ptr + 4 * d * 2, (b, s, 4, d), (s * H * d, H * d, d, 1), "bf16",
                                 device=0, owner=full)
    box = (64, 16, 1, 1)
    nbytes = 64 * 16 * 2
    contract = {
        "contract_version": 1, "variant": "test-tma", "arch": ARCH, "entry": "tma_box",
        "block": [32, 1, 1], "cluster": [1, 1, 1], "dynamic_smem_bytes": 4096, "static_smem_bytes": 0,
        "grid": [[1], [1], [1]],
        "symbols": {"batch": {"tensor": "q", "dim": 0}, "seqlen": {"tensor": "q", "dim": 1},
                    "heads": {"tensor": "q", "dim": 2}, "head_dim": {"tensor": "q", "dim": 3, "fixed": 64}},
        "tensors": {"q": {"role": "input", "dtype": "bf16", "dims": ["batch", "seqlen", "heads", "head_dim"],
                          "contiguous_dim": 3, "align_bytes": 16},
                    "out": {"role": "output", "dtype": "bf16", "dims": [16, 64], "contiguous_dim": 1,
                            "align_bytes": 16}},
        "scalars": {"s0": {"type": "i32", "default": [0]}, "h0": {"type": "i32", "default": [0]},
                    "b0": {"type": "i32", "default": [0]}},
        "checks": [],
        "params": [
            {"ordinal": 0, "offset": 0, "size": 128, "align": 64, "name": "tma_q", "kind": "tensormap",
             "tensor": "q", "dtype": "bf16", "dims": [3, 1, 2, 0], "box": list(box),
             "element_strides": [1, 1, 1, 1], "interleave": "none", "swizzle": "none",
             "l2_promotion": "128B", "oob_fill": "none"},
            {"ordinal": 1, "offset": 128, "size": 8, "align": 8, "name": "out", "kind": "scalar",
             "type": "i64", "value": ["out.ptr"]},
            {"ordinal": 2, "offset": 136, "size": 4, "align": 4, "name": "c1", "kind": "scalar", "type": "i32", "value": ["s0"]},
            {"ordinal": 3, "offset": 140, "size": 4, "align": 4, "name": "c2", "kind": "scalar", "type": "i32", "value": ["h0"]},
            {"ordinal": 4, "offset": 144, "size": 4, "align": 4, "name": "c3", "kind": "scalar", "type": "i32", "value": ["b0"]},
        ]}
    kernel = _kernel_from_ptx(_tma_ptx(ARCH, nbytes), contract)
    q_host = full_bits[:, :, 4:8]
    for s0, h0, b0 in ((20, 2, 1), (30, 3, 0)):       # the second box runs past seqlen: zero fill
        out = upload_bits(np.full((16, 64), 0xFFFF, np.uint16), "bf16")
        kernel.launch({"q": q, "out": out}, {"s0": s0, "h0": h0, "b0": b0})
        got = download_bits(out, np.uint16).reshape(16, 64)
        want = np.zeros((16, 64), np.uint16)
        rows = q_host[b0, s0:s0 + 16, h0]
        want[:len(rows)] = rows
        np.testing.assert_array_equal(got, want)


def test_owned_arrays_and_framework_round_trip():
    # Allocate stream-ordered, hand to the framework by DLPack and CAI, free: no crash, same bits.
    bits = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    a = upload_bits(bits.view(np.uint32), "f32")
    if BACKEND == "cupy":
        np.testing.assert_array_equal(XP.asnumpy(XP.from_dlpack(a)), bits)
        np.testing.assert_array_equal(XP.asnumpy(XP.asarray(a)), bits)
        cai_only = type("CAIOnly", (), {"__cuda_array_interface__": XP.asarray(a).__cuda_array_interface__})()
        back = as_device_array(cai_only)
        assert back.ptr == a.ptr and back.device is None     # CAI carries no device ordinal...
        assert driver.pointer_device(back.ptr) == 0          # ...so the driver is asked
        via = as_device_array(XP.from_dlpack(a))
        assert (via.ptr, via.device, via.strides, via.dtype) == (a.ptr, 0, a.strides, "f32")
    else:
        t = XP.from_dlpack(a)
        np.testing.assert_array_equal(t.cpu().numpy(), bits)
        via = as_device_array(t)
        assert (via.ptr, via.device, via.strides, via.dtype) == (a.ptr, 0, a.strides, "f32")
        bf = upload_bits(np.array([0x3F80, 0x4000], np.uint16), "bf16")    # 1.0, 2.0
        assert XP.from_dlpack(bf).float().cpu().tolist() == [1.0, 2.0]
    del a
    driver.call("cuCtxSynchronize")


def test_stream_handles_resolve():
    if BACKEND == "cupy":
        s = XP.cuda.Stream(non_blocking=True)
        assert driver.resolve_stream(s)[0] == s.ptr
    else:
        s = XP.cuda.Stream()
        assert driver.resolve_stream(s)[0] == s.cuda_stream
    h = driver.resolve_stream(s)[0]
    assert driver.resolve_stream(driver.drv().CUstream(h))[0] == h != 0


# --------------------------------------------------------------------------- plans, empty inputs

def _case(seed, b=2, sq=150, sk=170, hq=4, hkv=2, m=None):
    m = m or _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    rng = np.random.default_rng(seed)
    hosts, devs = make_inputs(rng, b, sq, sk, hq, hkv, d, dtype)
    o, lse = poisoned((b, sq, hq, d), dtype), poisoned((b, hq, sq), "f32")
    return dtype, d, causal, hosts, [wrap(x, dtype) for x in devs], wrap(o, dtype), lse


@needs_variants
def test_plan_launch_and_run_over_new_buffers_match_reference():
    from cubinforge.runtime import launch_count, plan_attention
    dtype, d, causal, (qh, kh, vh), (q, k, v), o, lse = _case(11)
    plan = plan_attention(q, k, v, causal=causal, out=o, lse=lse)
    sizes = dict(batch=q.shape[0], seqlen_q=q.shape[1], seqlen_k=k.shape[1], heads_q=q.shape[2], heads_kv=k.shape[2])
    assert plan.variant == select_attention_variant(dtype, d, causal, sizes=sizes).variant
    n0 = launch_count()
    got_o, got_lse = plan.launch()
    assert got_o is o and got_lse is lse and launch_count() == n0 + 1
    errs = compare(download(o), download(lse), *reference(qh, kh, vh, 1 / math.sqrt(d), causal), "plan.launch")
    # Same layout, every buffer new (fresh data, fresh poison): only the pointers are rewritten.
    _, _, _, (qh2, kh2, vh2), (q2, k2, v2), o2, lse2 = _case(12)
    plan.run(q2, k2, v2, out=o2, lse=lse2)
    errs += compare(download(o2), download(lse2), *reference(qh2, kh2, vh2, 1 / math.sqrt(d), causal), "plan.run")
    # Only q moves back: k, v, o, lse stay the second set.
    o3, lse3 = poisoned((2, 150, 4, d), dtype), poisoned((2, 4, 150), "f32")
    plan.run(q=q, out=wrap(o3, dtype), lse=lse3)
    errs += compare(download(wrap(o3, dtype)), download(lse3), *reference(qh, kh2, vh2, 1 / math.sqrt(d), causal),
                    "plan.run(q=)")
    assert not errs, "\n".join(errs)


@needs_variants
def test_flash_attn_func_new_pointers_of_a_cached_layout():
    dtype, d, causal, (qh, kh, vh), (q, k, v), o, lse = _case(13)
    flash_attn_func(q, k, v, causal=causal, out=o, lse=lse)
    _, _, _, (qh2, kh2, vh2), (q2, k2, v2), o2, lse2 = _case(14)
    flash_attn_func(q2, k2, v2, causal=causal, out=o2, lse=lse2)      # the cached layout, pointers rewritten
    errs = compare(download(o), download(lse), *reference(qh, kh, vh, 1 / math.sqrt(d), causal), "first")
    errs += compare(download(o2), download(lse2), *reference(qh2, kh2, vh2, 1 / math.sqrt(d), causal), "second")
    out3, lse3 = flash_attn_func(q, k, v, causal=causal)               # allocating, twice: new outputs each
    out4, lse4 = flash_attn_func(q2, k2, v2, causal=causal)
    assert out3.ptr != out4.ptr
    errs += compare(download(out3), download(lse3), *reference(qh, kh, vh, 1 / math.sqrt(d), causal), "alloc 1")
    errs += compare(download(out4), download(lse4), *reference(qh2, kh2, vh2, 1 / math.sqrt(d), causal), "alloc 2")
    assert not errs, "\n".join(errs)


def repoison(x) -> None:
    """All bytes 0xFF (NaN in bf16, fp16 and f32), through the driver, synchronously. Raw bits
    (CuPy's uint16 stand-in for bf16) are read as the 16-bit float they hold."""
    bits = getattr(getattr(x, "dtype", None), "kind", None) in ("u", "i")
    a = as_device_array(x, dtype={2: "bf16", 4: "f32"}[x.dtype.itemsize]) if bits else as_device_array(x)
    with driver.device_context(0):
        driver.call("cuCtxSynchronize")
        driver.call("cuMemsetD8", a.ptr, 0xFF, a.span_bytes)


@needs_variants
def test_plan_replays_in_a_cuda_graph():
    from cubinforge.runtime import plan_attention
    dtype, d, causal, (qh, kh, vh), (q, k, v), o, lse = _case(15)
    plan = plan_attention(q, k, v, causal=causal, out=o, lse=lse)
    plan.launch()                                    # warm: module loaded outside the capture
    repoison(o)
    repoison(lse)
    if BACKEND == "cupy":
        s = XP.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture()
            try:
                plan.launch(s)
            finally:
                graph = s.end_capture()
        assert np.isnan(download(lse)).all()          # captured, not run
        graph.launch(s)
        s.synchronize()
    else:
        g = XP.cuda.CUDAGraph()
        with XP.cuda.graph(g):
            plan.launch(XP.cuda.current_stream().cuda_stream)
        assert np.isnan(download(lse)).all()
        g.replay()
        XP.cuda.synchronize()
    errs = compare(download(o), download(lse), *reference(qh, kh, vh, 1 / math.sqrt(d), causal),
                   "graph replay of plan.launch")
    assert not errs, "\n".join(errs)


@needs_variants
def test_plan_replay_through_libcuda_by_ctypes_matches_reference():
    """The replay of a prepared launch calls libcuda's cuLaunchKernelEx through ctypes
    (runtime/rawlaunch.py) with the bindings' own launch config struct: it is in use here, and
    what it launches is right."""
    from cubinforge.runtime import plan_attention
    dtype, d, causal, (qh, kh, vh), (q, k, v), o, lse = _case(16)
    plan = plan_attention(q, k, v, causal=causal, out=o, lse=lse)
    plan.launch()                                    # loads the module in the context
    plan.launch()                                    # the replay is built
    fast = plan._plan.fast
    assert fast is not None and fast[6] is not None, "the ctypes replay is not in use on this machine"
    repoison(o)
    repoison(lse)
    plan.launch()
    errs = compare(download(o), download(lse), *reference(qh, kh, vh, 1 / math.sqrt(d), causal),
                   "plan.launch through rawlaunch")
    assert not errs, "\n".join(errs)


@needs_variants
@pytest.mark.parametrize("dims", [dict(b=0), dict(sq=0), dict(hq=0, hkv=0)])
def test_empty_inputs_give_empty_outputs_and_launch_nothing(dims):
    from cubinforge.runtime import launch_count, plan_attention
    m = _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    shape = dict(b=2, sq=50, sk=60, hq=4, hkv=2)
    shape.update(dims)
    b, sq, sk, hq, hkv = (shape[x] for x in ("b", "sq", "sk", "hq", "hkv"))
    _, (q, k, v) = make_inputs(np.random.default_rng(16), b, sq, sk, hq, hkv, d, dtype)
    n0 = launch_count()
    out, lse = flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), causal=causal)
    assert out.shape == (b, sq, hq, d) and lse.shape == (b, hq, sq)
    plan = plan_attention(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), causal=causal)
    plan.launch()
    assert launch_count() == n0 and last_launch().launched is False
    driver.call("cuCtxSynchronize")


@needs_variants
@pytest.mark.parametrize("given", [True, False])
def test_seqlen_k_zero_gives_zero_and_minus_inf_without_a_kernel(given):
    from cubinforge.runtime import launch_count, plan_attention
    m = _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    _, (q, k, v) = make_inputs(np.random.default_rng(17), 2, 33, 0, 4, 2, d, dtype)
    n0 = launch_count()
    if given:
        # out is a strided slice of a poisoned buffer: the padding between rows must stay NaN.
        big = poisoned((2, 33, 4, 2 * d), dtype)
        o_full = wrap(big, dtype)
        o = DeviceArray.from_pointer(as_device_array(o_full).ptr, (2, 33, 4, d), (33 * 4 * 2 * d, 4 * 2 * d, 2 * d, 1),
                                     dtype, device=0, owner=o_full)
        lse = poisoned((2, 4, 33), "f32")
        out, lse_out = flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), causal=causal, out=o, lse=lse)
        rest = download(o_full)[..., d:]
        assert np.isnan(rest).all(), "memset wrote outside the output's elements"
    else:
        out, lse_out = flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), causal=causal)
    assert launch_count() == n0 and last_launch().launched is False
    np.testing.assert_array_equal(download(out), np.zeros((2, 33, 4, d)))
    assert (download(lse_out) == -np.inf).all()
    # A plan of it replays the fills.
    o2, l2 = poisoned((2, 33, 4, d), dtype), poisoned((2, 4, 33), "f32")
    plan_attention(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), causal=causal, out=wrap(o2, dtype), lse=l2).launch()
    np.testing.assert_array_equal(download(wrap(o2, dtype)), np.zeros((2, 33, 4, d)))
    assert (download(l2) == -np.inf).all() and launch_count() == n0


@needs_variants
def test_torch_tensors_on_a_side_stream():
    torch = pytest.importorskip("torch")
    from cubinforge.runtime.arrays import parse_dlpack_capsule
    m = _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    g = torch.Generator(device="cuda").manual_seed(18)
    q = torch.randn(2, 140, 4, d, device="cuda", dtype=tdt, generator=g)
    k = torch.randn(2, 160, 2, d, device="cuda", dtype=tdt, generator=g)
    v = torch.randn(2, 160, 2, d, device="cuda", dtype=tdt, generator=g)
    a = as_device_array(q)
    via = parse_dlpack_capsule(q.__dlpack__(), producer=q)
    assert (a.ptr, a.shape, a.strides, a.dtype, a.device) == (via.ptr, via.shape, via.strides, via.dtype, via.device)
    ref_o, ref_lse = reference(q.double().cpu().numpy(), k.double().cpu().numpy(), v.double().cpu().numpy(),
                               1 / math.sqrt(d), causal)
    side = torch.cuda.Stream()
    errs = []
    for round_ in range(2):
        # The outputs are poisoned on torch's current (default) stream; ours runs on `side`:
        # round 0 relies on the runtime making `side` wait for torch's stream (as DLPack's
        # stream= would), round 1 has torch's current stream be `side` itself.
        o = torch.full((2, 140, 4, d), float("nan"), device="cuda", dtype=tdt)
        lse = torch.full((2, 4, 140), float("nan"), device="cuda", dtype=torch.float32)
        if round_ == 0:
            flash_attn_func(q, k, v, causal=causal, out=o, lse=lse, stream=side)
        else:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                flash_attn_func(q, k, v, causal=causal, out=o, lse=lse, stream=side)
        side.synchronize()
        errs += compare(o.double().cpu().numpy(), lse.double().cpu().numpy(), ref_o, ref_lse, f"round {round_}")
    assert not errs, "\n".join(errs)


@needs_variants
def test_unaligned_inputs_are_copied_and_reported():
    from cubinforge.runtime import plan_attention
    m = _first()
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    rng = np.random.default_rng(19)
    b, sq, sk, hq, hkv = 2, 90, 110, 4, 2
    # q: 8 bytes past an aligned base; k: rows of d + 2 elements (a stride of 2d + 4 bytes).
    q_bits = host_bits(rng.standard_normal((b, sq, hq, d)), dtype)
    q_buf = upload_bits(np.concatenate([np.zeros(4, np.uint16), q_bits.ravel()]), dtype)
    q = DeviceArray.from_pointer(q_buf.ptr + 8, (b, sq, hq, d), None, dtype, device=0, owner=q_buf)
    k_bits = host_bits(rng.standard_normal((b, sk, hkv, d + 2)), dtype)
    k_buf = upload_bits(k_bits, dtype)
    k = DeviceArray.from_pointer(k_buf.ptr, (b, sk, hkv, d), (sk * hkv * (d + 2), hkv * (d + 2), d + 2, 1), dtype,
                                 device=0, owner=k_buf)
    v_bits = host_bits(rng.standard_normal((b, sk, hkv, d)), dtype)
    v = upload_bits(v_bits, dtype)
    qh, kh, vh = from_bits(q_bits, dtype), from_bits(k_bits, dtype)[..., :d], from_bits(v_bits, dtype)
    ref = reference(qh, kh, vh, 1 / math.sqrt(d), causal)
    o, lse = poisoned((b, sq, hq, d), dtype), poisoned((b, hq, sq), "f32")
    flash_attn_func(q, k, v, causal=causal, out=wrap(o, dtype), lse=lse)
    assert last_launch().copies == ("q", "k")
    errs = compare(download(wrap(o, dtype)), download(lse), *ref, "copied q and k")
    o2, lse2 = poisoned((b, sq, hq, d), dtype), poisoned((b, hq, sq), "f32")
    plan = plan_attention(q, k, v, causal=causal, out=wrap(o2, dtype), lse=lse2)
    repoison(o2)
    repoison(lse2)
    plan.launch()
    assert last_launch().copies == ("q", "k")
    errs += compare(download(wrap(o2, dtype)), download(lse2), *ref, "plan with copies")
    assert not errs, "\n".join(errs)


# --------------------------------------------------------------------------- causal sections
def _sectioned():
    return [m for m in VARIANTS if ((m.metadata or {}).get("kernel") or {}).get("causal_order") == "sections"]


def _multi_section_shape(d: int, dv: int):
    """(batch, seqlen_q, seqlen_k, heads_q, heads_kv) whose walk runs several sections of
    pairs (schedule.section_pairs: K and V over SECTION_L2_BYTES, num_m = 8 so P = 33 of 80
    pairs at 132 CTAs: sections of 33 and 47), GQA 4, seqlen_q != seqlen_k."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.schedule import SECTION_L2_BYTES, section_pairs

    b, hq, sq = 5, 16, 1000
    row = (d + dv) * 2
    sk = SECTION_L2_BYTES // (b * hq * row) + 64
    per = section_pairs("sections", -(-sq // 128), b * hq, sk, row, 132)
    assert b * hq // per >= 2, (per, b * hq)  # what the test is for: more than one section
    return b, sq, sk, hq, hq // 4


@pytest.mark.skipif(NO_VARIANTS is not None, reason=NO_VARIANTS or "")
@pytest.mark.parametrize("variant", [m.variant for m in _sectioned()] or ["none"])
def test_sectioned_causal_walk_matches_reference(variant):
    """The sectioned causal walk (causal_order "sections") on a shape that takes several
    sections, against float64 per batch element, outputs poisoned: every tile visited once."""
    if variant == "none":
        pytest.skip("no variant with causal_order 'sections' in the local registry")
    m = next(x for x in VARIANTS if x.variant == variant)
    d = int(m.axes["head_dim"])
    dv = int(m.axes.get("head_dim_v") or d)
    b, sq, sk, hq, hkv = _multi_section_shape(d, dv)
    dtype = m.axes["dtype"]
    rng = np.random.default_rng(zlib.crc32(variant.encode()))
    (qh, kh, vh), (q, k, v) = make_inputs(rng, b, sq, sk, hq, hkv, d, dtype, dv=dv)
    o, lse = poisoned((b, sq, hq, dv), dtype), poisoned((b, hq, sq), "f32")
    kernel = Kernel.from_manifest(m, default_source())
    kernel.launch({"q": wrap(q, dtype), "k": wrap(k, dtype), "v": wrap(v, dtype), "o": wrap(o, dtype), "lse": lse}, {})
    got_o, got_lse = download(wrap(o, dtype)), download(lse)
    errs = []
    for i in range(b):  # float64 scores of one batch element at a time (~0.2 GB)
        ref_o, ref_lse = reference(qh[i:i + 1], kh[i:i + 1], vh[i:i + 1], 1 / math.sqrt(d), True)
        errs += compare(got_o[i:i + 1], got_lse[i:i + 1], ref_o, ref_lse, f"batch {i} of {b} sq={sq} sk={sk}")
    assert not errs, errs[:5]
