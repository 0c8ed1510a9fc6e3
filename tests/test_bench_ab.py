"""bench.ab's correctness gate, run with torch on the CPU where torch is installed (the
device has it; CI's venv does not, so there this skips)."""

from __future__ import annotations

import pytest

from cubinforge.bench.ab import EXPERIMENTS, check_variant

SMALL = ((1, 70, 50, 4, 2), (2, 33, 90, 4, 1))  # causal sq > sk: rows that see no key


class FakeOurs:
    """Writes the reference (or a wrong answer) into the poisoned outputs."""

    def __init__(self, wrong=None):
        self.wrong = wrong

    def launch(self, q, k, v, causal, o, lse, variant):
        from cubinforge.bench.reference import attention_torch

        ref_o, ref_lse = attention_torch(q, k, v, causal if self.wrong != "mask" else not causal)
        if self.wrong == "unwritten":
            ref_o[:, -1] = float("nan")
        o.copy_(ref_o.to(o.dtype))
        lse.copy_(ref_lse.reshape(lse.shape) + (0.01 if self.wrong == "lse" else 0.0))


@pytest.mark.parametrize("causal", [False, True])
def test_a_correct_kernel_passes(causal):
    pytest.importorskip("torch")
    rel, lse_err, ok = check_variant(FakeOurs(), "x", 64, causal, device="cpu", shapes=SMALL)
    assert ok and rel < 2.5e-3 and lse_err < 1e-3


@pytest.mark.parametrize("wrong", ["mask", "unwritten", "lse"])
def test_a_wrong_kernel_fails(wrong):
    pytest.importorskip("torch")
    assert not check_variant(FakeOurs(wrong), "x", 64, True, device="cpu", shapes=SMALL)[2]


def test_experiment_sets_build_valid_configs():
    from cubinforge.bench.ab import experiment_config

    for name, items in EXPERIMENTS.items():
        for label, overrides in items:
            cfg = experiment_config(overrides)  # raises on a bad combination
            # A label names every switch that is on: nothing comes from the shipped table.
            # (dense e4m3 always has O in its own buffer: its bf16 O cannot go out through Q's;
            # the inference forms write O from registers.)
            assert cfg.separate_o_smem == ("separate-o" in label or (cfg.fp8 and not cfg.inference)), (name, label)
            assert cfg.mask_bits == ("mask-bits" in label), (name, label)


def test_ab_table_has_a_column_per_anchor_and_flags_failures():
    from cubinforge.bench.ab import ab_table

    rows = [{"variant": "v+x", "seqlen": 512, "ours": 400.0, "cudnn": 500.0, "fa4": 450.0, "ratio_best": 0.8,
             "rel_err": 2e-3, "lse_err": 1e-6, "ok": True},
            {"variant": "v+y", "seqlen": 512, "ours": 600.0, "cudnn": 500.0, "fa4": 450.0, "ratio_best": 1.2,
             "rel_err": 9e-3, "lse_err": 1e-6, "ok": False}]
    text = ab_table(rows, ["cudnn", "fa4"])
    lines = text.splitlines()
    assert lines[0] == ("| variant | seqlen | ours TFLOPS | cudnn TFLOPS | fa4 TFLOPS | ours/best | rel err "
                        "| LSE err | correct |")
    assert lines[1].count("|") == lines[0].count("|")
    assert "| v+x | 512 | 400.0 | 500.0 | 450.0 | 0.80 |" in text
    assert lines[3].endswith("| NO |")


def test_fp8_experiments_are_e4m3_and_named_by_layout():
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config

    names = [ab_name(experiment_config(o), label) for label, o in EXPERIMENTS["fp8-hd128"]]
    assert len(set(names)) == len(names)
    assert "fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor+default" in names
    assert "fa3-fwd-sm_90a-e4m3-hd128-noncausal+v-rowmajor" in names
    # The shipped e4m3 hd128 configuration is the "default" row: the same FwdConfig.
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
    shipped = FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, scheduler="persistent",
                        v_layout="colmajor")
    label, overrides = EXPERIMENTS["fp8-hd128"][0]
    assert label == "default" and experiment_config(overrides) == shipped


def test_model_variant_candidates_are_named_apart_and_have_a_case():
    """Each model-variant candidate gets its own registry name (the build skips a repeated
    one) and a case bench/model_variants.py --ab-home times it on."""
    from cubinforge.bench import model_variants as mv
    from cubinforge.bench.ab import MODEL_VARIANTS, ab_name, experiment_config

    names = [ab_name(experiment_config(o), label) for label, o in MODEL_VARIANTS]
    assert len(set(names)) == len(names), names
    kinds = set()
    for label, o in MODEL_VARIANTS:
        cfg = experiment_config(o)
        kind = ("local" if cfg.local else "learnable_sink" if cfg.learnable_sink
                else "head_dim_v" if cfg.head_dim_v != cfg.head_dim else None)
        assert kind in mv.AB_CASES, label
        kinds.add(kind)
    assert kinds == set(mv.AB_CASES)
    # The shipped configurations of 2026-12-01 are among them, as the baselines.
    assert "fa3-fwd-sm_90a-bf16-hd128-noncausal-local+persistent" in names
    assert {"fa3-fwd-sm_90a-bf16-hd192-dv128-causal+default",  # spec's token order: dv before the mask
            "fa3-fwd-sm_90a-bf16-hd128-causal-sink+lpt+mask-bits"} <= set(names)


def test_varlen_candidates_are_varlen_named_apart_and_start_from_the_shipped_build():
    """bench/inference.py --ab-home finds them by the varlen axis; "default" is the shipped
    varlen build (the inference forms take no TUNED switch), and a label names what is on."""
    from cubinforge.bench.ab import VARLEN, ab_name, experiment_config
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    names = [ab_name(experiment_config(o), label) for label, o in VARLEN]
    assert len(set(names)) == len(names), names
    for (label, o), name in zip(VARLEN, names):
        cfg = experiment_config(o)
        assert cfg.varlen and not cfg.paged_kv and "-varlen+" in name, name
        assert cfg.o_smem_store == ("o-smem" in label), label
        assert cfg.in_order_row_sum == ("in-order-sum" in label), label
        if label == "default":
            assert cfg == FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=cfg.causal, varlen=True)
    assert {"fa3-fwd-sm_90a-bf16-hd128-noncausal-varlen+default",
            "fa3-fwd-sm_90a-bf16-hd128-causal-varlen+default"} <= set(names)


def test_o_smem_store_is_varlen_only_and_mask_bits_not_under_pack_gqa():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    with pytest.raises(ValueError, match="varlen"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, split_kv=True, o_smem_store=True)
    with pytest.raises(ValueError, match="pack_gqa"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, pack_gqa=True, tile_m=64, mask_bits=True)


def test_rising_scores_move_the_max_past_the_rescale_threshold_and_pass_a_correct_kernel():
    """The gate's case for lazy-rescale candidates: walking the key blocks from the last, each
    64 keys raise most rows' max by more than 8 log2 units until the cap (so the rescale
    branch runs), then the max stays (so the stale-max branch runs)."""
    torch = pytest.importorskip("torch")
    import math

    from cubinforge.bench.ab import rising

    g = torch.Generator().manual_seed(0)
    hd = 64
    q, k = rising(torch.randn(1, 40, 2, hd, generator=g), torch.randn(1, 1000, 2, hd, generator=g), hd, g)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd) * math.log2(math.e)
    block_max = torch.stack([s[..., j:j + 64].amax(-1) for j in range(1000 - 64, -1, -64)], -1)
    jumps = block_max.cummax(-1).values.diff(dim=-1)
    assert (jumps[..., :2] > 8).float().mean() > 0.8  # the first blocks visited: rescale
    assert (jumps[..., -5:] <= 8).float().mean() > 0.8  # past the cap: the stale max stays
    assert check_variant(FakeOurs(), "x", hd, False, device="cpu", shapes=((1, 40, 300, 2, 1),),
                         rising_scores=True)[2]


def test_varlen_ab_runs_each_model_axis_with_its_own_arguments():
    """bench/inference.py --ab-home: a varlen-model candidate is timed with its axis's
    arguments, and a window's FLOPs count only the pairs it lets through."""
    from cubinforge.bench.inference import VARLEN_LENS, varlen_flops, varlen_model_kwargs
    from cubinforge.bench.ab import EXPERIMENTS, experiment_config

    for _, over in EXPERIMENTS["varlen-model"]:
        cfg = experiment_config(over)
        kw = dict(varlen_model_kwargs({a: getattr(cfg, a) for a in ("local", "softcap", "learnable_sink")}))
        assert ("window_size" in kw) == cfg.local and ("softcap" in kw) == cfg.softcap
        assert ("learnable_sink" in kw) == cfg.learnable_sink
    full = varlen_flops(VARLEN_LENS, 16, 128, 128, False)
    assert full == sum(2 * n * n * 16 * 256 for n in VARLEN_LENS)
    assert varlen_flops(VARLEN_LENS, 16, 128, 128, False, (-1, 0)) == varlen_flops(VARLEN_LENS, 16, 128, 128, True)
    # a window of 1,024 to the left: sequences up to 1,025 tokens see what causal sees, longer ones a band
    band = varlen_flops([4096], 1, 128, 128, False, (1024, 0))
    assert band == 2 * 256 * (1025 * 1026 // 2 + (4096 - 1025) * 1025)


def test_varlen_walk_rest_covers_forms_the_inference_set_builds_on_the_walk():
    """bench.ab varlen-walk-rest: every candidate is a valid config on the walk with the
    counter, and each is a form SET=inference builds (the same dtype, head dims, mask and axes):
    until session 20 one tile per CTA (the yardstick it was timed beside, check20/b1), since
    then on the walk, one of the candidates promoted."""
    from cubinforge.bench.ab import EXPERIMENTS, experiment_config
    from cubinforge.generator import spec

    def key(a):
        return tuple(bool(a[x]) if x in ("causal", "paged_kv", "local", "learnable_sink", "softcap") else a[x]
                     for x in ("dtype", "head_dim", "causal", "paged_kv", "local", "learnable_sink", "softcap"))

    walk = {key(v.axes) for v in spec.expand_set("inference")
            if v.family == "fa3_fwd" and v["varlen"] and not v["split_kv"] and v["scheduler"] == "persistent"}
    for label, over in EXPERIMENTS["varlen-walk-rest"]:
        cfg = experiment_config(over)
        assert cfg.scheduler == "persistent" and cfg.varlen_dynamic, label
        assert key({a: getattr(cfg, a) for a in ("dtype", "head_dim", "causal", "paged_kv", "local",
                                                 "learnable_sink", "softcap")}) in walk, (label, over)


def test_the_paged_case_counts_the_pairs_a_window_lets_through():
    """bench.inference's paged chunked prefill case: the FLOPs of its new tokens against the
    whole cache, causal bottom-right, and a window's share of that."""
    from cubinforge.bench.inference import CHUNKED, chunked_flops

    c = CHUNKED
    seen = sum(c["ctx"] - c["new"] + i + 1 for i in range(c["new"]))   # causal: row i sees ctx - new + i + 1
    assert chunked_flops(32, 128, 128, True) == c["requests"] * 2 * 32 * 256 * seen
    assert chunked_flops(32, 128, 128, False) == c["requests"] * 2 * 32 * 256 * c["new"] * c["ctx"]
    # a window of 1,024 to the left, no right edge past the row: every new row sees 1,025 keys
    assert chunked_flops(32, 64, 64, False, (1024, 0)) == c["requests"] * 2 * 32 * 128 * c["new"] * 1025


@pytest.mark.parametrize("experiment", ["late-k-release", "late-k-release-short", "late-k-release-varlen",
                                        "late-k-release-decode64", "late-k-release-decode128", "late-k-release-fp8"])
def test_late_k_release_rows_are_the_shipped_forms_and_the_same_with_k_released_late(experiment):
    """bench.ab late-k-release*: each control is a form the default set builds (its axes those of
    a default-set variant) with exactly the FwdConfig that variant resolves to, so its cubin is the
    shipped one; each candidate differs from it by late_k_release alone."""
    import dataclasses

    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
    from cubinforge.generator import spec
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    form_axes = ("dtype", "head_dim", "head_dim_v", "causal", "scheduler", "tile_m", "tile_n", "varlen", "paged_kv",
                 "pack_gqa", "split_kv", "v_layout")
    default = [v.axes for v in spec.expand_set("default") if v.family == "fa3_fwd"]
    rows = EXPERIMENTS[experiment]
    names = [ab_name(experiment_config(o), label) for label, o in rows]
    assert len(set(names)) == len(names), names
    for (label, over), (late_label, late_over) in zip(rows[0::2], rows[1::2]):
        control = experiment_config(over)
        axes = {a: getattr(control, a) for a in form_axes}
        shipped = [v for v in default if all(v[a] == axes[a] for a in form_axes)
                   and not (v["softcap"] or v["local"] or v["learnable_sink"])]
        assert len(shipped) == 1, (label, axes)
        assert control == FwdConfig(arch="sm_90a", **axes) and not control.late_k_release, label
        assert experiment_config(late_over) == dataclasses.replace(control, late_k_release=True), late_label
        assert late_label == label + "+late-k-release"


def test_k_stages_rows_are_the_shipped_forms_with_two_three_and_four_stages():
    """bench.ab k-stages: each triple is the default set's hd64 form (the FwdConfig its variant
    resolves to) with 2, 3 and 4 stages and nothing else changed, each fitting the shared memory
    it asks for (FwdConfig refuses what does not). The shipped form is the 3-stage row where the
    A/B promoted it (causal, check24/d1) and the 2-stage control elsewhere."""
    import dataclasses

    from cubinforge.bench.ab import EXPERIMENTS, experiment_config
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    rows = EXPERIMENTS["k-stages"]
    assert len(rows) == 12
    for i in range(0, len(rows), 3):
        control = experiment_config(rows[i][1])
        shipped = FwdConfig(arch="sm_90a", dtype=control.dtype, head_dim=64, causal=control.causal,
                            scheduler="persistent")
        assert control == dataclasses.replace(shipped, stages=2), rows[i][0]
        assert (control.tile_m, control.tile_n) == (192, 128) and "stages-2" in rows[i][0]
        for stages, (label, over) in zip((3, 4), rows[i + 1:i + 3]):
            assert experiment_config(over) == dataclasses.replace(control, stages=stages), label
            assert label == rows[i][0].replace("stages-2", f"stages-{stages}")
        assert shipped.stages == (3 if control.causal else 2)


def test_switch_label_names_every_switch_or_refuses():
    from cubinforge.bench.ab import switch_label

    over = dict(scheduler="lpt", tile_m=128, tile_n=64, stages=2, mask_bits=True, rescale_threshold=8.0,
                causal=True)
    assert switch_label(over) == "lpt+tile-128x64+stages-2+lazy-rescale-8+mask-bits"
    with pytest.raises(ValueError, match="no token for"):
        switch_label(dict(over, some_new_switch=True))


def test_switch_label_refuses_a_value_switch_it_cannot_name():
    from cubinforge.bench.ab import switch_label

    with pytest.raises(ValueError, match="exp2_emu_eighths"):
        switch_label(dict(scheduler="persistent", tile_m=128, tile_n=128, stages=2, exp2_emu_eighths=2))


def test_late_k_release_is_not_combined_with_the_fma_pipe_exp2():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    with pytest.raises(ValueError, match="late_k_release"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=64, causal=False, late_k_release=True, exp2_emu_eighths=2)
    assert FwdConfig(arch="sm_90a", dtype="bf16", head_dim=64, causal=False, late_k_release=True).late_k_release


def test_ab_run_times_a_forms_variants_and_the_anchors_interleaved(monkeypatch):
    """bench.ab run's time_form: on one cell, every variant of the form and every anchor is timed
    in each round in one interleaved run (the order rotating which leads), on the same inputs,
    each in its backend's context; each row keeps its rounds and reads its ratio against the best
    anchor of the same rounds. A call that fails is named, not timed without."""
    import contextlib
    import sys
    import types

    from cubinforge.bench import ab, timing

    fake_torch = types.SimpleNamespace(bfloat16="bf16", float16="fp16", randn=lambda *a, **k: ("q", a),
                                       randn_like=lambda x: ("like", x))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    orders, inputs, entered = [], set(), []
    speed = {"ctl": 1.0, "cand": 0.9, "cudnn": 1.2, "fa4": 1.1}  # ms

    class Backend:
        def __init__(self, name=None):
            self.name = name

        def prepare(self, cell, q, k, v, variant=None):
            key = variant or self.name
            inputs.add((id(q), id(k), id(v)))
            return (lambda: key), None

        @contextlib.contextmanager
        def context(self):
            entered.append(self.name)
            yield

    def fake_interleaved(fns, contexts, **kw):
        orders.append(list(fns))
        for name in fns:
            with contexts[name]():
                assert fns[name]() == name
        return {name: types.SimpleNamespace(median_ms=speed[name]) for name in fns}

    monkeypatch.setattr(timing, "time_interleaved", fake_interleaved)
    variants = [("ctl", (1e-3, 1e-6, True)), ("cand", (2e-3, 1e-6, True))]
    rows = ab.time_form(Backend(), {"cudnn": Backend("cudnn"), "fa4": Backend("fa4")}, ("bf16", 64, True, "rowmajor"),
                        variants, 2048, rounds=3)
    assert len(inputs) == 1  # every backend on the same q, k, v
    assert orders == [["ctl", "cand", "cudnn", "fa4"], ["cand", "cudnn", "fa4", "ctl"], ["cudnn", "fa4", "ctl", "cand"]]
    assert entered[:4] == [None, None, "cudnn", "fa4"]  # ours' context for the variants
    by = {r["variant"]: r for r in rows}
    assert by["ctl"]["ms_rounds"] == [1.0] * 3 and by["cand"]["fa4_ms_rounds"] == [1.1] * 3
    assert by["cand"]["ours"] / by["ctl"]["ours"] == pytest.approx(1 / 0.9)
    assert by["ctl"]["ratio_best"] == pytest.approx(1.1 / 1.0)  # fa4 (1.1 ms) is the faster anchor
    assert by["cand"]["ok"] and by["cand"]["rel_err"] == 2e-3

    def failing(fns, contexts, **kw):
        if "cand" in fns:
            raise RuntimeError("cand launch failed")
        return fake_interleaved(fns, contexts, **kw)
    monkeypatch.setattr(timing, "time_interleaved", failing)
    with pytest.raises(RuntimeError, match="failed while timed at s2048: cand: cand launch failed"):
        ab.time_form(Backend(), {"cudnn": Backend("cudnn")}, ("bf16", 64, True, "rowmajor"), variants, 2048, rounds=3)


def test_a_label_token_picks_whole_tokens_only():
    """tests/gpu/_helpers.label_names, which the A/B homes' GPU tests filter candidates with."""
    from gpu_verification_log import _gpu_helpers

    names = _gpu_helpers().label_names
    v = "fa3-fwd-sm_90a-bf16-hd64-causal+persistent+tile-192x128+stages-3+lazy-rescale-10"
    assert names(v, "stages-3") and names(v, "lazy-rescale-10") and names(v, "")
    assert not names(v, "lazy-rescale-1") and not names(v, "stages") and not names(v, "causal")
    assert not names("fa3-fwd-sm_90a-bf16-hd64-causal-persistent", "")  # a shipped name has no label


def test_compare_reads_each_candidate_against_its_forms_control_round_by_round():
    from cubinforge.bench.ab import compare_rows

    def row(label, seqlen, ms, ok=True, form="fa3-fwd-sm_90a-bf16-hd64-causal"):
        return {"variant": f"{form}+{label}", "seqlen": seqlen, "ours": 100.0 / (sum(ms) / len(ms)),
                "ms_rounds": ms, "ok": ok}

    rows = [row("p+stages-2", 2048, [1.0, 1.0]), row("p+stages-3", 2048, [0.8, 1.25]),
            row("p+stages-2", 8192, [2.0, 2.0]), row("p+stages-3+x", 8192, [2.0, 2.0], ok=False),
            row("q+stages-2", 2048, [1.0, 1.0], form="fa3-fwd-sm_90a-fp16-hd64-causal")]
    found = compare_rows(rows, control="stages-2")
    assert [(c["form"][-16:], c["cell"], c["candidate"]) for c in found] == [
        ("bf16-hd64-causal", 2048, "p+stages-3"), ("bf16-hd64-causal", 8192, "p+stages-3+x")]
    first = found[0]
    assert (first["round_min"], first["round_max"]) == (0.8, 1.25)
    assert not found[1]["ok"]
    # the same pairs named by the candidates' token; "stages" is no whole token of either label
    assert [c["candidate"] for c in compare_rows(rows[:2], candidate="stages-3")] == ["p+stages-3"]
    with pytest.raises(ValueError, match="2 controls"):
        compare_rows(rows[:2], candidate="stages")
    with pytest.raises(ValueError, match="one of the two"):
        compare_rows(rows)
