"""The 64 x 64 two-CTA decode forms: the config they are built with (config.TUNED_DECODE),
the default set's entries, the dispatcher's rules that pick them (`decode-two-ctas`,
`decode-pack-hd128`), and the launch contract's shared-memory carveout that gets them their
second CTA an SM (Python and C++ bundle alike). No GPU, no DSL."""

from __future__ import annotations

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90.config import TUNED_DECODE, FwdConfig
from cubinforge.runtime.dispatch import Problem, rank

_DENSE = dict(arch="sm_90a", head_dim=128, tile_m=64, pack_gqa=True)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("split", [False, True])
def test_the_dense_64x64_decode_form_runs_two_ctas_an_sm_with_two_stages(dtype, split):
    cfg = FwdConfig(dtype=dtype, causal=True, tile_n=64, split_kv=split, **_DENSE)
    assert (cfg.ctas_per_sm, cfg.stages) == (2, 2)
    assert cfg.register_split == (216, 40)
    assert TUNED_DECODE[(128, (64, 64), False)] == {"stages": 2, "ctas_per_sm": 2}


def test_other_decode_forms_keep_one_cta_an_sm():
    assert FwdConfig(dtype="bf16", causal=True, **_DENSE).ctas_per_sm == 1  # 64 x 128
    paged = FwdConfig(dtype="bf16", causal=True, paged_kv=True, **_DENSE)
    assert (paged.ctas_per_sm, paged.stages) == (1, 3)  # the shipped paged 64 x 128
    e4m3 = FwdConfig(dtype="e4m3", causal=True, tile_n=64, **_DENSE)
    assert e4m3.ctas_per_sm == 1
    # Asked for explicitly, one CTA an SM stays one (bench.ab's labels mean what they say).
    assert FwdConfig(dtype="bf16", causal=True, tile_n=64, ctas_per_sm=1, **_DENSE).ctas_per_sm == 1
    with pytest.raises(ValueError, match="ctas_per_sm=2"):
        FwdConfig(dtype="bf16", causal=True, tile_n=64, stages=3, ctas_per_sm=2, **_DENSE)


@pytest.mark.parametrize("set_name", ["default", "inference"])
def test_the_sets_build_the_dense_hd128_decode_forms_at_64x64_only(set_name):
    from cubinforge.generator.spec import expand_set

    names = {v.name for v in expand_set(set_name)}
    for dtype in ("bf16", "fp16"):
        for mask in ("causal", "noncausal"):
            for split in ("-splitkv", ""):
                assert f"fa3-fwd-sm_90a-{dtype}-hd128-{mask}-packgqa{split}-m64n64" in names
                assert f"fa3-fwd-sm_90a-{dtype}-hd128-{mask}-packgqa{split}-m64n128" not in names
    # Paged: unsplit at 64 x 64 (two CTAs), split at 64 x 128 (it lost split two ways, c4).
    for mask in ("causal", "noncausal"):
        assert f"fa3-fwd-sm_90a-bf16-hd128-{mask}-paged-packgqa-m64n64" in names
        assert f"fa3-fwd-sm_90a-bf16-hd128-{mask}-paged-packgqa-m64n128" not in names
        assert f"fa3-fwd-sm_90a-bf16-hd128-{mask}-paged-packgqa-splitkv-m64n128" in names
        assert f"fa3-fwd-sm_90a-bf16-hd128-{mask}-paged-packgqa-splitkv-m64n64" not in names


def test_tile_n_64_marks_only_the_two_cta_forms_at_hd128():
    # The decode-two-ctas rule prefers tile_n=64 among hd128 dense variants: that stays a mark
    # of the two-CTA forms only while no other hd128 variant of any set has it.
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
    from cubinforge.generator.spec import SETS, expand_set

    for name in SETS:
        for v in expand_set(name):
            ax = v.axes
            if v.family == "fa3_fwd" and ax["head_dim"] == 128 and ax["tile_n"] == 64:
                cfg = FwdConfig(**{k: ax[k] for k in ("arch", "dtype", "head_dim", "causal", "tile_m", "tile_n",
                                                       "split_kv", "pack_gqa", "paged_kv", "varlen")})
                assert cfg.ctas_per_sm == 2, (name, v.name)


class _Form:
    def __init__(self, tile_n, **axes):
        self.axes = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True, "pack_gqa": True,
                     "split_kv": False, "tile_m": 64, "tile_n": tile_n, **axes}
        self.variant = f"fa3-fwd-sm_90a-bf16-hd128-causal-packgqa-m64n{tile_n}"


def _best(seqlen_q, forms, **axes):
    problem = Problem("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True,
                                  "pack_gqa": True, "split_kv": False, **axes},
                      batch=8, seqlen_q=seqlen_q, seqlen_k=8192, heads_q=32, heads_kv=8, sm_count=132)
    return rank(problem, forms).best.axes["tile_n"]


def test_a_dense_cache_takes_the_two_cta_tile_where_both_are_built():
    forms = [_Form(128), _Form(64)]
    for sq in (1, 4, 64, 65, 2048):
        assert _best(sq, forms) == 64, sq
    assert _best(1, [_Form(128)]) == 128  # the rule ranks; it never refuses
    paged = [_Form(128, paged_kv=True), _Form(64, paged_kv=True)]
    assert _best(1, paged, paged_kv=True) == 128  # paged: no rule, the first by name


def test_mha_decode_where_one_split_fills_the_sms_goes_to_the_decode_form():
    plain = _Form(128, pack_gqa=False, tile_m=128)
    plain.variant = "fa3-fwd-sm_90a-bf16-hd128-causal-persistent"
    plain.axes["scheduler"] = "persistent"
    forms = [plain, _Form(64)]  # the sets' hd128 dense forms

    def best(seqlen_q):
        p = Problem("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True},
                    batch=16, seqlen_q=seqlen_q, seqlen_k=8192, heads_q=16, heads_kv=16, sm_count=132)
        return rank(p, forms).best.variant

    assert best(1) == "fa3-fwd-sm_90a-bf16-hd128-causal-packgqa-m64n64"
    assert best(16) == "fa3-fwd-sm_90a-bf16-hd128-causal-packgqa-m64n64"
    assert best(64) == "fa3-fwd-sm_90a-bf16-hd128-causal-persistent"  # the plain kernel leads there


def _contract(**extra):
    return {"contract_version": 1, "variant": "v", "arch": "sm_90a", "entry": "k", "block": [256, 1, 1],
            "cluster": [1, 1, 1], "dynamic_smem_bytes": 82944, "grid": [[1], [1], [1]], "symbols": {}, "tensors": {},
            "scalars": {}, "checks": [], "params": [], **extra}


def test_the_contract_carries_the_carveout_and_refuses_a_bad_one():
    from cubinforge.runtime.contract import ContractError, load_contract

    assert load_contract(_contract()).smem_carveout_percent is None
    assert load_contract(_contract(smem_carveout_percent=100)).smem_carveout_percent == 100
    for bad in (101, -1, True, "100"):
        with pytest.raises(ContractError, match="smem_carveout_percent"):
            load_contract(_contract(smem_carveout_percent=bad))


def test_assemble_writes_the_carveout_only_where_the_kernel_asks():
    from cubinforge.generator.contract import assemble
    from cubinforge.generator.kernel_build import KernelBuild

    class _Info:
        static_smem_bytes = 1024

    sections = {"grid": [1, 1, 1], "symbols": {}, "tensors": {}, "scalars": {}, "checks": [], "params": []}
    build = KernelBuild(cubin=b"", entry="k", block=(256, 1, 1), cluster=(1, 1, 1), dynamic_smem_bytes=82944,
                        contract=sections, compile_options="")
    assert "smem_carveout_percent" not in assemble("v", "sm_90a", build, _Info())
    build.smem_carveout_percent = 100
    assert assemble("v", "sm_90a", build, _Info())["smem_carveout_percent"] == 100


def test_the_launcher_sets_the_carveout_once_when_it_loads_the_function(monkeypatch):
    from cubinforge.runtime import driver

    calls = []
    monkeypatch.setattr(driver, "call", lambda name, *args, **kw: calls.append((name, args[1:])))

    class _Attr:
        CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = "carveout"
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = "max_dynamic"

    monkeypatch.setattr(driver, "drv", lambda: type("D", (), {"CUfunction_attribute": _Attr}))
    fn = driver.Function(None, "k", "handle")
    fn.prefer_smem_carveout(100)
    assert calls == [("cuFuncSetAttribute", ("carveout", 100))]


def test_the_cpp_bundle_carries_the_carveout_of_the_two_cta_forms(tmp_path):
    import re

    from cubinforge.generator.cpp_bundle import HEADER_NAME, load_home, render_cpp_bundle
    from cubinforge.runtime.registry_source import LocalSource

    home = LocalSource().home
    ms, blobs = load_home(home)
    two = [m for m in ms if (m.get("contract") or {}).get("smem_carveout_percent") is not None]
    if not two:
        pytest.skip(f"no two-CTA forms in {home} (make kernels ARCH=sm90)")
    render_cpp_bundle(ms, blobs, tmp_path)
    text = (tmp_path / HEADER_NAME).read_text()
    values = re.findall(r"/\*smem_carveout_percent=\*/(-?\d+)", text)
    assert len(values) == len(ms)
    assert values.count("100") == len(two) and values.count("-1") == len(ms) - len(two)
