"""e4m3 KV-cache decode and varlen on the CPU (issue 13): which variants the sets hold and their names,
what is refused (spec, FwdConfig, flash_attn_with_kvcache), the inference contract's e4m3
tensors (bf16 O, stacked descales), and the kvcache plumbing bound against the built
contracts with the driver faked."""

from __future__ import annotations

import contextlib
import itertools
from types import SimpleNamespace

import pytest
from conftest import module_available

from cubinforge.generator import spec
from cubinforge.runtime import InputError, kvcache, launcher
from cubinforge.runtime.arrays import DeviceArray, OwnedDeviceArray
from cubinforge.runtime.registry_source import LocalSource, manifests
from test_runtime_fixtures import built_records, checked_plan

DSL = module_available("cutlass")
DECODE_DEFAULT = {"fa3-fwd-sm_90a-e4m3-hd128-causal-paged-packgqa-m64n128",
                  "fa3-fwd-sm_90a-e4m3-hd128-causal-paged-packgqa-splitkv-m64n128"}


def test_default_set_holds_two_e4m3_decode_variants():
    names = {v.name for v in spec.expand_set("default") if v.axes.get("dtype") == "e4m3"
             and (v.axes["paged_kv"] or v.axes["split_kv"] or v.axes["pack_gqa"])}
    assert names == DECODE_DEFAULT
    for n in names:
        assert spec.parse_name(n).name == n


def test_fp8_set_holds_the_decode_and_varlen_forms_and_their_combines():
    vs = spec.expand_set("fp8")
    dec = [v for v in vs if v.family == "fa3_fwd" and v.axes["pack_gqa"]]
    assert len(dec) == 18 and DECODE_DEFAULT <= {v.name for v in dec}
    assert all(v.axes["dtype"] == "e4m3" and v.axes["v_layout"] == "rowmajor" and v.axes["tile_m"] == 64
               for v in dec)
    assert {(v.axes["split_kv"], v.axes["paged_kv"]) for v in dec if v.axes["head_dim"] == 64} == set(
        itertools.product([False, True], repeat=2))
    # hd256 at 64 x 64: bf16's 80-key tile has no 32-key step.
    assert {v.axes["tile_n"] for v in dec if v.axes["head_dim"] == 256} == {64}
    varlen = {v.name for v in vs if v.family == "fa3_fwd" and v.axes["varlen"]}
    assert varlen == {f"fa3-fwd-sm_90a-e4m3-hd{d}-{m}-varlen" for d in (64, 128) for m in ("causal", "noncausal")} | {
        f"fa3-fwd-sm_90a-e4m3-hd128-{m}-varlen-paged" for m in ("causal", "noncausal")}
    combines = {v.axes["head_dim"] for v in vs if v.family == "attn_combine" and v.axes["dtype"] == "bf16"}
    assert combines == {64, 128, 256}


@pytest.mark.parametrize("axes, message", [
    ({"paged_kv": True, "v_layout": "colmajor"}, "v_layout=rowmajor"),
    ({"split_kv": True, "pack_gqa": True, "v_layout": "colmajor"}, "v_layout=rowmajor"),
    ({"varlen": True, "v_layout": "colmajor"}, "v_layout=rowmajor"),
    ({"varlen": True, "pack_gqa": True}, "varlen runs one tile per CTA"),
    ({"paged_kv": True, "tile_n": 80, "head_dim": 256}, "multiple of 32"),
])
def test_unbuilt_e4m3_inference_combinations_are_refused(axes, message):
    axes = {"head_dim": 128, **axes}
    with pytest.raises(spec.SpecError, match=message):
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="e4m3", causal=True, **axes)


def _cfg(**kw):
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
    return FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=kw.pop("head_dim", 128), causal=True,
                     **{"tile_m": 64, "pack_gqa": True, "paged_kv": True, **kw})


def test_e4m3_decode_config():
    c = _cfg(split_kv=True)
    # Three stages of K, V and the transposed V; O from registers (no O buffer).
    assert c.stages == 3 and c.v_transpose and c.fp8_local_p and not c.separate_o_smem
    assert c.smem_bytes == 64 * 128 + 3 * 128 * (128 + 128) + 3 * 128 * 128
    assert _cfg(head_dim=256, tile_n=64).stages == 3
    with pytest.raises(ValueError, match="read V row-major as a cache holds it"):
        _cfg(v_layout="colmajor")
    with pytest.raises(ValueError, match="o_smem_store stages O through Q's buffer"):
        _cfg(pack_gqa=False, varlen=True, o_smem_store=True)
    v = _cfg(pack_gqa=False, paged_kv=False, varlen=True, tile_m=0)
    assert (v.tile_m, v.tile_n, v.stages, v.v_transpose) == (128, 128, 3, True)


@pytest.mark.parametrize("split", [False, True])
def test_e4m3_inference_contract_has_bf16_o_and_the_descales(split):
    from cubinforge.generator.kernels.fa3_fwd_sm90.contract import inference_contract
    c = inference_contract(_cfg(split_kv=split), {"k": (128, 128), "v": (128, 128), "kc": (128, 16),
                                                   "vc": (128, 16)}, 128)
    assert c["tensors"]["q"]["dtype"] == c["tensors"]["k"]["dtype"] == c["tensors"]["v"]["dtype"] == "e4m3"
    assert c["tensors"]["descale"]["dims"] == [3, "batch", "heads_kv"]
    assert c["params"][-1]["name"] == "descale"  # the kernel's last argument
    o = c["tensors"]["o_partial" if split else "o"]
    assert o["dtype"] == ("f32" if split else "bf16")
    maps = {p["name"]: p["dtype"] for p in c["params"] if p["kind"] == "tensormap"}
    assert set(maps.values()) == {"e4m3"}


# --------------------------------------------------------------------------- runtime checks

_ptr = itertools.count(1 << 32, 1 << 24)


def arr(shape, dtype):
    return DeviceArray.from_pointer(next(_ptr), tuple(shape), None, dtype, device=0)


def _paged(dtype="e4m3", page=16, hkv=2, d=128):
    return arr((8, page, hkv, d), dtype), arr((8, page, hkv, d), dtype), arr((1, 8), "i32")


@pytest.mark.parametrize("kw, message", [
    ({"q": ("bf16",)}, "an e4m3 cache takes e4m3 q"),
    ({"append": True}, "appending k/v into an e4m3 cache is not built"),
    ({"page": 8}, "e4m3 paged cache needs page_size a multiple of 16"),
])
def test_e4m3_cache_refusals(kw, message):
    k, v, table = _paged(page=kw.get("page", 16))
    q = arr((1, 1, 4, 128), kw.get("q", ("e4m3",))[0])
    extra = {"k": arr((1, 1, 2, 128), "e4m3"), "v": arr((1, 1, 2, 128), "e4m3")} if kw.get("append") else {}
    with pytest.raises(InputError, match=message):
        kvcache.prepare_kvcache(q, k, v, cache_seqlens=5, page_table=table, stream=0, **extra)


@pytest.mark.parametrize("paged", [False, True])
def test_e4m3_varlen_contract_has_bf16_o_and_the_descales(paged):
    from cubinforge.generator.kernels.fa3_fwd_sm90.contract import varlen_contract
    boxes = {"q": (128, 128), "k": (128, 128), "v": (128, 128), "kc": (128, 16), "vc": (128, 16)}
    c = varlen_contract(_cfg(pack_gqa=False, paged_kv=paged, varlen=True, tile_m=0), boxes, 128)
    assert c["tensors"]["o"]["dtype"] == "bf16" and c["tensors"]["descale"]["dims"] == [3, "batch", "heads_kv"]
    assert c["params"][-1]["name"] == "descale"


def test_e4m3_varlen_refusals():
    from cubinforge.runtime import prepare_varlen
    q, kv = arr((40, 4, 128), "e4m3"), arr((40, 2, 128), "e4m3")
    with pytest.raises(InputError, match="e4m3 paged cache needs page_size a multiple of 16"):
        prepare_varlen(q, arr((8, 8, 2, 128), "e4m3"), arr((8, 8, 2, 128), "e4m3"), [0, 40], None,
                       seqused_k=[9], page_table=[[0, 1]], stream=0)
    with pytest.raises(InputError, match="scale e4m3 inputs; q, k, v are bf16"):
        prepare_varlen(arr((40, 4, 128), "bf16"), arr((40, 2, 128), "bf16"), arr((40, 2, 128), "bf16"), [0, 40],
                       [0, 40], stream=0, q_descale=arr((1, 2), "f32"))
    assert kv.dtype == "e4m3"


def test_descales_on_a_bf16_cache_are_refused():
    k, v, table = _paged("bf16")
    with pytest.raises(InputError, match="scale e4m3 inputs; q and the cache are bf16"):
        kvcache.prepare_kvcache(arr((1, 1, 4, 128), "bf16"), k, v, cache_seqlens=5, page_table=table, stream=0,
                                k_descale=arr((1, 2), "f32"))


# --------------------------------------------------------------------------- plumbing

SRC = LocalSource()
_found, _ = manifests(SRC, "fa3_fwd")
HAVE = {m.variant for m in _found} & DECODE_DEFAULT
needs_built = pytest.mark.skipif(len(HAVE) < 2, reason=f"no e4m3 hd128 decode variants in {SRC.home} "
                                                       f"(make kernels ARCH=sm90)")


@pytest.fixture
def fake_driver(monkeypatch):
    launched, copies = [], []
    d = kvcache.driver
    monkeypatch.setattr(d, "device_arch", lambda dev: "sm_90a")
    monkeypatch.setattr(d, "sm_count", lambda dev: 132)
    monkeypatch.setattr(d, "resolve_stream", lambda s: (0, None))
    monkeypatch.setattr(d, "drv", lambda: SimpleNamespace(CUdeviceptr=int, CUstream=int))
    monkeypatch.setattr(d, "device_context", lambda dev: contextlib.nullcontext())
    monkeypatch.setattr(d, "call", lambda name, *a: copies.append(name))
    monkeypatch.setattr(OwnedDeviceArray, "empty",
                        classmethod(lambda cls, shape, dtype, device, stream=None, strides=None: arr(shape, dtype)))
    monkeypatch.setattr(kvcache, "_fill_i32", lambda value, n, device, stream, handle: arr((n,), "i32"))

    monkeypatch.setattr(launcher.Kernel, "plan", checked_plan)
    monkeypatch.setattr(launcher.Kernel, "run", lambda self, plan, stream: launched.append((self.variant, plan.grid)))
    kvcache.clear_cache()
    yield launched, copies
    kvcache.clear_cache()


@needs_built
@pytest.mark.parametrize("num_splits", [1, 0, 5])
@pytest.mark.parametrize("descaled", [False, True])
def test_e4m3_paged_decode_binds_its_contracts(fake_driver, num_splits, descaled):
    launched, copies = fake_driver
    b, hq, hkv, d = 8, 32, 4, 128
    k, v, table = arr((b * 16, 256, hkv, d), "e4m3"), arr((b * 16, 256, hkv, d), "e4m3"), arr((b, 16), "i32")
    kw = {f"{n}_descale": arr((b, hkv), "f32") for n in "qkv"} if descaled else {}
    out, lse = kvcache.flash_attn_with_kvcache(arr((b, 1, hq, d), "e4m3"), k, v, cache_seqlens=arr((b,), "i32"),
                                               page_table=table, num_splits=num_splits, source=SRC, **kw)
    names = [n for n, _ in launched]
    assert names[0] in DECODE_DEFAULT and out.dtype == "bf16" and out.shape == (b, 1, hq, d)
    assert ("splitkv" in names[0]) == (num_splits != 1)
    if num_splits != 1:
        assert names[1] == "attn-combine-sm_90a-bf16-hd128"
    if num_splits == 5:
        assert launched[0][1] == (5, hkv, b)
    # The stacked descales: copied in where given, 1.0 written where not.
    assert copies.count("cuMemcpyDtoDAsync" if descaled else "cuMemsetD32Async") == 3


@needs_built
def test_e4m3_descale_shape_and_out_dtype_are_checked(fake_driver):
    b, hq, hkv, d = 2, 8, 2, 128
    k, v, table = arr((4, 256, hkv, d), "e4m3"), arr((4, 256, hkv, d), "e4m3"), arr((b, 2), "i32")
    q = arr((b, 1, hq, d), "e4m3")
    with pytest.raises(InputError, match=r"v_descale must be float32 \(batch, heads_kv\) = \(2, 2\)"):
        kvcache.flash_attn_with_kvcache(q, k, v, cache_seqlens=9, page_table=table, source=SRC,
                                        v_descale=arr((b, hq), "f32"))
    with pytest.raises(InputError, match="out must be .* bf16; got"):
        kvcache.flash_attn_with_kvcache(q, k, v, cache_seqlens=9, page_table=table, source=SRC,
                                        out=arr((b, 1, hq, d), "e4m3"))


@pytest.mark.slow
@pytest.mark.skipif(not DSL, reason="needs the CuTe DSL")
def test_e4m3_paged_decode_compiles_to_qgmma_without_spills(home):
    """The default set's e4m3 paged split decode: the pipeline's parameter check against the
    cubin, no local memory, QGMMA E4M3 and the transposer's LDSM.T / STSM, no P shuffles."""
    from cubinforge.generator.sass import cuobjdump
    chosen = [spec.parse_name("fa3-fwd-sm_90a-e4m3-hd128-causal-paged-packgqa-splitkv-m64n128")]
    reg, (rec,) = built_records(chosen)
    m, c = rec["metadata"], rec["contract"]
    assert [p["size"] for p in c["params"]] == [p["size"] for p in m["param_table"]]
    assert m["spill_store_bytes"] == 0 == m["spill_load_bytes"] and m["stack_frame_bytes"] == 0
    sass = cuobjdump(["-sass"], reg.read_blob(rec["cubin"]["sha256"]))
    if sass is None:
        pytest.skip("cuobjdump not installed")
    assert "QGMMA" in sass and "E4M3" in sass and "HGMMA" not in sass
    assert "LDSM.16.MT88.4" in sass and "0x6420" in sass and sass.count("SHFL.IDX") < 8
