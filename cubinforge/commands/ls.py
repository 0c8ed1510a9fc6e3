"""`cubinforge ls`: the variants in the registry, as a table or (--json) with their metadata."""

from __future__ import annotations

import json

from . import add_axis_options, axis_filters, families, open_registry


def register(sub) -> None:
    p = sub.add_parser("ls", help="list the variants in the local registry")
    add_axis_options(p)
    p.add_argument("--json", action="store_true", help="every matching record, with metadata, as JSON")
    p.add_argument("--all", action="store_true", help="include yanked variants")
    p.add_argument("--limit", type=int)
    p.add_argument("--offset", type=int, default=0)
    p.set_defaults(func=run)


def verification_text(provenance: dict) -> str:
    """`verified (NVIDIA H200)`, `unverified`, or `unverified (never run)` where launchers refuse it."""
    from cubinforge.runtime.registry_source import refuses_unverified

    v = provenance.get("verification")
    if not v:
        return "-"
    if v.get("status") == "verified":
        return f"verified ({v.get('device')})"
    return "unverified (refused)" if refuses_unverified(v) else "unverified"


def run(args) -> int:
    filters = dict(axis_filters(args))
    if families(args):
        filters["family"] = families(args)
    records = open_registry(args).list(filters, limit=args.limit, offset=args.offset, include_yanked=args.all)
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    rows = [("variant", "regs", "smem", "tmem", "threads", "cubin", "built_at", "verification", "")]
    for r in records:
        m = r["metadata"]
        smem = (m.get("dynamic_smem_bytes") or 0) + (m.get("static_smem_bytes") or 0)
        tmem = (m.get("kernel") or {}).get("tmem_columns")
        rows.append((r["name"], str(m.get("registers", "-")), str(smem), "-" if tmem is None else str(tmem),
                     str(m.get("max_threads", "-")), str(r["cubin"]["size"]),
                     (r["provenance"].get("built_at") or "")[:19], verification_text(r["provenance"]),
                     "yanked" if r["yanked"] else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    print(f"{len(records)} variant(s)")
    return 0
