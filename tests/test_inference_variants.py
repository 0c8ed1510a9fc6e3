"""The model variants (window, softcap, learnable sink) in the inference forms (issue 12), on
the CPU: the pack-GQA block range against a brute-force visibility rule, the contracts'
variant arguments, the names and sets, the refusals, and the kvcache / varlen plumbing with
the driver faked (over the local registry's variants, where built)."""

from __future__ import annotations

import itertools

import pytest

from cubinforge.generator import spec
from cubinforge.generator.kernels.fa3_fwd_sm90 import block_range as br
from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.contract import (family_contract, inference_contract, varlen_contract,
                                                                window_expr)
from cubinforge.runtime import InputError, kvcache, launcher, varlen
from cubinforge.runtime.arrays import DeviceArray, OwnedDeviceArray
from cubinforge.runtime.contract import evaluate
from cubinforge.runtime.errors import VariantNotFound
from cubinforge.runtime.registry_source import LocalSource, manifests
from cubinforge.runtime.variants import resolve

from test_fa3_block_range import visible
from test_runtime_fixtures import checked_plan, varlen_contract_of

BOXES = {"q": (64, 64), "k": (64, 128), "v": (64, 128), "kc": (64, 16), "vc": (64, 16), "o": (64, 64)}


# --------------------------------------------------------------------------- block range, pack-GQA

@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_pack_gqa_window_range_covers_every_visible_key_of_the_tiles_tokens(group):
    """Rows (token, head), `group` heads per token: the tile's range holds every key its tokens
    see, only such blocks, and the blocks local_block_counts leaves unmasked are visible in
    full to every token of the tile (rows past seqlen_q included, as the kernel computes)."""
    tm, tn = 64, 16
    for sq, sk, wl, wr in itertools.product([1, 3, 17], [0, 1, 40, 97], [-1, 0, 1, 5, 33], [-1, 0, 2]):
        if wl < 0 and wr < 0:
            continue
        left, right = br.window_bounds(wl, wr, sq, sk)
        for m in range(-(-sq * group // tm)):
            lo, hi = br.n_block_range(m, sq, sk, tm, tn, False, True, left, right, group=group)
            hi = min(hi, -(-sk // tn))      # inference.tile_work: no key, no block
            tokens = range(br.first_row(m, tm, group), br.end_row(m, tm, group))
            assert list(tokens) == sorted({r // group for r in range(m * tm, (m + 1) * tm)})
            vis = {(i, j) for i in tokens for j in range(sk) if visible(i, j, sq, sk, False, True, wl, wr)}
            blocks = {j // tn for _, j in vis}
            where = (group, m, sq, sk, wl, wr, lo, hi)
            assert blocks <= set(range(lo, hi)), where
            if not blocks:
                continue
            assert set(range(lo, hi)) == set(range(min(blocks), max(blocks) + 1)), where
            first, middle, last = br.local_block_counts(
                lo, hi, br.n_block_right_masked(m, sq, sk, tm, tn, True, right, group=group),
                br.n_block_left_masked(m, sq, sk, tm, tn, left, group=group))
            assert min(first, middle, last) >= 0 and first + middle + last == hi - 1 - lo, where
            for n in range(hi - 2 - first - middle + 1, hi - 1 - first):
                assert all((i, j) in vis for i in tokens for j in range(n * tn, (n + 1) * tn)), (where, n)


@pytest.mark.parametrize("splits", [1, 2, 3, 7])
def test_split_ranges_of_the_windowed_range_cover_it_once(splits):
    """split-KV cuts the windowed [lo, hi) (schedule.split_range): every block in one split."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.schedule import split_range
    for lo, hi in [(0, 1), (3, 9), (5, 6), (0, 40), (12, 13)]:
        got = []
        for s in range(splits):
            a, b = split_range(lo, hi, s, splits, mn=min)
            got += list(range(a, b))
        assert got == sorted(got) and sorted(got) == list(range(lo, hi))


def test_group_none_is_the_dense_arithmetic():
    for m, tm in [(0, 64), (3, 128)]:
        assert br.first_row(m, tm) == m * tm and br.end_row(m, tm) == (m + 1) * tm
        assert br.end_row(m, tm, 1) == (m + 1) * tm


# --------------------------------------------------------------------------- contracts

def test_window_reach_may_be_an_expression():
    w = window_expr("window_left", ["max_pages", "page_size", "*"])
    for wl, pages, page, want in [(-1, 4, 16, 64), (-7, 4, 16, 64), (10, 4, 16, 10), (100, 4, 16, 64), (0, 1, 16, 0)]:
        assert evaluate(w, {"window_left": wl, "max_pages": pages, "page_size": page}.__getitem__) == want
    assert window_expr("window_left", "seqlen_k") == window_expr("window_left", ["seqlen_k"])


def _names(c):
    return [p["name"] for p in c["params"]]


@pytest.mark.parametrize("form", ["decode", "paged", "varlen", "varlen_paged"])
def test_inference_contracts_take_the_dense_kernels_variant_arguments(form):
    axes = {"decode": dict(split_kv=True, pack_gqa=True, tile_m=64), "paged": dict(paged_kv=True, split_kv=True),
            "varlen": dict(varlen=True), "varlen_paged": dict(varlen=True, paged_kv=True)}[form]
    make = varlen_contract if "varlen" in form else inference_contract
    plain = make(FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, **axes), BOXES, 128)
    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, softcap=True, local=True,
                    learnable_sink=True, **axes)
    c = make(cfg, BOXES, 128)
    dense = family_contract(FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, softcap=True,
                                      local=True, learnable_sink=True), BOXES, 128)
    tail = ["softcap_pre", "window_left", "window_right", "learnable_sink"]
    assert _names(c) == _names(plain) + tail and _names(dense)[-4:] == tail
    assert set(c["scalars"]) - set(plain["scalars"]) == {"softcap", "window_left", "window_right"}
    assert c["tensors"]["learnable_sink"]["dims"] == ["heads_q"]
    scale = next(p for p in c["params"] if p["name"] == "softmax_scale_log2")
    assert scale["value"] == ["softcap", "log2e_mul"]
    reach = {"decode": "seqlen_k", "paged": "page_size", "varlen": "total_k", "varlen_paged": "page_size"}[form]
    left = next(p for p in c["params"] if p["name"] == "window_left")
    assert reach in left["value"]


# --------------------------------------------------------------------------- names, sets, refusals

NEW_DEFAULT = [
    "fa3-fwd-sm_90a-bf16-hd64-causal-paged-packgqa-splitkv-sink-m64n128",
    "fa3-fwd-sm_90a-bf16-hd64-noncausal-paged-packgqa-splitkv-local-sink-m64n128",
    "fa3-fwd-sm_90a-bf16-hd128-noncausal-paged-packgqa-splitkv-local-m64n128",
    "fa3-fwd-sm_90a-bf16-hd128-noncausal-varlen-local-persistent",
    "fa3-fwd-sm_90a-bf16-hd256-causal-paged-packgqa-splitkv-softcap-m64n80",
    "attn-combine-sm_90a-bf16-hd64",
    "attn-combine-sm_90a-bf16-hd256",
]


def test_default_set_has_the_model_inference_variants_and_names_round_trip():
    names = {v.name for v in spec.expand_set("default")}
    assert set(NEW_DEFAULT) <= names
    inference = {v.name for v in spec.expand_set("inference")}
    assert set(NEW_DEFAULT) <= inference
    assert "fa3-fwd-sm_90a-bf16-hd64-causal-varlen-sink-persistent" in inference
    for n in NEW_DEFAULT:
        assert spec.parse_name(n).name == n


def test_head_dim_v_is_refused_in_the_decode_forms_naming_what_works():
    spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=192, head_dim_v=128, causal=True,
                      varlen=True)   # packed varlen takes it (DeepSeek MLA prefill)
    with pytest.raises(spec.SpecError, match="head_dim_v"):
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=192, head_dim_v=128, causal=True,
                          varlen=True, paged_kv=True)
    with pytest.raises(ValueError, match="dense forward and packed varlen"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=192, head_dim_v=128, causal=True, split_kv=True)
    # The model axes themselves are buildable now.
    spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False, local=True,
                      learnable_sink=True, softcap=True, split_kv=True, paged_kv=True)
    with pytest.raises(spec.SpecError, match="causal"):
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=True, local=True,
                          varlen=True)


def test_flash_attention_window_conventions_pick_the_axes():
    assert resolve(True, (128, -1)).axes == {"causal": False, "local": True, "softcap": False,
                                              "learnable_sink": False}
    assert resolve(True, (128, -1)).scalars == {"window_left": 128, "window_right": 0}
    assert resolve(False, (-1, 0)).causal and not resolve(False, (-1, 0)).local
    assert resolve(True, (-1, -1), 50.0, True).axes == {"causal": True, "local": False, "softcap": True,
                                                        "learnable_sink": True}


# --------------------------------------------------------------------------- runtime plumbing

SRC = LocalSource()
_found, _ = manifests(SRC, "fa3_fwd")
BUILT = {m.variant for m in _found}
_ptr = itertools.count(1 << 32, 1 << 24)


def arr(shape, dtype):
    return DeviceArray.from_pointer(next(_ptr), tuple(shape), None, dtype, device=0)


def need(*names):
    missing = [n for n in names if n not in BUILT]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in {SRC.home} (make kernels ARCH=sm90)")


@pytest.fixture
def fake_driver(monkeypatch):
    launched = []
    d = kvcache.driver
    monkeypatch.setattr(d, "device_arch", lambda dev: "sm_90a")
    monkeypatch.setattr(d, "sm_count", lambda dev: 132)
    monkeypatch.setattr(d, "resolve_stream", lambda s: (0, None))
    monkeypatch.setattr(OwnedDeviceArray, "empty",
                        classmethod(lambda cls, shape, dtype, device, stream=None, strides=None: arr(shape, dtype)))
    monkeypatch.setattr(kvcache, "_fill_i32", lambda value, n, device, stream, handle: arr((n,), "i32"))
    monkeypatch.setattr(varlen, "_upload_i32", lambda values, device, stream, handle: arr((len(values),), "i32"))
    # the persistent walk's tile counter (the window varlen prefill is on it)
    monkeypatch.setattr(varlen, "_fill_i32", lambda value, n, device, stream, handle: arr((n,), "i32"))

    monkeypatch.setattr(launcher.Kernel, "plan", checked_plan)
    monkeypatch.setattr(launcher.Kernel, "run", lambda self, plan, stream: launched.append((self.variant, plan)))
    kvcache.clear_cache()
    yield launched
    kvcache.clear_cache()


@pytest.mark.parametrize("window", [(128, 0), (-1, -1)])
def test_gpt_oss_paged_decode_with_sink_binds_its_contract(fake_driver, window):
    full = "fa3-fwd-sm_90a-bf16-hd64-causal-paged-packgqa-splitkv-sink-m64n128"
    local = "fa3-fwd-sm_90a-bf16-hd64-noncausal-paged-packgqa-splitkv-local-sink-m64n128"
    need(full, local)
    q, cache = arr((8, 1, 64, 64), "bf16"), arr((300, 16, 8, 64), "bf16")
    kvcache.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=arr((8,), "i32"), page_table=arr((8, 32), "i32"),
                                    window_size=window, learnable_sink=arr((64,), "f32"), num_splits=3, source=SRC)
    (fwd, plan), (comb, _) = fake_driver
    assert fwd == (local if window[0] >= 0 else full) and comb == "attn-combine-sm_90a-bf16-hd64"
    if window[0] >= 0:
        assert plan.scalars["window_left"] == 128 and plan.scalars["window_right"] == 0


def test_window_varlen_prefill_binds_its_contract(fake_driver):
    need("fa3-fwd-sm_90a-bf16-hd128-noncausal-varlen-local-persistent")
    q, k = arr((40, 16, 128), "bf16"), arr((60, 4, 128), "bf16")
    varlen.flash_attn_varlen_func(q, k, k, [0, 0, 1, 18, 40], [0, 5, 5, 30, 60], 22, 30, causal=True,
                                  window_size=(63, -1), source=SRC)
    (name, plan), = fake_driver
    assert name == "fa3-fwd-sm_90a-bf16-hd128-noncausal-varlen-local-persistent"
    assert plan.scalars["window_left"] == 63 and plan.scalars["window_right"] == 0


def test_softcap_decode_hd256(fake_driver):
    need("fa3-fwd-sm_90a-bf16-hd256-causal-paged-packgqa-splitkv-softcap-m64n80")
    q, cache = arr((4, 1, 16, 256), "bf16"), arr((64, 256, 8, 256), "bf16")
    kvcache.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=3000, page_table=arr((4, 16), "i32"),
                                    softcap=50.0, source=SRC)
    assert fake_driver[0][0] == "fa3-fwd-sm_90a-bf16-hd256-causal-paged-packgqa-splitkv-softcap-m64n80"
    assert fake_driver[0][1].scalars["softcap"] == 50.0


def test_unbuilt_combination_names_the_nearest_variants(fake_driver):
    need("fa3-fwd-sm_90a-bf16-hd128-noncausal-paged-packgqa-splitkv-local-m64n128")
    q, cache = arr((2, 1, 32, 128), "bf16"), arr((64, 16, 8, 128), "bf16")
    with pytest.raises(VariantNotFound) as e:
        kvcache.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=100, page_table=arr((2, 16), "i32"),
                                        window_size=(128, 0), softcap=30.0, source=SRC)
    msg = str(e.value)
    assert "softcap=True" in msg and "local=True" in msg and "Nearest" in msg and "SET=inference" in msg
    q, k = arr((40, 16, 128), "bf16"), arr((60, 4, 128), "bf16")
    with pytest.raises(VariantNotFound, match="Nearest"):
        varlen.flash_attn_varlen_func(q, k, k, [0, 40], [0, 60], 40, 60, learnable_sink=arr((16,), "f32"),
                                      softcap=10.0, source=SRC)


def test_bad_sink_and_window_are_refused_before_any_launch(fake_driver):
    q, cache = arr((2, 1, 32, 128), "bf16"), arr((64, 16, 8, 128), "bf16")
    with pytest.raises(InputError, match=r"learnable_sink must be float32 \(heads_q,\) = \(32,\)"):
        kvcache.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=100, page_table=arr((2, 16), "i32"),
                                        learnable_sink=arr((8,), "f32"), source=SRC)
    with pytest.raises(InputError, match="window_size"):
        kvcache.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=100, page_table=arr((2, 16), "i32"),
                                        window_size=(1.5, 0), source=SRC)
    qv, k = arr((40, 16, 128), "bf16"), arr((60, 4, 128), "bf16")
    with pytest.raises(InputError, match="softcap"):
        varlen.flash_attn_varlen_func(qv, k, k, [0, 40], [0, 60], 40, 60, softcap=-1.0, source=SRC)
    assert fake_driver == []


# --------------------------------------------------------------------------- the sink under split-KV

def _finish(s, v, sink):
    """softmax.finish's rule on one row's split (float64): (O, LSE); sink -inf is no sink
    (may_be_absent), and a split with no key and no sink gives O = 0, LSE = -inf."""
    import math
    terms = [math.exp(x) for x in s] + ([math.exp(sink)] if sink != -math.inf else [])
    total = sum(terms)
    if total == 0:
        return [0.0] * len(v[0]) if v else [0.0], -math.inf
    o = [sum(math.exp(x) * vj[c] for x, vj in zip(s, v)) / total for c in range(len(v[0]))] if v else [0.0]
    return o, math.log(total)


def _combine(parts):
    """attn_combine's rule: LSE = log sum exp(lse_s); O = sum exp(lse_s - LSE) O_s (-inf splits skipped)."""
    import math
    live = [(o, l) for o, l in parts if l != -math.inf]
    if not live:
        return [0.0] * len(parts[0][0]), -math.inf
    top = max(l for _, l in live)
    lse = top + math.log(sum(math.exp(l - top) for _, l in live))
    return [sum(math.exp(l - lse) * o[c] for o, l in live) for c in range(len(live[0][0]))], lse


@pytest.mark.parametrize("cuts", [[0, 0, 5, 9], [0, 3, 3, 9], [0, 9], [0, 2, 4, 6, 9], [0, 0, 0, 0]])
def test_sink_in_split_zero_only_is_counted_once_by_the_combine(cuts):
    """What inference.row_sinks relies on: the sink in split 0 (even an empty one), -inf in the
    others, then the combine, equals one softmax with the sink over every key."""
    import math
    import random
    rnd = random.Random(len(cuts) * 7 + cuts[1])
    n = cuts[-1]
    s = [rnd.gauss(0, 2) for _ in range(n)]
    v = [[rnd.gauss(0, 1) for _ in range(3)] for _ in range(n)]
    sink = rnd.gauss(0, 2)
    parts = [_finish(s[a:b], v[a:b], sink if i == 0 else -math.inf) for i, (a, b) in enumerate(zip(cuts, cuts[1:]))]
    o, lse = _combine([(p if len(p) == 3 else [0.0] * 3, l) for p, l in parts])
    want_o, want_lse = _finish(s, v, sink)
    if not v:
        want_o = [0.0] * 3
    assert lse == pytest.approx(want_lse) and o == pytest.approx(want_o, abs=1e-12)


def test_head_dim_v_in_the_inference_apis_says_where_it_is_built(fake_driver):
    q, k, v = arr((2, 1, 16, 192), "bf16"), arr((64, 16, 4, 192), "bf16"), arr((64, 16, 4, 128), "bf16")
    with pytest.raises(InputError, match="only flash_attn_func's dense forward and flash_attn_varlen_func's packed"):
        kvcache.flash_attn_with_kvcache(q, k, v, cache_seqlens=10, page_table=arr((2, 4), "i32"), source=SRC)
    qv = arr((40, 16, 192), "bf16")
    with pytest.raises(InputError, match="packed bf16/fp16 k and v only; a paged cache"):
        varlen.flash_attn_varlen_func(qv, k, v, [0, 40], None, 40, 64, seqused_k=[30], page_table=[[0, 1, 2, 3]],
                                      source=SRC)
    assert fake_driver == []


# --------------------------------------------------------------------------- beside e4m3 and the persistent walk

@pytest.mark.parametrize("variant", [{"local": True}, {"softcap": True}, {"learnable_sink": True}])
def test_the_persistent_varlen_walk_takes_the_model_variants_as_a_candidate(variant):
    """The walk passes the window, softcap and sink as the one-tile form does (bench.ab
    varlen-model); a config that names no scheduler stays one tile per CTA, without the counter,
    and the walk's contract takes the variant's own arguments too."""
    plain = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, varlen=True, **variant)
    assert plain.scheduler == "single" and not plain.varlen_dynamic
    walk = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, varlen=True, scheduler="persistent",
                     varlen_dynamic=True, **variant)
    one, many = (varlen_contract_of(c) for c in (plain, walk))
    assert set(one.scalars) == set(many.scalars)
    assert set(many.tensors) - set(one.tensors) == {"tile_counter"}


@pytest.mark.parametrize("variant", [{"local": True}, {"softcap": True}, {"learnable_sink": True}])
def test_varlen_takes_e4m3_and_the_model_variants_but_not_both(variant):
    spec.make_variant("fa3_fwd", arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, varlen=True)
    spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False, varlen=True, **variant)
    with pytest.raises(spec.SpecError, match="dtype=e4m3 does not take the model variants"):
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, varlen=True, **variant)
    with pytest.raises(ValueError, match="e4m3 does not take the model variants"):
        FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, split_kv=True, pack_gqa=True,
                  paged_kv=True, tile_m=64, **variant)


@pytest.mark.parametrize("kw, named", [({"window_size": (128, 0)}, "window_size"), ({"softcap": 30.0}, "softcap"),
                                       ({"learnable_sink": "sink"}, "learnable_sink")])
def test_e4m3_inputs_with_a_model_variant_are_refused_by_name(kw, named):
    """Before any kernel is looked up: no e4m3 variant takes them (FwdConfig refuses the pair)."""
    if "learnable_sink" in kw:
        kw = {"learnable_sink": arr((4,), "f32")}
    cache, table = arr((8, 16, 2, 128), "e4m3"), arr((1, 8), "i32")
    with pytest.raises(InputError, match=f"flash_attn_with_kvcache with e4m3 inputs takes no {named}"):
        kvcache.prepare_kvcache(arr((1, 1, 4, 128), "e4m3"), cache, cache, cache_seqlens=5, page_table=table,
                                stream=0, **kw)
    kv = arr((40, 2, 128), "e4m3")
    with pytest.raises(InputError, match=f"flash_attn_varlen_func with e4m3 inputs takes no {named}"):
        varlen.prepare_varlen(arr((40, 4, 128), "e4m3"), kv, kv, [0, 40], [0, 40], stream=0, **kw)
