"""`cubinforge verify import FILE`: stamp manifests from a verification record file (verified.json).

The GPU sweep (`python3 -m bench`) writes verified.json beside results.json: one record per
variant it ran, with the cubin sha256 it launched. Importing keeps the file in the registry's
`verified/` folder (later builds of the same cubin are stamped too) and restamps every variant
whose cubin a record names (registry/verification.py).
"""

from __future__ import annotations

from . import open_registry


def register(sub) -> None:
    p = sub.add_parser("verify", help="verification status: import a GPU sweep's verified.json")
    vsub = p.add_subparsers(dest="verify_command", required=True, metavar="ACTION")
    imp = vsub.add_parser("import", help="stamp the manifests whose cubin sha256 a record file names")
    imp.add_argument("file", help="a verified.json written by the GPU sweep")
    imp.set_defaults(func=run_import)


def run_import(args) -> int:
    changed = open_registry(args).import_verification(args.file)
    for c in changed:
        where = f"{c['device']}, driver {c['driver']}, commit {c['commit']}, {c['date']}" if c["status"] == "verified" \
            else c["reason"]
        print(f"{c['variant']}: {c['status']} ({where})")
    print(f"{len(changed)} variant(s) restamped")
    return 0
