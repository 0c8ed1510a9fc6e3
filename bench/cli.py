"""`python -m cubinforge.bench` (or `python3 -m bench` in a checkout): the whole run.

    correctness sweep -> matmul ceiling -> performance grid -> cold start -> [ncu] -> files

`python -m cubinforge.bench readme` regenerates the README's results section instead.
Exit status: 0 all passed; 1 a check failed (correctness, ours' output in the grid, cold
start); 2 the environment is not what the run needs (no GPU, no runtime, no variants);
3 the run was aborted part-way (a sticky CUDA error, Ctrl-C). Files are written in every case.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import shlex
import sys
import time
from pathlib import Path

from . import grid as G
from .anchors import BACKENDS

STEPS = ("correctness", "grid", "cold_start")
DEFAULT_NCU_CELL = "bf16-hd128-s4096-full"
EXIT_OK, EXIT_FAILED, EXIT_ENV, EXIT_ABORTED = 0, 1, 2, 3


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def run_parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=prog, description="Correctness sweep, performance grid against cuDNN / torch flash "
        "/ FA4, and cold start of every built cubinforge variant, on this machine's GPU. "
        "Subcommands: `readme` regenerates the README's results section; `kernels` prints "
        "the built kernels' resources and SASS counts as a markdown table.")
    ap.add_argument("--out", type=Path, help="output folder (default bench/results/<date>-<gpu>/)")
    ap.add_argument("--cells", type=_csv, help="comma-separated cell ids or globs, e.g. "
                    "'hd128-s4096-causal,*-s16384-*' (a plain word matches as a substring)")
    ap.add_argument("--head-dims", type=G.parse_int_list, default=G.HEAD_DIMS, help="e.g. 64,128")
    ap.add_argument("--seqlens", type=G.parse_int_list, help="e.g. 512,1k,16k (default 512..16k)")
    ap.add_argument("--causal", type=G.parse_causal, default=(False, True), help="0, 1 or both")
    ap.add_argument("--dtype", type=_csv, default=list(G.DTYPES), help="bf16 and/or fp16")
    ap.add_argument("--gqa", type=G.parse_int_list, default=(1,), help="GQA ratios, e.g. 1,4,8")
    ap.add_argument("--decode", action="store_true",
                    help="add decode-like cells: seqlen_q 1/16/64 against seqlen_k 8k/32k")
    ap.add_argument("--backends", type=_csv, default=list(BACKENDS),
                    help="subset of ours,cudnn,flash2,fa4 (fa4 only where importable)")
    ap.add_argument("--skip", type=_csv, default=[], help=f"steps to leave out: {','.join(STEPS)}")
    ap.add_argument("--quick", action="store_true",
                    help="seqlen 1k and 8k, fewer correctness shapes, shorter timings")
    ap.add_argument("--ncu", nargs="?", const=DEFAULT_NCU_CELL, metavar="CELL",
                    help=f"Nsight Compute counters of ours on one cell (default {DEFAULT_NCU_CELL})")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds of timed calls per backend per cell (default 0.3; quick 0.1)")
    ap.add_argument("--deadline", type=float, default=420.0,
                    help="seconds after start past which no new grid cell starts (default 420)")
    ap.add_argument("--hard-timeout", type=float, default=540.0,
                    help="seconds after which a stuck run (e.g. a hung kernel) writes what it has "
                    "and exits 3 (default 540: inside one 10-minute device call)")
    ap.add_argument("--seed", type=int, default=None, help="input seed (default: from the clock)")
    # Interleaved since session 24: on an H100 (check24/d1) one pair's rounds agreed within
    # ~1% interleaved where turns of ~0.1 s had ranged 0.86-1.12 (check23/c2).
    ap.add_argument("--timing", choices=("interleaved", "turns"), default="interleaved",
                    help="interleaved (default): each round times a cell's backends with their calls "
                    "interleaved, A B C A B C ...; turns: each backend's calls in a row, then the next's")
    ap.add_argument("--interleaved", dest="timing", action="store_const", const="interleaved",
                    help=argparse.SUPPRESS)  # the opt-in flag of session 23's records
    ap.add_argument("--no-plots", action="store_true")
    return ap


def readme_parser(prog: str) -> argparse.ArgumentParser:
    from .env import REPO, RESULTS

    ap = argparse.ArgumentParser(prog=f"{prog} readme",
                                 description="Rewrite README.md's results section "
                                 "(between <!-- results:begin --> and <!-- results:end -->).")
    ap.add_argument("--readme", type=Path, default=REPO / "README.md")
    ap.add_argument("--results", type=Path, default=None,
                    help="a results.json or its folder (default: the newest under bench/results/)")
    ap.add_argument("--results-root", type=Path, default=RESULTS)
    return ap


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = prog or ("python -m cubinforge.bench" if __package__ == "cubinforge.bench"
                    else "python3 -m bench")
    if argv and argv[0] == "readme":
        return readme_main(readme_parser(prog).parse_args(argv[1:]))
    if argv and argv[0] == "kernels":
        from .kernel_table import main as kernels_main
        return kernels_main(argv[1:])
    args = run_parser(prog).parse_args(argv)
    bad = [s for s in args.skip if s not in STEPS]
    bad += [b for b in args.backends if b not in BACKENDS]
    if bad:
        print(f"error: unknown step/backend {bad}; steps {STEPS}, backends {BACKENDS}",
              file=sys.stderr)
        return EXIT_ENV
    command = " ".join([prog, *(shlex.quote(a) for a in argv)])
    return run(args, command)


def readme_main(args) -> int:
    from .readme import update_readme

    results = args.results
    if results is not None and results.is_dir():
        results = results / "results.json"
    try:
        used = update_readme(args.readme, args.results_root, results)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ENV
    print(f"{args.readme}: results section regenerated from {used}")
    return EXIT_OK


def cells_from_args(args) -> list:
    seqlens = args.seqlens or (G.QUICK_SEQLENS if args.quick else G.SEQLENS)
    return G.build_grid(dtypes=args.dtype, head_dims=args.head_dims, seqlens=seqlens,
                        causals=args.causal, gqas=args.gqa, decode=args.decode,
                        patterns=args.cells)


def find_cell(cell_id: str):
    every = G.build_grid(dtypes=("bf16", "fp16"), head_dims=(64, 96, 128, 192, 256),
                         seqlens=G.SEQLENS, gqas=(1, 2, 4, 8), decode=True)
    for c in every:
        if c.id == cell_id:
            return c
    raise ValueError(f"no cell {cell_id!r}; ids look like {DEFAULT_NCU_CELL}")


# ----------------------------------------------------------------------------- the run

def _log(msg: str) -> None:
    print(msg, flush=True)


def run(args, command: str) -> int:
    from . import env as E

    t0 = time.time()
    budget = args.time_budget if args.time_budget is not None else (0.1 if args.quick else 0.3)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print(f"FATAL: torch is not importable ({e}); the bench runs on the GPU machine, "
              "where torch is the timing and reference engine", file=sys.stderr)
        return EXIT_ENV
    if not torch.cuda.is_available():
        print("FATAL: torch sees no CUDA device; run this on the lent H200 (see "
              "docs/benchmarking.md)", file=sys.stderr)
        return EXIT_ENV
    gpu, driver = E.gpu_and_driver()
    gpu = gpu or torch.cuda.get_device_name(0)
    out_dir = Path(args.out) if args.out else E.default_out_dir(gpu)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {"schema": 1, "date": _dt.datetime.now().isoformat(timespec="seconds"),
               "gpu": gpu, "driver": driver, "versions": E.versions(), "commit": E.commit(),
               "command": command, "seed": seed, "timing": args.timing, "out_dir": str(out_dir),
               "tolerances": {}, "matmul_tflops": None, "matmul": None, "cold_start": None,
               "correctness": [], "correctness_summary": {}, "grid": [], "ncu": None,
               "backends_unavailable": {}, "variants": [], "problems": [], "aborted": None}
    _log(f"cubinforge bench on {gpu} (driver {driver}), seed {seed}, writing {out_dir}")
    from .variants import load_variants

    variants, _ = load_variants()

    def checkpoint():
        results["wall_s"] = time.time() - t0
        _write_numbers(results, out_dir)

    watchdog = _start_watchdog(args.hard_timeout, results, out_dir, t0)
    exit_code = EXIT_OK
    try:
        exit_code = _steps(args, results, budget, seed, t0, out_dir, checkpoint)
    except KeyboardInterrupt:
        results["aborted"] = "interrupted (Ctrl-C)"
        exit_code = EXIT_ABORTED
    except Exception as e:  # noqa: BLE001 - sticky CUDA errors end the run, files still get written
        import traceback

        traceback.print_exc()
        results["aborted"] = f"{type(e).__name__}: {e}"
        exit_code = EXIT_ABORTED
    finally:
        watchdog.cancel()
        results["wall_s"] = time.time() - t0
        _write_all(results, out_dir, variants, plots=not args.no_plots)
    _print_summary(results, out_dir, exit_code)
    return exit_code


def _start_watchdog(seconds: float, results: dict, out_dir: Path, t0: float):
    """A timer that, if the run is still going after `seconds`, records that, rewrites the
    numbers files from what the run has so far, and ends the process (a hung kernel would
    otherwise eat the whole device call and leave nothing)."""
    import os
    import threading

    def fire():
        print(f"\nWATCHDOG: still running after {seconds:.0f} s; writing what there is and "
              "exiting 3", file=sys.stderr, flush=True)
        results["aborted"] = f"watchdog: still running after {seconds:.0f} s (--hard-timeout)"
        results["wall_s"] = time.time() - t0
        try:
            _write_numbers(results, out_dir)
        except Exception as e:  # noqa: BLE001 - the last checkpoint stays on disk
            print(f"WATCHDOG: could not write results ({e})", file=sys.stderr, flush=True)
        os._exit(EXIT_ABORTED)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t


def _steps(args, results: dict, budget: float, seed: int, t0: float, out_dir: Path,
           checkpoint=lambda: None) -> int:
    from . import correctness as C
    from .anchors import make_backends
    from .cold_start import cold_start
    from .perf import run_grid
    from .timing import matmul_ceiling
    from .variants import load_variants

    code = EXIT_OK
    results["tolerances"] = {"rel_err": C.REL_TOL, "lse_err": C.LSE_TOL}
    variants, problems = load_variants()
    results["variants"] = [{"name": v.name, "arch": v.arch, "dtype": v.dtype,
                            "head_dim": v.head_dim, "causal": v.causal,
                            "registers": v.metadata.get("registers"),
                            "dynamic_smem_bytes": v.metadata.get("dynamic_smem_bytes")}
                           for v in variants]
    results["problems"] += problems
    _log(f"registry: {len(variants)} variants" + (f"; problems: {problems}" if problems else ""))
    if "ours" in args.backends and not variants:
        results["problems"].append("no variants in the registry: nothing of ours to check")
        code = EXIT_ENV

    backends, missing = make_backends(args.backends, log=_log)
    results["backends_unavailable"] = missing
    if "ours" in args.backends and "ours" not in backends:
        results["problems"].append(f"ours unavailable: {missing.get('ours')}")
        code = EXIT_ENV

    t = time.time()
    results["matmul"] = matmul_ceiling(budget_s=0.3 if args.quick else 1.0)
    results["matmul_tflops"] = results["matmul"]["tflops"]
    _log(f"bf16 8192^3 matmul: {results['matmul_tflops']:.0f} TFLOPS ({time.time() - t:.1f} s)")
    checkpoint()

    if "correctness" not in args.skip and "ours" in backends and variants:
        t = time.time()
        shapes = C.QUICK_SHAPES if args.quick else C.SHAPES
        _log(f"correctness: {len(variants)} variants x {len(shapes)} shapes")
        sweep = C.run_sweep(variants, backends["ours"], shapes, seed=seed, log=_log)
        results["correctness"] = sweep["records"]
        results["correctness_summary"] = C.summarize(sweep)
        s = results["correctness_summary"]
        _log(f"correctness: {s['passed']}/{s['cases']} passed, max rel {s['max_rel_err']}, "
             f"max lse {s['max_lse_err']} ({time.time() - t:.1f} s)")
        if s["failed"]:
            code = max(code, EXIT_FAILED) if code != EXIT_ENV else code
        if s["unexercised"]:
            _log(f"  WARNING: variants never selected by the runtime: {s['unexercised']}")
        checkpoint()

    if "grid" not in args.skip:
        cells = cells_from_args(args)
        _log(f"grid: {len(cells)} cells x {list(backends)} (budget {budget} s per timing)")
        t = time.time()

        def stop():
            return time.time() - t0 > args.deadline

        def on_record(records):
            results["grid"] = records
            checkpoint()
        results["grid"] = run_grid(cells, backends, missing, results["matmul_tflops"],
                                   budget_s=budget, seed=seed, log=_log, stop=stop,
                                   on_record=on_record, interleaved=args.timing == "interleaved")
        if any(r.get("flags") for r in results["grid"]):
            code = max(code, EXIT_FAILED) if code != EXIT_ENV else code
        _log(f"grid done ({time.time() - t:.1f} s)")

    if "cold_start" not in args.skip and "ours" in backends and variants:
        t = time.time()
        dtype, hd, causal = _cold_shape(variants, backends["ours"].device_arch)
        results["cold_start"] = cold_start(dtype, hd, causal, fa4="fa4" in backends, log=_log)
        ours = results["cold_start"]["ours"]
        _log(f"cold start: ours {ours.get('total_s')} s total, {ours.get('after_context_s')} s "
             f"after context, ok={ours.get('ok')} ({time.time() - t:.1f} s)")
        if not ours.get("ok"):
            code = max(code, EXIT_FAILED) if code != EXIT_ENV else code
        checkpoint()

    if args.ncu:
        from .ncu import run_ncu

        try:
            cell = find_cell(args.ncu)
            results["ncu"] = run_ncu(cell, out_dir, log=_log)
        except Exception as e:  # noqa: BLE001 - ncu is optional: say why and go on
            results["ncu"] = {"skipped": f"{type(e).__name__}: {e}", "cell": args.ncu}
        if results["ncu"].get("skipped"):
            _log(f"ncu skipped: {results['ncu']['skipped']}")
    return code


def _cold_shape(variants, arch) -> tuple[str, int, bool]:
    keys = [(v.dtype, v.head_dim, v.causal) for v in variants if v.arch == arch]
    if ("bf16", 128, False) in keys or not keys:
        return ("bf16", 128, False)
    return keys[0]


def _write_numbers(results: dict, out_dir: Path) -> None:
    from . import report as R

    R.write_json(results, out_dir / "results.json")
    # Which cubins this sweep checked: `cubinforge verify import verified.json` stamps them.
    import json

    from .variants import registry_home
    from .verified import manifest_reader, verified_doc

    doc = verified_doc(results, manifest_reader(registry_home()), "results.json")
    (out_dir / "verified.json").write_text(json.dumps(doc, indent=1) + "\n")
    R.write_csv(results.get("grid") or [], out_dir / "results.csv")
    R.write_markdown(results, out_dir / "results.md")


def _write_all(results: dict, out_dir: Path, variants, plots: bool) -> None:
    from .env import env_text
    from .plots import write_plots

    _write_numbers(results, out_dir)
    (out_dir / "env.txt").write_text(env_text(results, variants))
    if plots:
        write_plots(results, out_dir, log=_log)


def _print_summary(results: dict, out_dir: Path, code: int) -> None:
    from .report import fmt

    print("\n" + "=" * 78)
    s = results.get("correctness_summary") or {}
    if s:
        print(f"correctness: {s.get('passed')}/{s.get('cases')} passed "
              f"(max rel {fmt(s.get('max_rel_err'), '.2e')}, max lse {fmt(s.get('max_lse_err'), '.2e')})")
        for r in [r for r in results.get("correctness", []) if not r.get("passed")][:15]:
            print(f"  FAIL {r['variant']} {r['shape']}: {'; '.join(r.get('failures', []))}")
        if s.get("unexercised"):
            print(f"  not exercised: {', '.join(s['unexercised'])}")
    grid = results.get("grid") or []
    if grid:
        print(f"{'cell':<34} {'ours':>7} {'cudnn':>7} {'flash2':>7} {'fa4':>7} {'ratio':>6}")
        for r in grid:
            print(f"{r['id']:<34} {fmt(r.get('ours')):>7} {fmt(r.get('cudnn')):>7} "
                  f"{fmt(r.get('flash2')):>7} {fmt(r.get('fa4')):>7} {fmt(r.get('ratio'), '.2f'):>6}"
                  + ("  !! " + "; ".join(r["flags"]) if r.get("flags") else ""))
    cs = results.get("cold_start") or {}
    for name in ("ours", "fa4"):
        if cs.get(name):
            c = cs[name]
            print(f"cold start {name}: total {fmt(c.get('total_s'), '.2f')} s, after context "
                  f"{fmt(c.get('after_context_s'), '.2f')} s, ok={c.get('ok')}"
                  + (f" ({c.get('error')})" if c.get("error") else ""))
    for p in results.get("problems") or []:
        print(f"PROBLEM: {p}")
    if results.get("aborted"):
        print(f"ABORTED: {results['aborted']}")
    print(f"matmul ceiling {fmt(results.get('matmul_tflops'))} TFLOPS; "
          f"wall {fmt(results.get('wall_s'), '.0f')} s; files in {out_dir}")
    verdict = {EXIT_OK: "PASS", EXIT_FAILED: "FAIL (a check failed)",
               EXIT_ENV: "FAIL (environment: see PROBLEM lines)", EXIT_ABORTED: "ABORTED"}[code]
    print(f"bench: {verdict} (exit {code})")
