"""`cubinforge serve`: migrate once, then run uvicorn with N workers on the app factory.

Migrations run here, in the parent, before any worker starts, so N workers never race on
the schema; the workers are told to skip them (CUBINFORGE_MIGRATE_ON_START=0).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--no-migrate", action="store_true", help="do not apply database migrations at start-up")
    p.add_argument("--access-log", action="store_true", help="log every request (slower)")
    p.add_argument("--import-local", action="store_true",
                   help="first publish the local registry's builds ($CUBINFORGE_HOME/manifests) into the service")


def _import_local(settings) -> None:
    from .importer import import_artifacts
    from .publisher import local_names, read_local
    log = logging.getLogger("cubinforge.service")
    items = []
    for name in local_names(settings.home):
        try:
            items.append(read_local(settings.home, name))
        except (ValueError, OSError, KeyError) as e:
            log.warning("not importing %s: %s", name, e)
    for name, status in import_artifacts(settings, items, publisher="local"):
        (log.warning if status.startswith("refused") else log.info)("local variant %s: %s", name, status)


def _http_protocol() -> str:
    """One send() per answer (h1.py) where uvicorn's httptools protocol is available."""
    if os.environ.get("CUBINFORGE_HTTP") == "auto":  # uvicorn's own protocol, for an A/B
        return "auto"
    try:
        import httptools  # noqa: F401
        import uvicorn.protocols.http.httptools_impl  # noqa: F401
    except ImportError:
        return "auto"
    return "cubinforge.service.h1:HeldHttpToolsProtocol"


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .config import Settings
    from cubinforge.registry.migrate import upgrade

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env()
    if not args.no_migrate:
        upgrade(settings.database_url)
    (settings.home / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    # No worker runs yet, so every temp file left is from a publish that was killed: remove them all.
    from cubinforge.registry.blobstore import BlobStore
    n = BlobStore(settings.home / "blobs").clean_temp()
    # A publish killed between its commit and its bump would leave answers cached elsewhere stale.
    from .readcache import Generation
    Generation(settings.home).bump()
    if n:
        logging.getLogger("cubinforge.service").warning("removed %d temp file(s) left by interrupted publishes", n)
    if args.import_local:
        _import_local(settings)
    os.environ["CUBINFORGE_MIGRATE_ON_START"] = "0"
    prom_dir = None
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each worker has its own counters; multiprocess mode sums them at /metrics.
        prom_dir = tempfile.mkdtemp(prefix="cubinforge-prom-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = prom_dir
    try:
        uvicorn.run("cubinforge.service.app:create_app", factory=True, host=args.host, port=args.port,
                    workers=args.workers, log_level=args.log_level, access_log=args.access_log,
                    proxy_headers=False, server_header=False, timeout_keep_alive=30, backlog=2048,
                    http=_http_protocol())
    finally:
        if prom_dir:
            shutil.rmtree(prom_dir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cubinforge serve", description="Run the registry HTTP service")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
