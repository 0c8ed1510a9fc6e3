"""SASS of the softmax-on-FMA candidates (bench.ab's `mufu` sets), on the CPU: registers,
spills, and per key block of each overlapped loop the MUFU.EX2 / FFMA / FMUL / ALU work.

    .venv/bin/python bench/mufu_sass.py [--home .cubinforge-ab-mufu] [--sets mufu] [--match REGEX] [--out FILE]

With --home, the cubins `bench.ab build` put there; without, each variant is compiled here.

A key block's softmax is the window from the QK^T wait (WARPGROUP.DEPBAR.LE gsb0, 0x1) to the
next warpgroup op after the PV wait (generator/sass.py pv_wait_windows); the counts are the
largest loop's (the unmasked one; causal's masked loop adds its mask).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OPS = ("MUFU.EX2", "FFMA", "FMUL", "FADD", "FMNMX", "LEA", "IMAD", "F2FP", "SHFL", "VOTE", "BRA")
_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);")


def block_windows(sass: str) -> list[Counter]:
    ops = [re.sub(r"^@!?U?P\w+\s+", "", m.group(1).strip()) for m in _LINE.finditer(sass)]
    out, i = [], 0
    while i < len(ops):
        if ops[i].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x1"):
            j = i + 1
            while j < len(ops) and not ops[j].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"):
                j += 1
            k = j + 1
            while k < len(ops) and not ops[k].startswith(("WARPGROUP.ARRIVE", "HGMMA", "QGMMA")):
                k += 1
            c = Counter(total=k - i - 1)
            for o in ops[i + 1:k]:
                name = o.split()[0]
                for want in OPS:
                    if name == want or name.startswith(want + "."):
                        c[want] += 1
            out.append(c)
            i = j
        i += 1
    return out


def main(argv=None) -> int:
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
    from cubinforge.bench.loop_sass import cubin_and_metadata
    from cubinforge.generator.sass import cuobjdump
    from cubinforge.runtime.registry_source import LocalSource

    ap = argparse.ArgumentParser()
    ap.add_argument("--home", type=Path, help="an A/B registry home (bench.ab build) to read the cubins from")
    ap.add_argument("--sets", default="mufu")
    ap.add_argument("--match", default="", help="only variants whose name matches this regex")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    home = LocalSource(a.home) if a.home else None
    in_home = set(home.list()) if home else set()
    head = ["variant", "regs", "spill B", "insts/block", *OPS]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    seen = set()
    for s in a.sets.split(","):
        for label, over in EXPERIMENTS[s]:
            cfg = experiment_config(over)
            name = ab_name(cfg, label)
            if name in seen or not re.search(a.match, name):
                continue
            seen.add(name)
            cubin, m = cubin_and_metadata(name, cfg, home, in_home)
            sass = cuobjdump(["-sass"], cubin) or ""
            wins = block_windows(sass)
            w = max(wins, key=lambda c: c["total"]) if wins else Counter()
            spill = (m.get("spill_store_bytes") or 0) + (m.get("spill_load_bytes") or 0)
            row = [name.removeprefix("fa3-fwd-sm_90a-"), str(m.get("registers")), str(spill), str(w["total"]),
                   *[str(w[o]) for o in OPS]]
            lines.append("| " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
