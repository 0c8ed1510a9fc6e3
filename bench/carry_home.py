"""A registry home cut down to some sets, for a device call's carry (64 MiB in all, the
tracked tree and FA4's staged wheels included: the whole .cubinforge with SET=inference
does not fit beside .stage_fa4a).

    python -m cubinforge.bench.carry_home --sets default,fp8 --out .cubinforge-carry
    # on the device: rm -rf .cubinforge && mv .cubinforge-carry .cubinforge

Copies the manifests of the named sets' variants that the home has, their cubins, the
`verified` records and the generation stamp; no registry.db (the runtime reads manifests).
A variant of a set that the home lacks is named, and the copy refuses to pass for complete.
The output folder is untracked and not ignored, so it travels: delete it after the call.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def variant_names(sets: list[str]) -> list[str]:
    from cubinforge.generator.spec import expand_set

    names: list[str] = []
    for s in sets:
        names += [v.name for v in expand_set(s) if v.name not in names]
    return names


def copy_home(home: Path, out: Path, names: list[str]) -> tuple[int, int, list[str]]:
    """(manifests, bytes of cubins, names missing from `home`)."""
    if out.exists():
        raise SystemExit(f"{out} exists: remove it first (it would mix two carries)")
    (out / "manifests").mkdir(parents=True)
    missing, size = [], 0
    for name in names:
        src = home / "manifests" / f"{name}.json"
        if not src.exists():
            missing.append(name)
            continue
        sha = json.loads(src.read_text())["cubin"]["sha256"]
        blob = home / "blobs" / "sha256" / sha[:2] / sha
        dst = out / "blobs" / "sha256" / sha[:2] / sha
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(blob, dst)
        shutil.copyfile(src, out / "manifests" / src.name)
        size += blob.stat().st_size
    for extra in ("verified",):
        if (home / extra).is_dir():
            shutil.copytree(home / extra, out / extra)
    if (home / "generation").exists():
        shutil.copyfile(home / "generation", out / "generation")
    return len(names) - len(missing), size, missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=Path(".cubinforge"))
    ap.add_argument("--sets", default="default", help="comma-separated generator sets (spec.SETS)")
    ap.add_argument("--out", type=Path, default=Path(".cubinforge-carry"))
    args = ap.parse_args(argv)
    count, size, missing = copy_home(args.home, args.out, variant_names(args.sets.split(",")))
    print(f"{args.out}: {count} manifests, {size / 2**20:.1f} MiB of cubins")
    if missing:
        print(f"{len(missing)} variants of {args.sets} are not in {args.home} (make kernels first): "
              + ", ".join(missing[:8]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
