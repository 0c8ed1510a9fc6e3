"""`cubinforge build`: compile a set of variants (narrowed by axis filters) into the registry."""

from __future__ import annotations

import os

from . import add_axis_options, axis_filters, families, open_registry


def register(sub) -> None:
    p = sub.add_parser("build", help="cross-compile variants into the local registry")
    p.add_argument("--set", default="default", help="named set: smoke, default, inference, all, demo (default: default)")
    add_axis_options(p)
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, help="parallel compile workers")
    p.add_argument("--force", action="store_true", help="rebuild even when the registry is current")
    p.add_argument("--build-dir", help="where rendered modules go (default: $CUBINFORGE_HOME/build)")
    p.add_argument("--list", action="store_true", help="print the selected variant names and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from cubinforge.generator import build, spec

    variants = spec.select(args.set, axis_filters(args), families(args))
    if args.list:
        print("\n".join(v.name for v in variants))
        return 0
    registry = open_registry(args)
    return build.run(variants, registry, jobs=args.jobs, force=args.force, build_dir=args.build_dir,
                     progress=False if args.no_progress else None)
