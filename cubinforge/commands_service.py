"""Subcommands of the registry service and its clients: serve, db, token, keygen, push, pull,
bundle, import-bundle. `add_subcommands(subparsers)` registers them on the `cubinforge` parser.

The server side (serve, db, token, import-bundle) needs the `server` extra; push and keygen
need `cryptography` (server extra); pull needs nothing beyond the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _home(args) -> Path:
    # `cubinforge --home DIR` wins over $CUBINFORGE_HOME; the service reads the environment.
    if getattr(args, "home", None):
        os.environ["CUBINFORGE_HOME"] = str(Path(args.home).absolute())
    from cubinforge.registry import settings
    return settings.home()


def _write_token(args) -> str:
    """The bearer token, from $CUBINFORGE_TOKEN or (with --token-stdin) the first line of stdin;
    never from argv, where every user of the machine can read it (ps, /proc, shell history)."""
    if getattr(args, "token", None):
        raise ValueError("--token would put the secret in the process list; set CUBINFORGE_TOKEN, or pipe it "
                         "in with --token-stdin (e.g. `cubinforge push --token-stdin ... < token-file`)")
    token = sys.stdin.readline().strip() if args.token_stdin else os.environ.get("CUBINFORGE_TOKEN", "").strip()
    if not token:
        raise ValueError(("no token on stdin" if args.token_stdin else "no token: set CUBINFORGE_TOKEN or pass "
                          "--token-stdin") + " (the operator makes one: `cubinforge token add NAME --scope ...`)")
    return token


def _server(args) -> str:
    url = args.server or os.environ.get("CUBINFORGE_REGISTRY_URL")
    if not url:
        raise ValueError("no server: pass --server URL or set CUBINFORGE_REGISTRY_URL")
    return url


# ------------------------------------------------------------------ serve / db / token
def _serve(args) -> int:
    _home(args)
    from cubinforge.service import serve
    return serve.run(args)


def _db_upgrade(args) -> int:
    _home(args)
    from cubinforge.service.config import Settings, redact_db_url
    from cubinforge.registry.migrate import current, upgrade
    settings = Settings.from_env()
    upgrade(settings.database_url, args.revision)
    print(f"database {redact_db_url(settings.database_url)}: at revision {current(settings.database_url)}")
    return 0


def _db_check(args) -> int:
    _home(args)
    from cubinforge.service import integrity
    from cubinforge.service.config import Settings
    settings = Settings.from_env()
    repairing = args.db_command == "repair"
    problems = (integrity.repair(settings, [Path(p) for p in args.sources]) if repairing
                else integrity.check(settings))
    left = 0
    for p in problems:
        if p.fixed_from:
            print(f"blob {p.sha256} ({', '.join(p.variants)}): was {p.state}, restored from {p.fixed_from}")
        else:
            left += 1
            print(f"blob {p.sha256} ({', '.join(p.variants)}): {p.state}"
                  + ("; no good copy found: re-publish the artifact, or pass a registry home or bundle that has it"
                     if repairing else "; fix with `cubinforge db repair [SOURCE...]` or by re-publishing"))
    print(f"{len(problems) - left} repaired, {left} still bad" if repairing else
          (f"{left} bad blob(s)" if left else "all blobs intact"), file=sys.stderr)
    return 1 if left else 0


def _token(args) -> int:
    _home(args)
    from cubinforge.service.auth import SCOPE_HELP, create_token, list_tokens, parse_scopes, revoke_token
    from cubinforge.service.config import Settings
    from cubinforge.registry.db import Database
    from cubinforge.registry.migrate import upgrade
    if args.action != "list" and not args.name:
        raise ValueError(f"`token {args.action}` needs a NAME")
    if args.action == "add":
        if not args.scope:
            raise ValueError(f"`token add` needs --scope (repeatable): {SCOPE_HELP}; e.g. --scope family:fa3_fwd "
                             "for a CI that publishes one family, --scope admin for an operator")
        scopes = parse_scopes(args.scope)
    settings = Settings.from_env()
    upgrade(settings.database_url)
    db = Database(settings.database_url, pool_size=1)
    try:
        with db.sessions() as s:
            if args.action == "add":
                token = create_token(s, args.name, scopes)
                print(token)
                print(f"token {args.name!r} created with scopes {list(scopes)}; it is shown only once (the database "
                      "keeps its hash). Hand it over through CUBINFORGE_TOKEN or `--token-stdin`", file=sys.stderr)
            elif args.action == "list":
                for t in list_tokens(s):
                    print(f"{t.name}\t{t.scopes}\t{'revoked' if t.revoked else 'active'}\t{t.created_at:%Y-%m-%d}")
            elif not revoke_token(s, args.name):
                raise ValueError(f"no token named {args.name!r}")
            else:
                print(f"token {args.name!r} revoked", file=sys.stderr)
    finally:
        db.dispose()
    return 0


def _db_audit(args) -> int:
    _home(args)
    from cubinforge.service.config import Settings
    from cubinforge.registry.db import Database
    from cubinforge.service.store import audit_log
    db = Database(Settings.from_env().database_url, pool_size=1)
    try:
        with db.sessions() as s:
            for e in audit_log(s, args.limit, args.variant):
                print(f"{e.at:%Y-%m-%dT%H:%M:%S}\t{e.actor}\t{e.action}\t{e.variant}\t{e.detail or ''}")
    finally:
        db.dispose()
    return 0


# ------------------------------------------------------------------ keys, push, pull
def _keygen(args) -> int:
    from cubinforge.service.publisher import keygen
    key, pub, kid = keygen(Path(args.out))
    print(f"private key: {key} (keep it secret; `cubinforge push --sign-key {key}`)")
    print(f"public key:  {pub} (key id {kid}; give it to runtimes: CUBINFORGE_TRUSTED_KEYS={pub})")
    return 0


def _push(args) -> int:
    from cubinforge.service.publisher import PublishError, Signer, local_names, publish, read_local
    home = Path(args.bundle) if args.bundle else _home(args)
    server = _server(args)
    token = _write_token(args)
    names = args.names or (local_names(home) if args.all else [])
    if not names:
        raise ValueError(f"nothing to push: name variants or pass --all (registry {home})")
    signer = Signer(Path(args.sign_key)) if args.sign_key else None
    failed = 0
    for name in names:
        manifest, cubin = read_local(home, name)
        if signer:
            manifest = signer.sign(manifest)
        try:
            r = publish(server, token, manifest, cubin)
            print(f"{name}: {'published' if r['created'] else 'already published (no change)'} {r['sha256'][:12]}")
        except PublishError as e:
            failed += 1
            print(f"error: {e}", file=sys.stderr)
    return 1 if failed else 0


def _remote(args):
    from cubinforge.runtime.cache import Cache
    from cubinforge.runtime.remote import RemoteSource
    keys = None
    if args.trusted_keys:
        from cubinforge.runtime.signing import load_trusted_keys
        keys = load_trusted_keys(args.trusted_keys)
    # Offline still needs the URL: it names the server's folder in the cache.
    return RemoteSource(_server(args), cache=Cache(args.cache_dir) if args.cache_dir else None, trusted_keys=keys)


def _pull(args) -> int:
    src = _remote(args)
    names = args.names or (src.list() if args.all else [])
    if not names:
        raise ValueError("nothing to pull: name variants or pass --all")
    for name in names:
        manifest, data = src.fetch(name)
        signed = ", ".join(s.get("key_id", "?") for s in manifest.get("signatures", [])) or "unsigned"
        print(f"{name}: {len(data)} bytes, sha256 {manifest['cubin']['sha256'][:12]} ({signed}) "
              f"cached in {src.cache.root}")
    return 0


# ------------------------------------------------------------------ bundles
def _bundle(args) -> int:
    from cubinforge.runtime.signing import load_trusted_keys
    from cubinforge.service.publisher import local_names, read_local, write_bundle
    if args.server:
        src = _remote(args)
        names = args.names or src.list()
        items = [src.fetch(n) for n in names]
    else:
        home = _home(args)
        names = args.names or local_names(home)
        items = [read_local(home, n) for n in names]
    if not items:
        raise ValueError("no variants to bundle")
    keys = list(load_trusted_keys(args.include_keys).values()) if args.include_keys else []
    out = write_bundle(Path(args.out), items, keys)
    print(f"bundle {out}: {len(items)} variants; on the air-gapped host: `cubinforge import-bundle {out}` "
          f"or CUBINFORGE_HOME={out} for the runtime directly")
    if args.cpp:
        from cubinforge.generator.cpp_bundle import render_cpp_bundle
        written = render_cpp_bundle([m for m, _ in items], {m["cubin"]["sha256"]: d for m, d in items},
                                    out / "cpp", embed=args.embed)
        print(f"C++ header and cubins in {out / 'cpp'} ({len(written)} files"
              f"{', cubins embedded' if args.embed else ''}); see docs/cpp-embedding.md")
    return 0


def _import_bundle(args) -> int:
    from cubinforge.service.publisher import PublishError, publish, read_bundle
    items = read_bundle(Path(args.bundle))
    if args.server:
        token = _write_token(args)
        results = []
        for manifest, cubin in items:
            try:
                r = publish(args.server, token, manifest, cubin)
                results.append((manifest["variant"], "created" if r["created"] else "unchanged"))
            except PublishError as e:
                results.append((manifest["variant"], f"refused: {e}"))
    else:
        _home(args)
        from cubinforge.runtime.signing import load_trusted_keys
        from cubinforge.service.config import Settings
        from cubinforge.service.importer import import_artifacts
        trusted = load_trusted_keys(args.trusted_keys) if args.trusted_keys else None
        results = import_artifacts(Settings.from_env(), items, trusted=trusted,
                                   require_signature=bool(trusted), publisher="import-bundle")
    for name, status in results:
        print(f"{name}: {status}")
    return 1 if any(s.startswith("refused") for _, s in results) else 0


# ------------------------------------------------------------------ registration
def add_subcommands(sub) -> None:
    from cubinforge.service.serve import add_arguments

    p = sub.add_parser("serve", help="run the registry HTTP service")
    add_arguments(p)
    p.set_defaults(func=_serve)

    p = sub.add_parser("db", help="database schema (Alembic migrations)")
    dsub = p.add_subparsers(dest="db_command", required=True)
    u = dsub.add_parser("upgrade", help="apply migrations (default: to the latest)")
    u.add_argument("revision", nargs="?", default="head")
    u.set_defaults(func=_db_upgrade)
    c = dsub.add_parser("check", help="hash every published variant's blob against its name")
    c.set_defaults(func=_db_check)
    r = dsub.add_parser("repair", help="restore missing or corrupt blobs from good copies")
    r.add_argument("sources", nargs="*", help="registry homes or bundles to take verified copies from")
    r.set_defaults(func=_db_check)

    a = dsub.add_parser("audit", help="the latest writes: when, which token, what, to which variant")
    a.add_argument("--variant", help="only this variant's")
    a.add_argument("--limit", type=int, default=100)
    a.set_defaults(func=_db_audit)

    p = sub.add_parser("token", help="write-API bearer tokens (stored hashed), each with scopes")
    p.add_argument("action", choices=["add", "revoke", "list"])
    p.add_argument("name", nargs="?")
    p.add_argument("--scope", action="append",
                   help="with add, repeatable: admin | family:<family> | prefix:<name prefix>")
    p.set_defaults(func=_token)

    p = sub.add_parser("keygen", help="make an ed25519 signing key pair (OUT.key, OUT.pub)")
    p.add_argument("--out", default="cubinforge-signing", help="path prefix (default ./cubinforge-signing)")
    p.set_defaults(func=_keygen)

    def token_args(p):
        p.add_argument("--token-stdin", action="store_true",
                       help="read the bearer token from stdin's first line (default: $CUBINFORGE_TOKEN)")
        p.add_argument("--token", help=argparse.SUPPRESS)  # refused with a message: argv is not secret

    def client_args(p, token=False):
        p.add_argument("--server", help="registry URL (default $CUBINFORGE_REGISTRY_URL)")
        if token:
            token_args(p)
        else:
            p.add_argument("--cache-dir", help="cache folder (default $CUBINFORGE_CACHE_DIR or XDG cache)")
            p.add_argument("--trusted-keys", help="trusted .pub files/folders (default $CUBINFORGE_TRUSTED_KEYS)")

    p = sub.add_parser("push", help="publish local variants to a registry server")
    p.add_argument("names", nargs="*")
    p.add_argument("--all", action="store_true", help="every variant in the local registry")
    p.add_argument("--sign-key", help="ed25519 private key to sign each manifest with")
    p.add_argument("--bundle", help="push from this bundle instead of the local registry")
    client_args(p, token=True)
    p.set_defaults(func=_push)

    p = sub.add_parser("pull", help="download and verify variants into the local cache")
    p.add_argument("names", nargs="*")
    p.add_argument("--all", action="store_true")
    client_args(p)
    p.set_defaults(func=_pull)

    p = sub.add_parser("bundle", help="export variants to a self-contained folder (air-gapped hosts)")
    p.add_argument("out")
    p.add_argument("names", nargs="*")
    p.add_argument("--include-keys", help="public keys (.pub files/folders) to ship in the bundle")
    p.add_argument("--cpp", action="store_true",
                   help="also render <out>/cpp/: a C++ header with the contracts as a constexpr table")
    p.add_argument("--embed", action="store_true", help="with --cpp: embed the cubins as byte arrays")
    client_args(p)
    p.set_defaults(func=_bundle)

    p = sub.add_parser("import-bundle", help="load a bundle into a registry (local database or --server)")
    p.add_argument("bundle")
    p.add_argument("--trusted-keys", help="refuse artifacts not signed by these keys")
    p.add_argument("--server", help="publish to this server instead of the local database")
    token_args(p)
    p.set_defaults(func=_import_bundle)
