"""Device timing: CUDA events around each call, warm-up first, median of a time-bounded run.

`plan_iterations` and `median` are pure; `time_cuda`, `time_interleaved`, `interleaved_rounds` and
`time_isolated` need torch and a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    iters: int

    def as_record(self) -> dict:
        return {"median_ms": self.median_ms, "min_ms": self.min_ms, "max_ms": self.max_ms,
                "iters": self.iters}


def median(xs) -> float:
    s = sorted(xs)
    if not s:
        raise ValueError("median of nothing")
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def plan_iterations(estimate_ms: float, budget_s: float, min_iters: int, max_iters: int) -> int:
    """How many timed calls fit the budget, clamped to [min_iters, max_iters]."""
    if estimate_ms <= 0:
        return max_iters
    n = int(budget_s * 1e3 / estimate_ms)
    return max(min_iters, min(max_iters, n))


# ~20 ms at the H200's 1.98 GHz: covers enqueuing max_iters calls at up to ~0.5 ms each.
GPU_HOLD_CYCLES = 40_000_000


def time_cuda(fn, *, warmup: int = 5, min_iters: int = 5, max_iters: int = 30,
              budget_s: float = 0.3) -> Timing:
    """Median GPU time of `fn()` on the current torch stream, with one event pair per call
    (time_interleaved of one function).

    The caller makes `fn` launch on torch's current stream (ours gets it passed explicitly).
    Async errors surface at the synchronize calls here, as exceptions.
    """
    return time_interleaved({"fn": fn}, warmup=warmup, min_iters=min_iters, max_iters=max_iters,
                            budget_s=budget_s)["fn"]


def time_interleaved(fns: dict, contexts: dict | None = None, *, warmup: int = 3, min_iters: int = 5,
                     max_iters: int = 30, budget_s: float = 0.3) -> dict:
    """Median GPU time of each of `fns` (name -> a call on torch's current stream), the calls
    interleaved: A B C A B C ..., one event pair per call, so a clock or power shift hits each
    of them alike (check23: timed in turns of ~0.1 s each, two variants of one form on a 16k cell
    read 0.86-1.12 of each other from turn to turn on an H100). `contexts`: name -> a context
    manager factory a call runs in (the anchors' backend selection). Returns name -> Timing."""
    import torch

    contexts = contexts or {}
    stream = torch.cuda.current_stream()

    def call(name):
        if name not in contexts:
            fns[name]()
            return
        with contexts[name]():
            fns[name]()

    names = list(fns)
    for name in names:
        for _ in range(warmup):
            call(name)
    torch.cuda.synchronize()
    # One timed call of each to size the run: their sum sets how many rounds fit.
    est = {}
    for name in names:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(stream)
        call(name)
        e.record(stream)
        e.synchronize()
        est[name] = s.elapsed_time(e)
    n = plan_iterations(sum(est.values()), budget_s, min_iters, max_iters)
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(n)] for name in names}
    # Keep the GPU busy while the host enqueues the timed calls (max_iters of each function), so
    # each event pair measures the GPU's work for one call, not the host's launch overhead
    # (reported separately as host_us): otherwise a short kernel is timed at the speed of the
    # Python that launches it.
    torch.cuda._sleep(GPU_HOLD_CYCLES * len(names))
    for i in range(n):
        for name in names:
            a, b = events[name][i]
            a.record(stream)
            call(name)
            b.record(stream)
    torch.cuda.synchronize()
    out = {}
    for name in names:
        ts = [a.elapsed_time(b) for a, b in events[name]]
        out[name] = Timing(median_ms=median(ts), min_ms=min(ts), max_ms=max(ts), iters=n)
    return out


def side_by_side(timer, fns: dict) -> tuple[dict, dict]:
    """`timer(fns)` (name -> Timing) over all of `fns` together; where that raises, `timer` of
    each alone, so a failure names its function and the others keep their times. An error that
    leaves the CUDA context unusable (correctness._is_sticky) is raised as it is.
    Returns (name -> Timing, name -> the exception its call raised)."""
    from .correctness import _is_sticky

    try:
        return timer(fns), {}
    except Exception as e:  # noqa: BLE001 - which one: each alone, below
        if _is_sticky(e):  # the context is gone: every call alone would fail too, so none is named
            raise
        out, errors = {}, {}
        for name, fn in fns.items():
            try:
                out[name] = timer({name: fn})[name]
            except Exception as e:  # noqa: BLE001 - a failure is a result
                if _is_sticky(e):  # this call lost the context: the ones after it would be blamed
                    raise
                errors[name] = e
        return out, errors


def rotated(order: list, r: int) -> list:
    """`order` rotated left by r: round r's order, so each of n functions leads one of n rounds."""
    return order[r % len(order):] + order[:r % len(order)] if order else []


def rounds_of(timer, fns: dict, rounds: int = 3) -> tuple[dict, dict]:
    """`rounds` runs of `timer` (name -> Timing for a dict of functions) over all of `fns`
    together, round r in `fns`' order rotated by r: with rounds >= len(fns) each function leads
    a round (a dropped one keeps its place in the rotation).

    A round in which a call fails names it (side_by_side, each alone), drops it from that round
    on, and times the others together again, so every sample is of the group timed together.
    Returns (name -> its rounds' Timings, name -> the exception its call raised); a function that
    failed has no Timings: part of the rounds is not a figure."""
    names, samples, errors = list(fns), {n: [] for n in fns}, {}
    for r in range(rounds):
        while group := [n for n in rotated(names, r) if n not in errors]:
            ts, errs = side_by_side(timer, {n: fns[n] for n in group})
            errors.update(errs)
            if not errs:
                for n, t in ts.items():
                    samples[n].append(t)
                break
    return {n: ts for n, ts in samples.items() if n not in errors}, errors


def timed_rounds(timer, fns: dict, rounds: int = 3) -> tuple[dict, dict]:
    """rounds_of, as (name -> the median over the rounds of its rounds' median ms, name -> the
    exception its call raised)."""
    samples, errors = rounds_of(timer, fns, rounds)
    return {n: median([t.median_ms for t in ts]) for n, ts in samples.items()}, errors


def interleaved_timer(contexts: dict | None = None, *, budget_s: float, **kw):
    """A rounds_of timer: time_interleaved of a group, `budget_s` per function (the group's run
    gets budget_s x its size, as each function had in turns)."""
    return lambda group: time_interleaved(group, contexts, budget_s=budget_s * len(group), **kw)


def interleaved_rounds(fns: dict, rounds: int = 3, contexts: dict | None = None, *, warmup: int = 3,
                       min_iters: int = 5, max_iters: int = 30, budget_s: float = 0.2) -> tuple[dict, dict]:
    """The benches' side-by-side timing: timed_rounds of time_interleaved. `budget_s` is per
    function per round, as each time_cuda call of the turn-based loops this replaced had."""
    timer = interleaved_timer(contexts, budget_s=budget_s, warmup=warmup, min_iters=min_iters, max_iters=max_iters)
    return timed_rounds(timer, fns, rounds)


# The method of the 2026-12-01 anchor scripts (../shared/measurements/2026-12-01-h200/
# anchor_features.py), which set issue 11's absolute TB/s targets: each call timed alone, right
# after a ~1 ms GPU sleep that leaves the memory system idle. time_cuda times calls back to back;
# the two can differ by a few percent on HBM-bound kernels, so a target is judged by its own method.
ISOLATED_HOLD_CYCLES = 2_000_000


def time_isolated(fn, *, iters: int = 15, warmup: int = 4,
                  hold_cycles: int = ISOLATED_HOLD_CYCLES) -> Timing:
    """Median GPU time of `fn()` on the current torch stream, each call after its own GPU sleep
    and synchronized before the next."""
    return time_isolated_each({"fn": fn}, iters=iters, warmup=warmup, hold_cycles=hold_cycles)["fn"]


def time_isolated_each(fns: dict, *, iters: int = 15, warmup: int = 4,
                       hold_cycles: int = ISOLATED_HOLD_CYCLES) -> dict:
    """time_isolated of several functions with their calls interleaved (A B A B ..., each after
    its own GPU sleep): the anchors' method, with a drift over the run hitting each alike.
    Returns name -> Timing."""
    import torch

    stream = torch.cuda.current_stream()
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    ts = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(hold_cycles)
            s.record(stream)
            fn()
            e.record(stream)
            torch.cuda.synchronize()
            ts[name].append(s.elapsed_time(e))
    return {name: Timing(median_ms=median(t), min_ms=min(t), max_ms=max(t), iters=iters) for name, t in ts.items()}


def matmul_ceiling(n: int = 8192, budget_s: float = 1.0) -> dict:
    """bf16 n^3 torch.matmul on random data, the ceiling the grid's % column divides by."""
    import torch

    from .flops import matmul_flops, tflops

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    t = time_cuda(lambda: torch.matmul(a, b, out=c), warmup=10, min_iters=10, max_iters=50,
                  budget_s=budget_s)
    return {"n": n, "dtype": "bf16", "tflops": tflops(matmul_flops(n, n, n), t.median_ms),
            **t.as_record()}
