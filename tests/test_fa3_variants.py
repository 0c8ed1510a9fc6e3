"""The model variants (softcap, sliding window, learnable sink) on the CPU: names, configs,
launch contracts bound through the runtime, and flash_attn_func's argument resolution."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr, manifest, write_registry  # noqa: E402

from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig  # noqa: E402
from cubinforge.generator.kernels.fa3_fwd_sm90.contract import family_contract  # noqa: E402
from cubinforge.generator.spec import SpecError, expand_set, make_variant, parse_name  # noqa: E402
from cubinforge.runtime import InputError  # noqa: E402
from cubinforge.runtime.attention import select_attention_variant  # noqa: E402
from cubinforge.runtime.contract import bind, load_contract  # noqa: E402
from cubinforge.runtime.errors import VariantNotFound  # noqa: E402
from cubinforge.runtime.registry_source import LocalSource  # noqa: E402
from cubinforge.runtime.variants import resolve  # noqa: E402

GB = 1 << 30
BOXES = {"q": (64, 128), "k": (64, 128), "v": (64, 128), "o": (64, 128)}


# ---------------------------------------------------------------- names and sets

@pytest.mark.parametrize("axes,name", [
    (dict(causal=True, softcap=True), "fa3-fwd-sm_90a-bf16-hd128-causal-softcap"),
    (dict(causal=False, local=True, scheduler="persistent"), "fa3-fwd-sm_90a-bf16-hd128-noncausal-local-persistent"),
    (dict(causal=True, learnable_sink=True), "fa3-fwd-sm_90a-bf16-hd128-causal-sink"),
    (dict(causal=False, softcap=True, local=True, learnable_sink=True),
     "fa3-fwd-sm_90a-bf16-hd128-noncausal-softcap-local-sink"),
])
def test_names_round_trip(axes, name):
    v = make_variant("fa3_fwd", arch="sm90", dtype="bf16", head_dim=128, **axes)
    assert v.name == name
    assert parse_name(name) == v


def test_local_and_causal_are_exclusive():
    with pytest.raises(SpecError, match="causal .* is causal=1, local=0"):
        make_variant("fa3_fwd", arch="sm90", dtype="bf16", head_dim=128, causal=True, local=True)
    with pytest.raises(ValueError, match="exclusive"):
        FwdConfig("sm_90a", "bf16", 128, True, local=True)
    # A window's bit mask is the difference of two prefixes (mask.apply_window_mask_bits).
    assert FwdConfig("sm_90a", "bf16", 128, False, local=True, mask_bits=True).mask_bits


def test_default_set_keeps_its_plain_variants_and_adds_four():
    names = {v.name for v in expand_set("default")}
    assert "fa3-fwd-sm_90a-bf16-hd128-causal-lpt" in names
    assert {"fa3-fwd-sm_90a-bf16-hd128-causal-softcap", "fa3-fwd-sm_90a-bf16-hd192-dv128-causal-lpt",
            "fa3-fwd-sm_90a-bf16-hd128-noncausal-local-persistent",
            "fa3-fwd-sm_90a-bf16-hd128-causal-sink-lpt"} <= names
    variants = expand_set("variants")
    assert all(v["softcap"] or v["local"] or v["learnable_sink"] or v["head_dim_v"] != v["head_dim"]
               for v in variants)
    assert {(v["head_dim"], v["head_dim_v"]) for v in variants if v["head_dim_v"] != v["head_dim"]} == \
        {(192, 128), (128, 64), (96, 64)}
    assert not any(v["local"] and v["causal"] for v in variants)


# ---------------------------------------------------------------- contracts

def contract_for(**kw) -> dict:
    cfg = FwdConfig("sm_90a", "bf16", 128, kw.pop("causal", False), **kw)
    c = family_contract(cfg, BOXES, 128)
    c.update({"contract_version": 1, "variant": "v", "arch": "sm_90a", "entry": "e", "block": [384, 1, 1],
              "cluster": [1, 1, 1], "dynamic_smem_bytes": 1})
    return c


def arrays(b=1, sq=300, sk=500, hq=8, hkv=2, sink=False):
    a = {"q": arr((b, sq, hq, 128)), "k": arr((b, sk, hkv, 128), base=BASE + GB),
         "v": arr((b, sk, hkv, 128), base=BASE + 2 * GB), "o": arr((b, sq, hq, 128), base=BASE + 3 * GB),
         "lse": arr((b, hq, sq), "f32", base=BASE + 4 * GB)}
    if sink:
        a["learnable_sink"] = arr((hq,), "f32", base=BASE + 5 * GB)
    return a


def param(c, name):
    return next(p for p in c["params"] if p["name"] == name)


def test_plain_contract_is_unchanged():
    c = contract_for(causal=True)
    assert [p["name"] for p in c["params"]][-1] == "tiled_mma_pv"
    assert list(c["scalars"]) == ["softmax_scale"]
    assert param(c, "softmax_scale_log2")["value"] == ["softmax_scale", "log2e_mul"]


def test_softcap_contract_folds_the_scale():
    c = contract_for(causal=True, softcap=True)
    # Offsets as the cubin's own table has them (EIATTR_KPARAM_INFO of the built variant).
    assert (param(c, "softcap_pre")["ordinal"], param(c, "softcap_pre")["offset"]) == (12, 632)
    b = bind(load_contract(c), arrays(), {"softcap": 30.0})
    scale = 1 / math.sqrt(128)
    assert b.eval(param(c, "softmax_scale_log2")["value"]) == pytest.approx(30.0 * math.log2(math.e))
    assert b.eval(param(c, "softcap_pre")["value"]) == pytest.approx(scale / 30.0)
    # Without a cap the launch is refused, never run uncapped.
    with pytest.raises(InputError, match="division by zero"):
        bind(load_contract(c), arrays(), {}).eval(param(c, "softcap_pre")["value"])


@pytest.mark.parametrize("given,want", [
    ({}, (500, 300)),                                   # (-1, -1): unbounded both sides
    ({"window_left": 64, "window_right": 0}, (64, 0)),
    ({"window_left": 4096, "window_right": -1}, (500, 300)),
    ({"window_left": -5, "window_right": 7}, (500, 7)),
])
def test_window_contract_resolves_the_sides(given, want):
    c = contract_for(local=True)
    assert [(param(c, n)["ordinal"], param(c, n)["offset"]) for n in ("window_left", "window_right")] == \
        [(12, 632), (13, 636)]
    b = bind(load_contract(c), arrays(sq=300, sk=500), given)
    assert (b.eval(param(c, "window_left")["value"]), b.eval(param(c, "window_right")["value"])) == want


def test_sink_contract_takes_a_heads_q_vector():
    c = contract_for(causal=True, learnable_sink=True)
    p = param(c, "learnable_sink")
    assert (p["ordinal"], p["offset"], p["size"]) == (12, 632, 16)
    b = bind(load_contract(c), arrays(sink=True))
    assert b.eval(p["fields"][0]["value"]) == BASE + 5 * GB and b.eval(p["fields"][1]["value"]) == 8
    bad = arrays(sink=True)
    bad["learnable_sink"] = arr((4,), "f32", base=BASE + 5 * GB)
    with pytest.raises(InputError, match=r"learnable_sink.shape\[0\] \(heads_q\) is 4"):
        bind(load_contract(c), bad)


# ---------------------------------------------------------------- flash_attn_func's arguments

@pytest.mark.parametrize("causal,window,axes,scalars", [
    (False, (-1, -1), (False, False), {}),
    (True, (-1, -1), (True, False), {}),
    (False, (-1, 0), (True, False), {}),               # FlashAttention's causal
    (False, (-7, 0), (True, False), {}),
    (True, (4096, -1), (False, True), {"window_left": 4096, "window_right": 0}),
    (False, (4096, 0), (False, True), {"window_left": 4096, "window_right": 0}),
    (False, (128, 128), (False, True), {"window_left": 128, "window_right": 128}),
    (False, (-1, 5), (False, True), {"window_left": -1, "window_right": 5}),
    (False, (0, 0), (False, True), {"window_left": 0, "window_right": 0}),
])
def test_resolve_window(causal, window, axes, scalars):
    r = resolve(causal, window)
    assert (r.causal, r.local) == axes and r.scalars == scalars


def test_resolve_softcap_and_sink():
    r = resolve(True, (-1, -1), 30.0, True)
    assert r.axes == {"causal": True, "local": False, "softcap": True, "learnable_sink": True}
    assert r.scalars == {"softcap": 30.0}
    assert resolve(False, (-1, -1), 0.0).softcap is False
    for bad in (-1.0, float("nan"), float("inf"), "x"):
        with pytest.raises(InputError, match="softcap"):
            resolve(False, (-1, -1), bad)
    for bad in ((1,), (1.5, 0), ("a", 0), (True, 0), 3):
        with pytest.raises(InputError, match="window_size"):
            resolve(False, bad)


def test_a_value_no_variant_serves_names_the_nearest(tmp_path):
    home = write_registry(tmp_path, [manifest(causal=True, variant="fa3-fwd-sm_90a-bf16-hd128-causal"),
                                     manifest(causal=True, softcap=True,
                                              variant="fa3-fwd-sm_90a-bf16-hd128-causal-softcap")])
    src = LocalSource(home)
    got = select_attention_variant("bf16", 128, source=src, arch="sm_90a", **resolve(True, (-1, -1), 50.0).axes)
    assert got.variant == "fa3-fwd-sm_90a-bf16-hd128-causal-softcap"
    assert select_attention_variant("bf16", 128, True, source=src, arch="sm_90a").variant == \
        "fa3-fwd-sm_90a-bf16-hd128-causal"
    with pytest.raises(VariantNotFound, match=r"local=True.*Nearest: fa3-fwd-sm_90a-bf16-hd128-causal"):
        select_attention_variant("bf16", 128, source=src, arch="sm_90a", **resolve(False, (64, 0)).axes)


# ---------------------------------------------------------------- value head dim != head dim

def test_head_dim_v_names_and_constraints():
    v = make_variant("fa3_fwd", arch="sm90", dtype="bf16", head_dim=192, head_dim_v=128, causal=True)
    assert v.name == "fa3-fwd-sm_90a-bf16-hd192-dv128-causal" and parse_name(v.name) == v
    assert (v["tile_m"], v["tile_n"]) == (128, 128)
    plain = make_variant("fa3_fwd", arch="sm90", dtype="bf16", head_dim=128, causal=True)
    assert plain["head_dim_v"] == 128 and plain.name == "fa3-fwd-sm_90a-bf16-hd128-causal"
    with pytest.raises(SpecError, match=r"\(192, 128\), \(128, 64\), \(96, 64\)"):
        make_variant("fa3_fwd", arch="sm90", dtype="bf16", head_dim=128, head_dim_v=96, causal=True)
    with pytest.raises(ValueError, match="not supported"):
        FwdConfig("sm_90a", "bf16", 64, True, head_dim_v=128)
    cfg = FwdConfig("sm_90a", "bf16", 192, True, head_dim_v=128)
    assert cfg.smem_bytes == 128 * 192 * 2 + 2 * 128 * (192 + 128) * 2


def test_head_dim_v_contract_checks_v_and_o():
    cfg = FwdConfig("sm_90a", "bf16", 192, True, head_dim_v=128)
    c = family_contract(cfg, {"q": (64, 128), "k": (64, 96), "v": (64, 128), "o": (64, 128)},
                        {"q": 128, "k": 128, "v": 128, "o": 64})
    c.update({"contract_version": 1, "variant": "v", "arch": "sm_90a", "entry": "e", "block": [384, 1, 1],
              "cluster": [1, 1, 1], "dynamic_smem_bytes": 1})
    assert c["symbols"]["head_dim_v"] == {"tensor": "v", "dim": 3, "fixed": 128}
    assert c["tensors"]["v"]["dims"][3] == c["tensors"]["o"]["dims"][3] == "head_dim_v"
    assert param(c, "tma_o")["swizzle"] == "64B" and param(c, "tma_q")["swizzle"] == "128B"
    good = {"q": arr((1, 300, 8, 192)), "k": arr((1, 500, 2, 192), base=BASE + GB),
            "v": arr((1, 500, 2, 128), base=BASE + 2 * GB), "o": arr((1, 300, 8, 128), base=BASE + 3 * GB),
            "lse": arr((1, 8, 300), "f32", base=BASE + 4 * GB)}
    bind(load_contract(c), good)
    bad = dict(good, v=arr((1, 500, 2, 192), base=BASE + 2 * GB))
    with pytest.raises(InputError, match=r"v.shape\[3\] \(head_dim_v\) is 192; .* head_dim_v = 128"):
        bind(load_contract(c), bad)
    # dv == d keeps the plain contract: no head_dim_v symbol.
    assert "head_dim_v" not in contract_for(causal=True)["symbols"]


def test_head_dim_v_selection(tmp_path):
    old = manifest(causal=True, variant="fa3-fwd-sm_90a-bf16-hd128-causal")   # written before head_dim_v
    dv = manifest(hd=192, causal=True, head_dim_v=128, variant="fa3-fwd-sm_90a-bf16-hd192-dv128-causal")
    src = LocalSource(write_registry(tmp_path, [old, dv]))
    assert select_attention_variant("bf16", 128, True, source=src, arch="sm_90a").variant == old["variant"]
    assert select_attention_variant("bf16", 192, True, source=src, arch="sm_90a",
                                    head_dim_v=128).variant == dv["variant"]
    with pytest.raises(VariantNotFound, match=r"head_dim_v=64.*Nearest"):
        select_attention_variant("bf16", 128, True, source=src, arch="sm_90a", head_dim_v=64)
    # A plain query (V as wide as Q) is never served by a dv variant; the miss says why, once.
    with pytest.raises(VariantNotFound, match=r"Nearest: .*fa3-fwd-sm_90a-bf16-hd192-dv128-causal "
                                              r"\(differs in head_dim_v=128\)"):
        select_attention_variant("bf16", 192, True, source=src, arch="sm_90a")


def test_model_variants_take_only_the_switches_tuned_variants_names():
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import TUNED_VARIANTS, SWITCHES

    def on(cfg):
        return {s for s in SWITCHES if getattr(cfg, s)}

    # The entries: a window takes non-causal's epilogue and row sum, a sink and (192, 128)
    # hd128 causal lpt's bit mask; (192, 128) also its own in-order sum and pinned loop
    # invariants (H200 A/Bs, config.TUNED_VARIANTS).
    assert on(FwdConfig("sm_90a", "bf16", 128, False, local=True, scheduler="persistent")) == \
        {"separate_o_smem", "in_order_row_sum", "mask_bits"}
    assert on(FwdConfig("sm_90a", "bf16", 128, True, learnable_sink=True, scheduler="lpt")) == {"mask_bits"}
    assert on(FwdConfig("sm_90a", "bf16", 192, True, head_dim_v=128, scheduler="lpt")) == \
        {"mask_bits", "in_order_row_sum", "pin_loop_invariants"}
    assert on(FwdConfig("sm_90a", "bf16", 128, False, local=True)) == {"in_order_row_sum", "mask_bits"}
    # Anything else stays all off: another scheduler, two model axes, softcap, fp16 too (the
    # key has no dtype, so fp16 local hd128 follows bf16's).
    for cfg in (FwdConfig("sm_90a", "bf16", 128, True, learnable_sink=True),
                FwdConfig("sm_90a", "bf16", 192, True, head_dim_v=128),
                FwdConfig("sm_90a", "bf16", 128, False, local=True, softcap=True, scheduler="persistent"),
                FwdConfig("sm_90a", "bf16", 128, True, softcap=True),
                FwdConfig("sm_90a", "bf16", 64, False, local=True, scheduler="persistent", tile_m=128, tile_n=128)):
        assert on(cfg) == set(), cfg
    # An explicit switch still wins over the table (bench.ab's all-off baselines).
    assert on(FwdConfig("sm_90a", "bf16", 128, False, local=True, scheduler="persistent",
                        **{s: False for s in SWITCHES})) == set()
    assert all(tok in ("local", "sink") or tok.startswith("dv") for tok, *_ in TUNED_VARIANTS)
