"""`cubinforge show NAME`: one variant's full record (axes, metadata, contract, provenance) as JSON."""

from __future__ import annotations

import json
import sys

from . import open_registry


def register(sub) -> None:
    p = sub.add_parser("show", help="print one variant's full record as JSON")
    p.add_argument("name", help="canonical variant name, e.g. fa3-fwd-sm_90a-bf16-hd128-causal")
    p.add_argument("--history", action="store_true", help="add every build stored for it")
    p.set_defaults(func=run)


def run(args) -> int:
    registry = open_registry(args)
    record = registry.get(args.name)
    if record is None:
        print(f"cubinforge show: no variant {args.name!r} in {registry.home}", file=sys.stderr)
        return 1
    if args.history:
        record["history"] = registry.history(args.name)
    print(json.dumps(record, indent=2))
    return 0
