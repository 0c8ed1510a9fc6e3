"""`cubinforge explain`: which variant the dispatcher would launch for a problem, and why.

The same function the runtime calls before every launch (runtime/dispatch.py) and the
service answers `POST /v1/select` with; nothing is launched and no GPU is needed.
"""

from __future__ import annotations

import json
import sys

from cubinforge.generator.spec import normalize_arch, parse_value


def register(sub) -> None:
    p = sub.add_parser("explain", help="show the variant the dispatcher picks for a problem, and why")
    p.add_argument("--family", default="fa3_fwd")
    p.add_argument("--arch", default="sm90", help="sm90 or sm100 (default sm90)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--head-dim", type=int, required=True)
    p.add_argument("--causal", default="0", help="1/0")
    for size in ("batch", "seqlen-q", "seqlen-k", "heads-q", "heads-kv", "sm-count"):
        p.add_argument(f"--{size}", type=int)
    p.add_argument("--axis", action="append", default=[], metavar="NAME=VALUE",
                   help="another exact axis, e.g. --axis paged_kv=1 (repeatable)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from cubinforge.runtime.dispatch import Problem
    from cubinforge.runtime.errors import VariantNotFound
    from cubinforge.runtime.registry_source import LocalSource, choose

    axes = {"arch": normalize_arch(args.arch), "dtype": parse_value("dtype", args.dtype),
            "head_dim": parse_value("head_dim", args.head_dim), "causal": parse_value("causal", args.causal)}
    for item in args.axis:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--axis takes NAME=VALUE, got {item!r}")
        axes[name] = parse_value(name, value)
    sizes = {k: getattr(args, k) for k in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "sm_count")
             if getattr(args, k) is not None}
    try:
        choice = choose(Problem(args.family, axes, **sizes), LocalSource(args.home))
    except VariantNotFound as e:
        print(f"cubinforge explain: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"variant": choice.best.variant, "params": dict(choice.params), "reasons": list(choice.reasons),
                          "ranked": [{"variant": r.name, "preferences_met": list(r.satisfied)} for r in choice.ranked]},
                         indent=2))
        return 0
    print(choice.best.variant)
    for r in choice.reasons:
        print(f"  - {r}")
    return 0
