"""The built kernels' resources and SASS evidence as a markdown table (no GPU needed).

Reads the local registry's manifests with the stdlib: registers, shared memory, threads,
tile, schedule switches, and the SASS counts the generator recorded (HGMMA, UTMALDG,
UTMASTG, and LDL/STL, which must be 0: no local-memory spills).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def manifests(home: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((home / "manifests").glob("*.json"))]


def kernel_table(home: Path) -> str:
    rows = [
        "| variant | regs | dyn smem | threads | tile | ping-pong | O early | HGMMA | UTMALDG | UTMASTG | LDL+STL | stack |",
        "| --- | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in manifests(home):
        md, k = m["metadata"], m["metadata"].get("kernel", {})
        sass = md.get("sass") or {}
        rows.append(
            f"| {m['variant']} | {md['registers']} | {md['dynamic_smem_bytes']} | {md['max_threads']} "
            f"| {k.get('tile_m')}x{k.get('tile_n')} | {k.get('pingpong')} | {k.get('rescale_o_early')} "
            f"| {sass.get('hgmma', '-')} | {sass.get('utmaldg', '-')} | {sass.get('utmastg', '-')} "
            f"| {sass.get('ldl', 0) + sass.get('stl', 0) if sass else '-'} | {md['stack_frame_bytes']} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="bench kernels", description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("CUBINFORGE_HOME", ".cubinforge")))
    ap.add_argument("--out", type=Path, default=None, help="write here instead of stdout")
    args = ap.parse_args(argv)
    text = kernel_table(args.home)
    if args.out:
        args.out.write_text(text)
    else:
        print(text, end="")
    return 0
