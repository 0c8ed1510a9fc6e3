"""cubinforge.bench: the grid, FLOP counts, timing arithmetic, variants listing (no GPU)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_bench_bootstrap", ROOT / "bench" / "_bootstrap.py")
_boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_boot)
_boot.install(ROOT)

from cubinforge.bench import flops as F  # noqa: E402
from cubinforge.bench import grid as G  # noqa: E402
from cubinforge.bench import timing as T  # noqa: E402
from cubinforge.bench import variants as V  # noqa: E402


def test_default_grid_is_the_fa3_grid():
    cells = G.build_grid()
    assert len(cells) == 36
    assert len({c.id for c in cells}) == 36
    for c in cells:
        assert c.dtype == "bf16" and c.heads == c.heads_kv
        assert c.batch * c.seqlen_q == 16 * 1024
        assert c.heads * c.head_dim == 2048
        assert c.seqlen_q == c.seqlen_k
    assert {c.seqlen_q for c in cells} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {c.head_dim for c in cells} == {64, 128, 256}
    assert sum(c.causal for c in cells) == 18


def test_cell_ids_and_records():
    c = G.fa3_cell("bf16", 128, 4096, True)
    assert c.id == "bf16-hd128-s4096-causal"
    assert (c.batch, c.heads) == (4, 16)
    g = G.fa3_cell("bf16", 64, 1024, False, gqa=4)
    assert g.id == "bf16-hd64-s1024-gqa4-full" and g.heads_kv == 8
    d = G.decode_cell("bf16", 128, 16, 32768, False)
    assert d.id == "bf16-hd128-q16-k32768-full" and d.batch == 4
    rec = d.as_record()
    assert rec["seqlen"] == 32768 and rec["seqlen_q"] == 16 and rec["id"] == d.id
    json.dumps(rec)
    with pytest.raises(ValueError):
        G.fa3_cell("bf16", 256, 1024, False, gqa=16)


def test_filters():
    cells = G.build_grid()
    assert len(G.filter_cells(cells, ["hd128"])) == 12
    assert [c.id for c in G.filter_cells(cells, ["bf16-hd128-s4096-causal"])] == ["bf16-hd128-s4096-causal"]
    assert len(G.filter_cells(cells, ["*-s16384-*"])) == 6
    assert len(G.filter_cells(cells, ["hd64-s512-full", "hd256-s512-full"])) == 2
    assert G.filter_cells(cells, ["nothing-like-this"]) == []
    assert len(G.filter_cells(cells, None)) == 36


def test_grid_options():
    cells = G.build_grid(head_dims=(128,), seqlens=(1024,), causals=(True,), gqas=(1, 4, 8),
                         dtypes=("bf16", "fp16"))
    assert len(cells) == 6
    assert {c.gqa for c in cells} == {1, 4, 8}
    # hd256 has 8 heads: GQA 16 is left out, not an error
    assert all(c.head_dim != 256 for c in G.build_grid(head_dims=(256,), gqas=(16,)))
    dec = G.build_grid(head_dims=(128,), causals=(False,), decode=True)
    assert len(dec) == 6 + 6
    assert {c.seqlen_q for c in dec if c.seqlen_q != c.seqlen_k} == {1, 16, 64}


def test_parsers():
    assert G.parse_int_list("512,1k, 16k") == (512, 1024, 16384)
    assert G.parse_causal("both") == (False, True)
    assert G.parse_causal("1") == (True,)
    assert G.parse_causal("0") == (False,)
    with pytest.raises(ValueError):
        G.parse_causal("maybe")
    with pytest.raises(ValueError):
        G.parse_int_list(",")


def test_flops_convention():
    # FA3 paper: 4 * B * H * S^2 * D, halved for causal
    assert F.attention_flops(4, 16, 4096, 4096, 128, False) == 4 * 4 * 16 * 4096**2 * 128
    assert F.attention_flops(4, 16, 4096, 4096, 128, True) == 2 * 4 * 16 * 4096**2 * 128
    # a 1 ms run of 1e12 FLOPs is 1000 TFLOPS
    assert F.tflops(1e12, 1.0) == pytest.approx(1000.0)
    assert F.tflops(1e12, None) is None and F.tflops(1e12, 0) is None
    assert F.matmul_flops(8192, 8192, 8192) == 2 * 8192**3
    assert F.gbps(4.8e9, 1.0) == pytest.approx(4800.0)


@pytest.mark.parametrize("sq,sk", [(1, 1), (3, 7), (7, 3), (17, 17), (1, 100), (100, 1), (5, 0 + 5)])
def test_visible_pairs_brute_force(sq, sk):
    brute = sum(1 for i in range(sq) for j in range(sk) if j <= i + sk - sq)
    assert F.visible_pairs(sq, sk, True) == brute
    assert F.visible_pairs(sq, sk, False) == sq * sk


def test_decode_flops_are_exact():
    # causal, sq < sk: counted exactly (query i sees sk - sq + i + 1 keys)
    f = F.attention_flops(1, 1, 2, 10, 1, True)
    assert f == 4 * (9 + 10)


def test_attention_bytes():
    b = F.attention_bytes(1, 16, 4, 1024, 2048, 128, "bf16")
    assert b == 2 * 1024 * 16 * 128 * 2 + 2 * 2048 * 4 * 128 * 2 + 16 * 1024 * 4


def test_timing_arithmetic():
    assert T.median([3.0, 1.0, 2.0]) == 2.0
    assert T.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    with pytest.raises(ValueError):
        T.median([])
    assert T.plan_iterations(1.0, 0.3, 5, 30) == 30      # 300 fit, capped
    assert T.plan_iterations(100.0, 0.3, 5, 30) == 5     # 3 fit, floored
    assert T.plan_iterations(20.0, 0.3, 5, 30) == 15
    assert T.plan_iterations(0.0, 0.3, 5, 30) == 30



def _fake_torch(durations, log):
    """A torch stand-in whose GPU is a clock: each call of the timed function takes the next of
    `durations` (ms), a sleep takes 1 ms; `log` gets every operation in order."""
    import types

    clock = [0.0]

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            log.append("record")
            self.t = clock[0]

        def elapsed_time(self, other):
            return other.t - self.t

    def sleep(cycles):
        log.append(("sleep", cycles))
        clock[0] += 1.0

    cuda = types.SimpleNamespace(Event=Event, current_stream=lambda: "stream", _sleep=sleep,
                                 synchronize=lambda: log.append("sync"))
    it = iter(durations)

    def fn():
        log.append("call")
        clock[0] += next(it)
    return types.SimpleNamespace(cuda=cuda), fn


def test_time_isolated_times_each_call_alone_after_a_sleep(monkeypatch):
    import sys

    log = []
    warm = [9.0, 9.0]
    torch, fn = _fake_torch(warm + [3.0, 1.0, 2.0, 5.0, 4.0], log)
    monkeypatch.setitem(sys.modules, "torch", torch)
    t = T.time_isolated(fn, iters=5, warmup=2, hold_cycles=123)
    # The warm-up calls are not timed; the sleeps before each call are not either.
    assert (t.median_ms, t.min_ms, t.max_ms, t.iters) == (3.0, 1.0, 5.0, 5)
    timed = log[log.index("sync") + 1:]
    assert timed == [("sleep", 123), "record", "call", "record", "sync"] * 5


def _manifest(name, **axes):
    base = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": False}
    base.update(axes)
    return {"variant": name, "family": "fa3_fwd", "axes": base,
            "metadata": {"registers": 168, "dynamic_smem_bytes": 164864}}


def test_load_variants(tmp_path, monkeypatch):
    md = tmp_path / "manifests"
    md.mkdir()
    (md / "b.json").write_text(json.dumps(_manifest("b", causal=True)))
    (md / "a.json").write_text(json.dumps(_manifest("a", head_dim=64)))
    (md / "other.json").write_text(json.dumps({**_manifest("other"), "family": "demo"}))
    (md / "broken.json").write_text("{not json")
    monkeypatch.setenv("CUBINFORGE_HOME", str(tmp_path))
    vs, problems = V.load_variants()
    assert [v.name for v in vs] == ["a", "b"]
    assert vs[0].key == ("sm_90a", "bf16", 64, False)
    assert vs[1].causal is True and vs[1].metadata["registers"] == 168
    assert len(problems) == 1 and "broken.json" in problems[0]
    empty, why = V.load_variants(tmp_path / "nowhere")
    assert empty == [] and "no manifests folder" in why[0]


def test_arch_of_capability():
    assert V.arch_of_capability(9, 0) == "sm_90a"
    assert V.arch_of_capability(8, 9) == "sm_89"


def test_time_interleaved_pairs_each_call_with_its_own_events(monkeypatch):
    """time_interleaved on a fake clock: the calls run A B A B ... after the sizing calls, each
    between its own event pair, in its own context, and each median is that call's cost."""
    import contextlib
    import sys
    import types

    from cubinforge.bench.timing import time_interleaved

    clock, calls, entered = [0.0], [], []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            self.t = clock[0]

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return other.t - self.t

    cuda = types.SimpleNamespace(Event=Event, current_stream=lambda: None, synchronize=lambda: None,
                                 _sleep=lambda cycles: None)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))

    def fn(name, cost):
        def call():
            calls.append(name)
            clock[0] += cost
        return call

    @contextlib.contextmanager
    def ctx():
        entered.append("b")
        yield

    out = time_interleaved({"a": fn("a", 2.0), "b": fn("b", 3.0)}, {"b": ctx}, warmup=1, min_iters=4, max_iters=4,
                           budget_s=1.0)
    assert calls[:4] == ["a", "b", "a", "b"]  # warm-up, then one sizing call each
    assert calls[4:] == ["a", "b"] * 4
    assert len(entered) == calls.count("b")
    assert (out["a"].median_ms, out["b"].median_ms, out["a"].iters) == (2.0, 3.0, 4)


def test_time_isolated_each_interleaves_the_calls_each_after_its_own_sleep(monkeypatch):
    """Two functions on the fake clock: after both warm up, round i runs a then b, each behind
    its own sleep and synchronized alone; each median is its own calls' cost."""
    import sys

    log = []
    # warm-up 1 each (a then b), then a, b alternately: a costs 2, 4, 6; b 1, 3, 5.
    torch, fn = _fake_torch([9.0, 9.0, 2.0, 1.0, 4.0, 3.0, 6.0, 5.0], log)
    monkeypatch.setitem(sys.modules, "torch", torch)

    def named(n):
        def call():
            log.append(n)
            fn()
        return call
    out = T.time_isolated_each({"a": named("a"), "b": named("b")}, iters=3, warmup=1, hold_cycles=7)
    assert (out["a"].median_ms, out["b"].median_ms, out["a"].iters) == (4.0, 3.0, 3)
    timed = log[log.index("sync") + 1:]
    one = lambda n: [("sleep", 7), "record", n, "call", "record", "sync"]  # noqa: E731
    assert timed == (one("a") + one("b")) * 3


def test_interleaved_rounds_rotate_the_lead_and_drop_only_a_failing_function(monkeypatch):
    """Each round is one time_interleaved run over the functions still timed, the order rotated
    a step a round, with the per-function budget scaled to the run; a round that raises is retried one
    function at a time, the one that fails is named and left out, the others are timed together
    again and get the median of their rounds."""
    runs = []

    def fake(fns, contexts=None, *, budget_s, **kw):
        runs.append((list(fns), budget_s))
        if "bad" in fns:
            raise RuntimeError("bad launch")
        return {n: T.Timing(median_ms=float(len(runs)), min_ms=0, max_ms=0, iters=5) for n in fns}
    monkeypatch.setattr(T, "time_interleaved", fake)
    ms, errors = T.interleaved_rounds({"a": 1, "b": 2}, rounds=3, budget_s=0.1)
    assert [r[0] for r in runs] == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert all(abs(b - 0.2) < 1e-12 for _, b in runs) and errors == {}
    assert ms == {"a": 2.0, "b": 2.0}  # the median of the three rounds' 1.0, 2.0, 3.0
    runs.clear()
    ms, errors = T.interleaved_rounds({"a": 1, "bad": 2}, rounds=2, budget_s=0.1)
    # Round 0 fails together, each alone names "bad", "a" is timed again (the group without it);
    # round 1 without "bad".
    assert [r[0] for r in runs] == [["a", "bad"], ["a"], ["bad"], ["a"], ["a"]]
    assert list(errors) == ["bad"] and "bad launch" in str(errors["bad"])
    assert ms == {"a": 4.5}  # rounds 4.0 and 5.0 (run 2, "a" alone to name the failure, is not one)


def test_side_by_side_names_the_failing_call_but_raises_a_lost_context():
    """A call that fails in the group is found by timing each alone; an error after which the
    CUDA context is unusable is raised, not blamed on every function by the retries."""
    def timer(group):
        if "bad" in group:
            raise RuntimeError("bad launch")
        return {n: T.Timing(median_ms=1.0, min_ms=1.0, max_ms=1.0, iters=5) for n in group}
    ts, errors = T.side_by_side(timer, {"a": 1, "bad": 2})
    assert list(ts) == ["a"] and list(errors) == ["bad"]

    def lost(group):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        T.side_by_side(lost, {"a": 1, "b": 2})

    # The group fails for an ordinary reason, then one call alone loses the context: raised, not
    # recorded against it and every call after it.
    alone = []

    def lost_alone(group):
        if len(group) > 1:
            raise RuntimeError("bad launch")
        alone.append(list(group))
        if "b" in group:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return {n: T.Timing(median_ms=1.0, min_ms=1.0, max_ms=1.0, iters=5) for n in group}
    with pytest.raises(RuntimeError, match="illegal memory access"):
        T.side_by_side(lost_alone, {"a": 1, "b": 2, "c": 3})
    assert alone == [["a"], ["b"]]
