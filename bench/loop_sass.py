"""The key-block loops of A/B candidates, from the SASS, on the CPU: shared memory, registers,
spills, and per loop (a backward branch whose body issues GEMMs) its instructions, HGMMAs,
and the mask's compares and selects. Candidates FwdConfig refuses are listed with the reason.

    .venv/bin/python bench/loop_sass.py --sets model-variants-2 [--home .cubinforge-ab-mv2]
        [--pruned] [--match REGEX] [--out FILE]

With --home, the cubins `bench.ab build` put there; the others are compiled here. --pruned
adds the candidates considered and left out of the set (PRUNED below).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Considered for `model-variants-2` and left out (variant-speed-2.md says why): each is
# refused by FwdConfig or spills/loses in the SASS. Kept here so the pruning can be rerun.
_W = dict(head_dim=128, causal=False, local=True, in_order_row_sum=True, mask_bits=True)
_DV = dict(head_dim=192, head_dim_v=128, causal=True, mask_bits=True, in_order_row_sum=True)
PRUNED = [
    ("single+in-order-sum+mask-bits+q-double-buffer", dict(_W, scheduler="single", q_double_buffer=True)),
    ("single+in-order-sum+mask-bits+tile-128x176", dict(_W, scheduler="single", tile_m=128, tile_n=176)),
    ("single+in-order-sum+mask-bits+tile-128x192", dict(_W, scheduler="single", tile_m=128, tile_n=192)),
    ("single+in-order-sum+tile-128x176", dict(_W, scheduler="single", mask_bits=False, tile_m=128, tile_n=176)),
    ("persistent+separate-o+in-order-sum+mask-bits+q-double-buffer+stages-3",
     dict(_W, scheduler="persistent", separate_o_smem=True, q_double_buffer=True, stages=3)),
    ("persistent+in-order-sum+mask-bits+stages-3", dict(_W, scheduler="persistent", stages=3)),
    ("persistent+separate-o+wg-epilogue+in-order-sum+mask-bits+q-double-buffer+deferred-o",
     dict(_W, scheduler="persistent", separate_o_smem=True, wg_epilogue=True, q_double_buffer=True,
          deferred_o_store=True)),
    ("lpt+mask-bits+in-order-sum+q-double-buffer", dict(_DV, scheduler="lpt", q_double_buffer=True)),
    ("lpt+mask-bits+in-order-sum+stages-3", dict(_DV, scheduler="lpt", stages=3)),
    ("lpt+mask-bits+in-order-sum+tile-128x144", dict(_DV, scheduler="lpt", tile_m=128, tile_n=144)),
    ("lpt+mask-bits+in-order-sum+tile-128x80+stages-3",
     dict(_DV, scheduler="lpt", tile_m=128, tile_n=80, stages=3)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum",
     dict(_DV, scheduler="persistent", separate_o_smem=True)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum+q-double-buffer+tile-128x64",
     dict(_DV, scheduler="persistent", separate_o_smem=True, q_double_buffer=True, tile_m=128, tile_n=64)),
    ("lpt+mask-bits+in-order-sum+tile-128x112", dict(_DV, scheduler="lpt", tile_m=128, tile_n=112)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum+tile-128x112",
     dict(_DV, scheduler="persistent", separate_o_smem=True, tile_m=128, tile_n=112)),
]

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_BRA = re.compile(r"BRA\s+(?:`\()?(0x[0-9a-f]+)")


def loops(sass: str) -> list[dict]:
    """The innermost loops (backward branches) whose body issues a GEMM, in address order: their
    instructions, GEMMs, ISETP, FSEL, R2P and MUFU."""
    return [{"at": hex(t), "insts": len(body), "gemm": sum(o.startswith(("HGMMA", "QGMMA")) for o in body),
             **{k.lower(): sum(o.startswith(k) for o in body) for k in ("ISETP", "FSEL", "R2P", "MUFU")}}
            for t, body in loop_bodies(sass)]


def loop_bodies(sass: str) -> list[tuple[int, list[str]]]:
    """(start address, instructions without predicates) of each innermost loop whose body issues
    a GEMM, in address order. Branches after the last plain EXIT are the out-of-line retries of
    barrier waits, not loops."""
    raw = [(int(m.group(1), 16), m.group(2).strip()) for m in _INSN.finditer(sass)]
    end = max((a for a, o in raw if o == "EXIT"), default=raw[-1][0] if raw else 0)
    insns = [(a, re.sub(r"^@!?U?P\w+\s+", "", o)) for a, o in raw]
    found = []
    for i, (addr, op) in enumerate(insns):
        b = _BRA.search(op) if op.startswith("BRA") else None
        if addr > end or not b or int(b.group(1), 16) >= addr:
            continue
        target = int(b.group(1), 16)
        body = [o for a, o in insns[:i + 1] if a >= target]
        if any(o.startswith(("HGMMA", "QGMMA")) for o in body):
            found.append((target, addr, body))
    inner = [f for f in found if not any(g is not f and f[0] <= g[0] and g[1] <= f[1] for g in found)]
    return [(t, body) for t, _, body in sorted(inner, key=lambda f: f[0])]


def barriers_and_stores(sass: str) -> tuple[int, int]:
    """Static named-barrier waits (BAR.SYNC, the CTA-wide one at the start included) and O
    stores (UTMASTG, one per swizzle atom of columns per store site): what an epilogue's
    synchronisation and store shape change."""
    ops = [re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip()) for m in _INSN.finditer(sass)]
    return sum(o.startswith("BAR.SYNC") for o in ops), sum(o.startswith("UTMASTG") for o in ops)


def cubin_and_metadata(name: str, cfg, home=None, in_home=frozenset()) -> tuple[bytes, dict]:
    """An experiment's cubin and build metadata: from the A/B registry home where it holds the
    variant (`in_home`: its names), else compiled here (the CuTe DSL, no GPU)."""
    if home is not None and name in in_home:
        man = home.get(name)
        return home.blob(man["cubin"]["sha256"]), man["metadata"]
    from cubinforge.generator.compile_worker import describe_build
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant

    built = describe_build(name, cfg.arch, compile_variant(cfg))
    return built.cubin, built.metadata


def main(argv=None) -> int:
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
    from cubinforge.generator.sass import cuobjdump
    from cubinforge.runtime.registry_source import LocalSource

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, help="an A/B registry home (bench.ab build) to read the cubins from")
    ap.add_argument("--sets", default="model-variants-2")
    ap.add_argument("--pruned", action="store_true", help="also the candidates left out (PRUNED)")
    ap.add_argument("--match", default="", help="only variants whose name matches this regex")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    home = LocalSource(a.home) if a.home else None
    in_home = set(home.list()) if home else set()
    todo = [item for s in a.sets.split(",") if s for item in EXPERIMENTS[s]] + (PRUNED if a.pruned else [])
    lines = ["| variant | smem B | regs | spill B | kernel insts | BAR.SYNC / UTMASTG | "
             "loops (insts / GEMMs / ISETP / FSEL / R2P) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    seen = set()
    for label, over in todo:
        try:
            cfg = experiment_config(over)
        except ValueError as e:
            name = f"{over.get('head_dim')}/{over.get('head_dim_v', over.get('head_dim'))}+{label}"
            lines.append(f"| {name} | refused: {e} | | | | | |")
            print(lines[-1], flush=True)
            continue
        name = ab_name(cfg, label)
        if name in seen or not re.search(a.match, name):
            continue
        seen.add(name)
        try:
            cubin, m = cubin_and_metadata(name, cfg, home, in_home)
        except Exception as e:  # a build that fails (smem after padding, a trace check)
            lines.append(f"| {name} | build failed: {type(e).__name__}: {str(e)[:200]} | | | | | |")
            print(lines[-1], flush=True)
            continue
        sass = cuobjdump(["-sass"], cubin) or ""
        ls = loops(sass)
        bars, stores = barriers_and_stores(sass)
        spill = (m.get("spill_store_bytes") or 0) + (m.get("spill_load_bytes") or 0)
        desc = ", ".join(f"{x['insts']}/{x['gemm']}/{x['isetp']}/{x['fsel']}/{x['r2p']}" for x in ls)
        lines.append(f"| {name.removeprefix('fa3-fwd-sm_90a-bf16-')} | {m.get('dynamic_smem_bytes')} | "
                     f"{m.get('registers')} | {spill} | {(m.get('sass') or {}).get('instructions')} | {bars} / {stores} | {desc} |")
        print(lines[-1], flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
