"""`cubinforge build`: compile a set of variants (narrowed by axis filters) into the registry,
here or on a Dask cluster (--cluster), optionally publishing each one as it is stored (--publish)."""

from __future__ import annotations

import os
import sys

from . import add_axis_options, axis_filters, families, open_registry


def register(sub) -> None:
    p = sub.add_parser("build", help="cross-compile variants into the local registry")
    p.add_argument("--set", default="default", help="named set: smoke, default, inference, all, demo (default: default)")
    add_axis_options(p)
    p.add_argument("--exact", action="store_true",
                   help="build exactly the one variant the axis options name (one --family, one value per "
                        "option; axes left out take the spec's choice), whether or not a set holds it")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, help="parallel compile workers")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="compile on Dask: tcp://HOST:PORT (a running scheduler) or local:N (a LocalCluster "
                        "of N workers); --jobs is then unused. Needs the cluster extra")
    p.add_argument("--publish", metavar="URL", help="send each artifact to this registry server as it is stored")
    p.add_argument("--token", help="with --publish: bearer token (default $CUBINFORGE_TOKEN)")
    p.add_argument("--sign-key", help="with --publish: ed25519 private key to sign each manifest with")
    p.add_argument("--force", action="store_true", help="rebuild even when the registry is current")
    p.add_argument("--build-dir", help="where rendered modules go (default: $CUBINFORGE_HOME/build)")
    p.add_argument("--list", action="store_true", help="print the selected variant names and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _variants(args):
    from cubinforge.generator import spec

    if not args.exact:
        return spec.select(args.set, axis_filters(args), families(args))
    from cubinforge.generator.on_demand import variant_for

    fams = families(args) or []
    if len(fams) != 1:
        raise ValueError("--exact needs exactly one --family (e.g. --family fa3_fwd)")
    filters = axis_filters(args)
    several = [a for a, vals in filters.items() if len(vals) != 1]
    if several:
        raise ValueError(f"--exact takes one value per axis; {', '.join(several)} has several")
    return [variant_for(fams[0], {a: vals[0] for a, vals in filters.items()})]


def _publisher(args, registry):
    if not args.publish:
        if args.token or args.sign_key:
            raise ValueError("--token and --sign-key go with --publish URL")
        return None
    token = args.token or os.environ.get("CUBINFORGE_TOKEN")
    if not token:
        raise ValueError("--publish needs a token: pass --token or set CUBINFORGE_TOKEN (the operator makes one: "
                         "`cubinforge token add NAME`)")
    from cubinforge.service.publish_queue import StreamingPublisher

    return StreamingPublisher(args.publish, token, registry.home, sign_key=args.sign_key)


def run(args) -> int:
    from cubinforge.generator import build

    variants = _variants(args)
    if args.list:
        print("\n".join(v.name for v in variants))
        return 0
    registry = open_registry(args)
    publisher = _publisher(args, registry)
    progress = False if args.no_progress else None
    if not args.cluster:
        code = build.run(variants, registry, jobs=args.jobs, force=args.force, build_dir=args.build_dir,
                         progress=progress, publisher=publisher)
    else:
        from cubinforge.generator import cluster

        with cluster.connect(args.cluster) as client:
            print(f"building {len(variants)} variants on {cluster.describe(client)}", file=sys.stderr)
            code = build.run(variants, registry, force=args.force, build_dir=args.build_dir, progress=progress,
                             client=client, publisher=publisher)
    if publisher:
        print(publisher.report())
    return code
