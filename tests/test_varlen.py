"""Varlen attention on the CPU: the sequence-length seam, the varlen tile order, the spec's
sets, the contract's bindings, flash_attn_varlen_func's checks and plumbing against the real
contracts of built variants with the driver faked, and (slow) a real cross-compile."""

from __future__ import annotations

import itertools
import random

import pytest
from conftest import module_available

from cubinforge.generator import spec
from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.schedule import tiles_from, varlen_tile, varlen_tile_bound
from cubinforge.generator.kernels.fa3_fwd_sm90.seqlens import SeqLens
from cubinforge.runtime import InputError, kvcache, launcher, tensormap, varlen
from cubinforge.runtime.arrays import DeviceArray, OwnedDeviceArray
from cubinforge.runtime.contract import bind
from cubinforge.runtime.registry_source import LocalSource, manifests
from test_runtime_fixtures import built_records, checked_plan, varlen_contract_of

HAS_DSL = module_available("cutlass")


# --------------------------------------------------------------------------- the seam

def test_seqlens_dense_and_seqused_forms():
    assert SeqLens.dense(300, 999) == SeqLens(0, 300, 0, 999)
    assert SeqLens.from_seqused_k(2, 7, [5, 6, 40]) == SeqLens(0, 7, 0, 40)


def test_seqlens_varlen_offsets_and_seqused_flags():
    cu_q, cu_k = [0, 3, 3, 20], [0, 10, 11, 50]
    used_q, used_k = [1, 0, 17], [4, 1, 2]
    for b, want in enumerate([(0, 3, 0, 10), (3, 0, 10, 1), (3, 17, 11, 39)]):
        assert SeqLens.varlen(b, cu_q, cu_k, used_q, used_k, 0, 0) == SeqLens(*want)
    # the flags pick seqused; offsets stay cu_seqlens'
    assert SeqLens.varlen(2, cu_q, cu_k, used_q, used_k, 1, 1) == SeqLens(3, 17, 11, 2)
    assert SeqLens.varlen(0, cu_q, cu_k, used_q, used_k, 1, 0) == SeqLens(0, 1, 0, 10)
    # paged: keys live in the cache, through the page table: no packed offset
    assert SeqLens.varlen(2, cu_q, cu_k, used_q, used_k, 0, 1, paged_k=True) == SeqLens(3, 17, 0, 2)
    assert SeqLens.q_len(2, cu_q, used_q, 0) == 17 and SeqLens.q_len(0, cu_q, used_q, 1) == 1


# --------------------------------------------------------------------------- tile order

def _cases():
    rng = random.Random(3)
    yield [0]
    yield [1]
    yield [0, 0, 0]
    yield [32, 1, 0, 7, 7, 1]
    yield [1] * 40
    for _ in range(30):
        yield [rng.choice([0, 0, 1, 2, 5, 17, 33]) for _ in range(rng.randint(1, 70))]


@pytest.mark.parametrize("tiles", list(_cases()))
def test_varlen_tile_order_covers_every_tile_once_longest_first(tiles):
    total = sum(tiles)
    got = [varlen_tile(t, tiles) for t in range(total)]
    assert sorted(got) == sorted((b, m) for b, n in enumerate(tiles) for m in range(n))  # a bijection
    assert [m for _, m in got] == sorted((m for _, m in got), reverse=True)  # rounds of descending m block
    for m in set(m for _, m in got):  # batches in order inside a round
        bs = [b for b, mm in got if mm == m]
        assert bs == sorted(bs)
    assert varlen_tile(total, tiles) is None and varlen_tile(total + 5, tiles) is None
    assert tiles_from(tiles, 0) == total


@pytest.mark.parametrize("tile_m", [64, 128, 192])
def test_varlen_tile_bound_covers_any_ragged_batch(tile_m):
    rng = random.Random(tile_m)
    for _ in range(200):
        lens = [rng.choice([0, 1, 17, tile_m - 1, tile_m, tile_m + 1, 4096]) for _ in range(rng.randint(1, 20))]
        tiles = sum(-(-n // tile_m) for n in lens)
        bound = varlen_tile_bound(sum(lens) + rng.randint(0, 50), len(lens), tile_m)
        assert tiles <= bound <= tiles + len(lens) + 50 // tile_m + 1


# --------------------------------------------------------------------------- spec

def test_default_set_has_varlen_prefill_and_paged_chunked_prefill():
    names = {v.name for v in spec.expand_set("default")}
    for dt in ("bf16", "fp16"):
        for hd in (64, 128):   # on the persistent walk (config.TUNED_VARLEN, varlen_dynamic)
            for c in ("causal", "noncausal"):
                assert f"fa3-fwd-sm_90a-{dt}-hd{hd}-{c}-varlen-persistent" in names
            for form in ("hd192-dv128", "hd256"):   # DeepSeek MLA prefill, Gemma
                assert f"fa3-fwd-sm_90a-{dt}-{form}-{c}-varlen-persistent" in names
    assert "fa3-fwd-sm_90a-bf16-hd128-causal-varlen-paged-persistent" in names   # config.TUNED_VARLEN_FORMS
    assert "fa3-fwd-sm_90a-bf16-hd128-noncausal-varlen-paged-persistent" in names
    inf = [v for v in spec.expand_set("inference") if v.family == "fa3_fwd" and v["varlen"]]
    plain = [v for v in inf if not (v["local"] or v["softcap"] or v["learnable_sink"])]  # model ones: issue 12
    assert len(plain) == 24
    # Every varlen form of the set is on the walk since session 20 (check20/b1 timed the last
    # one-tile forms against it): none is left one tile per CTA, paged and model axes included.
    assert all(v["scheduler"] == "persistent" for v in inf)
    model = {v.name for v in inf if v not in plain}
    assert model == {"fa3-fwd-sm_90a-bf16-hd128-causal-varlen-paged-softcap-persistent",
                     "fa3-fwd-sm_90a-bf16-hd128-causal-varlen-softcap-persistent",
                     "fa3-fwd-sm_90a-bf16-hd128-noncausal-varlen-local-persistent",
                     "fa3-fwd-sm_90a-bf16-hd128-noncausal-varlen-paged-local-persistent",
                     "fa3-fwd-sm_90a-bf16-hd64-causal-varlen-sink-persistent",
                     "fa3-fwd-sm_90a-bf16-hd64-noncausal-varlen-local-persistent-m128n128",
                     "fa3-fwd-sm_90a-bf16-hd64-noncausal-varlen-local-sink-persistent-m128n128",
                     "fa3-fwd-sm_90a-bf16-hd64-noncausal-varlen-paged-local-persistent-m128n128",
                     "fa3-fwd-sm_90a-bf16-hd64-noncausal-varlen-sink-persistent",
                     "fa3-fwd-sm_90a-fp16-hd128-noncausal-varlen-local-persistent",
                     "fa3-fwd-sm_90a-fp16-hd128-noncausal-varlen-paged-local-persistent",
                     "fa3-fwd-sm_90a-fp16-hd64-noncausal-varlen-local-persistent-m128n128",
                     "fa3-fwd-sm_90a-fp16-hd64-noncausal-varlen-paged-local-persistent-m128n128"}
    for n in names:
        assert spec.parse_name(n).name == n


def test_varlen_refuses_what_is_not_built():
    with pytest.raises(spec.SpecError, match="varlen"):
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False, varlen=True,
                          split_kv=True)
    with pytest.raises(spec.SpecError, match="varlen"):
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, varlen=True,
                          scheduler="persistent")   # the persistent walk passes no descales
    with pytest.raises(spec.SpecError, match="lpt"):
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False, varlen=True,
                          scheduler="lpt")
    with pytest.raises(ValueError, match="varlen"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, varlen=True, pack_gqa=True, tile_m=64)
    assert FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, varlen=True).inference


def test_a_value_head_dim_of_its_own_is_packed_varlens_only():
    mla = dict(arch="sm_90a", dtype="bf16", head_dim=192, head_dim_v=128, causal=True, varlen=True)
    assert FwdConfig(**mla, scheduler="persistent").head_dim_v == 128
    # O staged in Q's buffer takes a (tile_m, head_dim_v) view of it (config.TUNED_VARLEN_DTYPE's bf16 forms)
    assert FwdConfig(**mla, scheduler="persistent").o_smem_store
    assert not FwdConfig(**{**mla, "dtype": "fp16"}, scheduler="persistent").o_smem_store
    g = FwdConfig(arch="sm_90a", dtype="fp16", head_dim=256, causal=True, varlen=True, scheduler="persistent")
    assert g.o_smem_store and g.o_tma_ragged and not g.rescale_threshold
    for over, word in ((dict(paged_kv=True), "paged_kv"), (dict(dtype="e4m3"), "e4m3"),
                       (dict(varlen=False, split_kv=True, pack_gqa=True, tile_m=64), "without varlen")):
        with pytest.raises(ValueError, match=word):
            FwdConfig(**{**mla, **over})
    spec.make_variant("fa3_fwd", **mla, scheduler="persistent")
    with pytest.raises(spec.SpecError, match="e4m3 varlen reads V as wide as K"):
        spec.make_variant("fa3_fwd", **{**mla, "dtype": "e4m3"})
    with pytest.raises(spec.SpecError, match="decode forms"):
        spec.make_variant("fa3_fwd", **{**mla, "varlen": False, "paged_kv": True})


def test_a_value_head_dim_of_its_own_in_the_varlen_contract():
    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=192, head_dim_v=128, causal=True, varlen=True,
                    scheduler="persistent")
    c = varlen_contract_of(cfg)
    b, total_q, total_k, hq, hkv = 3, 500, 700, 16, 16
    t = {"q": arr((total_q, hq, 192), "bf16"), "k": arr((total_k, hkv, 192), "bf16"),
         "v": arr((total_k, hkv, 128), "bf16"), "o": arr((total_q, hq, 128), "bf16"),
         "lse": arr((hq, total_q), "f32"), "cu_seqlens_q": arr((b + 1,), "i32"), "cu_seqlens_k": arr((b + 1,), "i32"),
         "seqused_q": arr((b,), "i32"), "seqused_k": arr((b,), "i32"), "tile_counter": arr((2,), "i32")}
    bound = bind(c, t, {}, {"sm_count": 132})
    for p in c.params:
        if p.kind == "tensormap":
            tensormap.tensormap_args(p.spec, bound.tensors[p.spec["tensor"]], p.spec["tensor"])
    for name, wrong in (("o", arr((total_q, hq, 192), "bf16")), ("v", arr((total_k, hkv, 192), "bf16"))):
        with pytest.raises(InputError, match="head_dim_v"):
            bind(c, {**t, name: wrong}, {}, {"sm_count": 132})


def test_the_persistent_walk_takes_a_tile_counter_the_runtime_owns():
    """The shipped persistent packed forms hand tiles out from a counter (varlen_dynamic): the
    contract's last parameter, a bare pointer to two int32; the static walk and the one tile
    per CTA form take none; a counter of another size is refused at bind time."""
    dyn = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, varlen=True, scheduler="persistent")
    assert dyn.varlen_dynamic
    c = varlen_contract_of(dyn)
    assert c.params[-1].name == "tile_counter" and c.params[-1].size == 8
    assert c.tensors["tile_counter"].role == "output" and c.tensors["tile_counter"].dtype == "i32"
    for other in (dict(scheduler="persistent", varlen_dynamic=False), dict(scheduler="single")):
        cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, varlen=True, **other)
        assert "tile_counter" not in varlen_contract_of(cfg).tensors
    with pytest.raises(ValueError, match="varlen_dynamic hands out the persistent varlen walk's tiles"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, varlen=True, scheduler="single",
                  varlen_dynamic=True)
    # A paged cache and the model variants take it too (check17/s1); e4m3 varlen has no walk.
    paged = dict(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, varlen=True, paged_kv=True,
                 scheduler="persistent")
    assert FwdConfig(**paged).varlen_dynamic
    assert not FwdConfig(**paged, varlen_dynamic=False).varlen_dynamic
    assert varlen_contract_of(FwdConfig(**paged)).params[-1].name == "tile_counter"
    assert FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, local=True, varlen=True,
                     scheduler="persistent").varlen_dynamic
    b, total = 2, 300
    t = {"q": arr((total, 8, 128), "bf16"), "k": arr((total, 8, 128), "bf16"), "v": arr((total, 8, 128), "bf16"),
         "o": arr((total, 8, 128), "bf16"), "lse": arr((8, total), "f32"), "cu_seqlens_q": arr((b + 1,), "i32"),
         "cu_seqlens_k": arr((b + 1,), "i32"), "seqused_q": arr((b,), "i32"), "seqused_k": arr((b,), "i32")}
    bind(c, {**t, "tile_counter": arr((2,), "i32")}, {}, {"sm_count": 132})
    with pytest.raises(InputError, match="tile_counter"):
        bind(c, {**t, "tile_counter": arr((3,), "i32")}, {}, {"sm_count": 132})


# --------------------------------------------------------------------------- contract

_ptr = itertools.count(1 << 32, 1 << 24)


def arr(shape, dtype):
    return DeviceArray.from_pointer(next(_ptr), tuple(shape), None, dtype, device=0)  # compact row-major


@pytest.mark.parametrize("paged", [False, True])
def test_varlen_contract_binds_a_1d_grid_over_the_tile_bound(paged):
    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, varlen=True, paged_kv=paged)
    c = varlen_contract_of(cfg)
    b, total_q, hq, hkv = 16, 17850, 16, 4
    kv = arr((64, 256, hkv, 128), "bf16") if paged else arr((20000, hkv, 128), "bf16")
    t = {"q": arr((total_q, hq, 128), "bf16"), "k": kv, "v": kv, "o": arr((total_q, hq, 128), "bf16"),
         "lse": arr((hq, total_q), "f32"), "cu_seqlens_q": arr((b + 1,), "i32"), "cu_seqlens_k": arr((b + 1,), "i32"),
         "seqused_q": arr((b,), "i32"), "seqused_k": arr((b,), "i32")}
    if paged:
        t["page_table"] = arr((b, 32), "i32")
    bound = bind(c, t, {"has_seqused_q": 1}, {"sm_count": 132})
    assert bound.grid == (varlen_tile_bound(total_q, b, 128) * hq, 1, 1)
    for p in c.params:  # the tensor-map recipes fit the packed tensors
        if p.kind == "tensormap":
            tensormap.tensormap_args(p.spec, bound.tensors[p.spec["tensor"]], p.spec["tensor"])
    t["cu_seqlens_k"] = arr((b,), "i32")
    with pytest.raises(InputError, match="cu_seqlens"):
        bind(c, t, {}, {"sm_count": 132})
    t["cu_seqlens_k"], t["lse"] = arr((b + 1,), "i32"), arr((total_q, hq), "f32")
    with pytest.raises(InputError, match="lse"):
        bind(c, t, {}, {"sm_count": 132})


# --------------------------------------------------------------------------- host checks

def test_check_seqlens_names_the_bad_entry():
    ok = dict(cu_q=[0, 3, 3, 20], cu_k=[0, 10, 11, 50], used_q=None, used_k=None, total_q=20, total_k=50)
    varlen.check_seqlens(**ok)
    with pytest.raises(InputError, match=r"non-decreasing: cu_seqlens_q\[2\] = 2 < cu_seqlens_q\[1\] = 3"):
        varlen.check_seqlens(**{**ok, "cu_q": [0, 3, 2, 20]})
    with pytest.raises(InputError, match=r"cu_seqlens_k\[-1\] = 50 is past the 49 rows of k"):
        varlen.check_seqlens(**{**ok, "total_k": 49})
    with pytest.raises(InputError, match="negative"):
        varlen.check_seqlens(**{**ok, "cu_q": [-1, 3, 3, 20]})
    with pytest.raises(InputError, match=r"seqused_q\[0\] = 4 is longer than sequence 0's slot of 3"):
        varlen.check_seqlens(**{**ok, "used_q": [4, 0, 1]})
    # paged: seqused_k bounded by the page table, not by cu_seqlens_k
    paged = dict(ok, cu_k=None, total_k=None, used_k=[17, 0, 33], paged=True, max_pages=3, page_size=16,
                 num_pages=8)
    varlen.check_seqlens(**paged, table=[1, 2, -5, 0, 0, 0, 3, 4, 7])
    with pytest.raises(InputError, match=r"page_table\[2, 2\] = 8 is not a page of the cache \(0..7\)"):
        varlen.check_seqlens(**paged, table=[1, 2, -5, 0, 0, 0, 3, 4, 8])
    with pytest.raises(InputError, match="3 pages of 16, but page_table has 2 columns"):
        varlen.check_seqlens(**{**paged, "max_pages": 2}, table=[1, 2, 0, 0, 3, 4])


# --------------------------------------------------------------------------- API with a fake driver

SRC = LocalSource()
_found, _ = manifests(SRC, "fa3_fwd")
HAVE = {(m.axes["dtype"], m.axes["head_dim"], m.axes["causal"], bool(m.axes.get("paged_kv")))
        for m in _found if m.axes.get("varlen")}
_gather, _ = manifests(SRC, "kv_gather")
need_built = pytest.mark.skipif(("bf16", 128, True, True) not in HAVE,
                                reason=f"no bf16 hd128 varlen variants in {SRC.home} (make kernels ARCH=sm90)")


@pytest.fixture
def fake_driver(monkeypatch):
    launched = []
    d = varlen.driver
    monkeypatch.setattr(d, "device_arch", lambda dev: "sm_90a")
    monkeypatch.setattr(d, "sm_count", lambda dev: 132)
    monkeypatch.setattr(d, "resolve_stream", lambda s: (0, None))
    monkeypatch.setattr(OwnedDeviceArray, "empty",
                        classmethod(lambda cls, shape, dtype, device, stream=None, strides=None: arr(shape, dtype)))
    uploads = []

    def upload(values, device, stream, handle):
        uploads.append(list(values))
        return arr((len(values),), "i32")

    monkeypatch.setattr(varlen, "_upload_i32", upload)

    def fill_i32(value, n, device, stream, handle):
        uploads.append(("fill", value, n))
        return arr((n,), "i32")

    monkeypatch.setattr(varlen, "_fill_i32", fill_i32)

    monkeypatch.setattr(launcher.Kernel, "plan", checked_plan)
    monkeypatch.setattr(launcher.Kernel, "run", lambda self, plan, stream: launched.append((self.variant, plan)))
    kvcache.clear_cache()
    yield launched, uploads
    kvcache.clear_cache()


def _packed(total_q=40, total_k=60, hq=16, hkv=4, d=128, dtype="bf16"):
    return arr((total_q, hq, d), dtype), arr((total_k, hkv, d), dtype), arr((total_k, hkv, d), dtype)


@need_built
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_used", [False, True])
def test_packed_launch_binds_its_contract(fake_driver, causal, with_used):
    launched, uploads = fake_driver
    q, k, v = _packed()
    cu = [0, 0, 1, 18, 40]
    used = dict(seqused_q=arr((4,), "i32"), seqused_k=arr((4,), "i32")) if with_used else {}
    out, lse = varlen.flash_attn_varlen_func(q, k, v, cu, [0, 5, 5, 30, 60], 22, 30, causal=causal, source=SRC,
                                             **used)
    (name, plan), = launched
    # packed hd128 ships on the persistent walk (config.TUNED_VARLEN): one CTA per SM at most
    assert name == f"fa3-fwd-sm_90a-bf16-hd128-{'causal' if causal else 'noncausal'}-varlen-persistent"
    assert plan.grid == (min(varlen_tile_bound(40, 4, 128) * 16, 132), 1, 1)
    assert plan.scalars == {"has_seqused_q": int(with_used), "has_seqused_k": int(with_used)}
    # host cu_seqlens checked and copied over; the walk's tile counter zeroed, bound by the plan
    assert uploads == [cu, [0, 5, 5, 30, 60], ("fill", 0, 2)]
    assert out.shape == (40, 16, 128) and lse.shape == (16, 40)


@need_built
@pytest.mark.parametrize("page", [16, 256])
def test_paged_launch_binds_its_contract(fake_driver, page):
    launched, _ = fake_driver
    q = arr((40, 32, 128), "bf16")
    cache = arr((64, page, 8, 128), "bf16")
    varlen.flash_attn_varlen_func(q, cache, cache, arr((5,), "i32"), None, seqused_k=arr((4,), "i32"),
                                  page_table=arr((4, 16), "i32"), causal=True, source=SRC)
    (name, plan), = launched
    assert name == "fa3-fwd-sm_90a-bf16-hd128-causal-varlen-paged-persistent" and plan.scalars["has_seqused_k"] == 1


@need_built
@pytest.mark.skipif(not any(m.axes.get("dtype") == "bf16" and m.axes.get("head_dim") == 128 for m in _gather),
                    reason="no kv_gather bf16 hd128")
def test_page_size_1_gathers_then_runs_the_packed_form(fake_driver):
    launched, uploads = fake_driver
    q = arr((40, 32, 128), "bf16")
    cache = arr((512, 1, 8, 128), "bf16")
    varlen.flash_attn_varlen_func(q, cache, cache, arr((5,), "i32"), None, seqused_k=arr((4,), "i32"),
                                  page_table=arr((4, 100), "i32"), causal=True, source=SRC)
    names = [n for n, _ in launched]
    assert names[0].startswith("kv-gather") and names[1] == "fa3-fwd-sm_90a-bf16-hd128-causal-varlen-persistent"
    assert uploads[-2] == [0, 100, 200, 300, 400]  # each sequence's gathered rows: one capacity apart
    assert uploads[-1] == ("fill", 0, 2)  # then the packed walk's tile counter


@need_built
def test_bad_inputs_are_refused_before_the_launch(fake_driver):
    launched, _ = fake_driver
    q, k, v = _packed()
    f = varlen.flash_attn_varlen_func
    with pytest.raises(InputError, match=r"non-decreasing: cu_seqlens_q\[2\] = 1 < cu_seqlens_q\[1\] = 5"):
        f(q, k, v, [0, 5, 1, 40], [0, 1, 2, 3], None, None, source=SRC)
    with pytest.raises(InputError, match=r"cu_seqlens_q\[-1\] = 41 is past the 40 rows of q"):
        f(q, k, v, [0, 5, 6, 41], [0, 1, 2, 3], None, None, source=SRC)
    with pytest.raises(InputError, match=r"cu_seqlens_k must have batch \+ 1 = 4 entries"):
        f(q, k, v, [0, 5, 6, 40], [0, 1, 3], None, None, source=SRC)
    with pytest.raises(InputError, match="cu_seqlens_k must be int32"):
        f(q, k, v, [0, 5, 6, 40], arr((4,), "f32"), None, None, source=SRC)
    with pytest.raises(InputError, match="integers"):
        f(q, k, v, [0, 5.5, 6, 40], [0, 1, 2, 3], None, None, source=SRC)
    with pytest.raises(InputError, match=r"seqused_k must be int32 \(batch=3,\)"):
        f(q, k, v, arr((4,), "i32"), arr((4,), "i32"), None, None, seqused_k=arr((4,), "i32"), source=SRC)
    with pytest.raises(InputError, match="packed"):
        f(arr((1, 40, 16, 128), "bf16"), k, v, [0, 40], [0, 60], None, None, source=SRC)
    with pytest.raises(InputError, match="split-KV"):
        f(q, k, v, [0, 40], [0, 60], None, None, num_splits=4, source=SRC)
    with pytest.raises(InputError, match="pack-GQA"):
        f(q, k, v, [0, 40], [0, 60], None, None, pack_gqa=True, source=SRC)
    with pytest.raises(InputError, match=r"lse must be float32 \(heads_q, total_q\)"):
        f(q, k, v, [0, 40], [0, 60], None, None, lse=arr((1, 16, 40), "f32"), source=SRC)
    cache = arr((8, 16, 4, 128), "bf16")
    with pytest.raises(InputError, match=r"page_table\[1, 0\] = 9 is not a page of the cache \(0..7\)"):
        f(q, cache, cache, [0, 20, 40], None, None, None, seqused_k=[16, 3], page_table=[[0, 1], [9, 2]],
          source=SRC)
    with pytest.raises(InputError, match="paged cache"):
        f(q, k, v, [0, 20, 40], None, None, None, seqused_k=[16, 3], page_table=[[0, 1], [2, 3]], source=SRC)
    assert launched == []


@pytest.mark.skipif(not any(m.axes.get("head_dim_v") == 128 and m.axes.get("head_dim") == 192 for m in _found
                            if m.axes.get("varlen")), reason=f"no (192, 128) varlen variant in {SRC.home}")
def test_mla_prefill_takes_v_of_its_own_head_dim(fake_driver):
    launched, _ = fake_driver
    q, k = arr((40, 16, 192), "bf16"), arr((60, 16, 192), "bf16")
    v = arr((60, 16, 128), "bf16")
    out, lse = varlen.flash_attn_varlen_func(q, k, v, [0, 17, 40], [0, 30, 60], 23, 30, causal=True, source=SRC)
    (name, plan), = launched
    assert name == "fa3-fwd-sm_90a-bf16-hd192-dv128-causal-varlen-persistent"
    assert out.shape == (40, 16, 128) and lse.shape == (16, 40)
    with pytest.raises(InputError, match=r"out must be \(40, 16, 128\) bf16 \(q's rows, v's head dim\)"):
        varlen.flash_attn_varlen_func(q, k, v, [0, 40], [0, 60], out=arr((40, 16, 192), "bf16"), source=SRC)
    with pytest.raises(InputError, match="paged cache"):
        varlen.flash_attn_varlen_func(q, arr((8, 16, 16, 192), "bf16"), arr((8, 16, 16, 128), "bf16"), [0, 40], None,
                                      seqused_k=[16], page_table=[[0]], source=SRC)


@need_built
def test_empty_batch_launches_nothing(fake_driver):
    launched, _ = fake_driver
    q, k, v = _packed()
    out, lse = varlen.flash_attn_varlen_func(q, k, v, [0], [0], 0, 0, source=SRC)
    assert launched == [] and lse.shape == (16, 40)


# --------------------------------------------------------------------------- real compile

@pytest.mark.slow
@pytest.mark.skipif(not HAS_DSL, reason="needs the CuTe DSL")
def test_varlen_variants_cross_compile_and_match_the_cubin(home):
    """Through the pipeline: the contract's params are checked against the cubin's table."""
    chosen = [spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=True, varlen=True,
                                paged_kv=True)]
    _, (rec,) = built_records(chosen)
    names = [p["name"] for p in rec["contract"]["params"]]
    assert names[-7:-2] == ["cu_seqlens_q", "cu_seqlens_k", "seqused_q", "has_seqused_q", "has_seqused_k"]
    assert "flash_attn_varlen_func" in str(rec["metadata"]) and "paged chunked prefill" in str(rec["metadata"])


def _warp_varlen_tile(t, tiles):
    """inference.FlashFwdSm90Inference.varlen_tile line by line, a warp as 32 lanes of lists
    (redux = sum/max over lanes, ballot + popc = rank among the lanes that vote)."""
    nb = len(tiles)
    chunks = (nb + 31) // 32

    def lane_tiles(c):
        return [tiles[c * 32 + l] if c * 32 + l < nb else 0 for l in range(32)]

    n0 = lane_tiles(0)
    total, top = sum(n0), max(n0)
    for c in range(1, chunks):
        n = lane_tiles(c)
        total, top = total + sum(n), max(top, max(n))
    lo, hi, a_hi = 0, top, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        a = sum(max(x - mid, 0) for x in n0)
        for c in range(1, chunks):
            a += sum(max(x - mid, 0) for x in lane_tiles(c))
        if a > t:
            lo = mid
        else:
            hi, a_hi = mid, a
    k, batch, seen = t - a_hi, 0, 0
    for c in range(chunks):
        n = n0 if c == 0 else lane_tiles(c)
        votes = [x > lo for x in n]
        mine = [c * 32 + l if votes[l] and seen + sum(votes[:l]) == k else 0 for l in range(32)]
        batch = max(batch, max(mine))
        seen += sum(votes)
    return batch, lo, int(t < total)


@pytest.mark.parametrize("tiles", [list(c) for c in _cases()] + [[3] * 33 + [0, 9] + [1] * 40])
def test_the_kernels_warp_mapping_is_the_reference_order(tiles):
    for t in range(sum(tiles) + 3):
        want = varlen_tile(t, tiles)
        got = _warp_varlen_tile(t, tiles)
        assert (got[:2] if got[2] else None) == want, (t, got, want)
