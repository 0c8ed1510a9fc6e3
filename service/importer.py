"""Publishing straight into a registry database (no HTTP): import-bundle and serve's import of
local builds. The same checks as POST /v1/artifacts apply."""

from __future__ import annotations

import logging

from pydantic import ValidationError

from cubinforge.registry.blobstore import BlobStore
from cubinforge.registry.db import Database
from cubinforge.registry.migrate import upgrade
from cubinforge.runtime import signing

from .config import Settings
from .errors import APIError
from .publish import check_artifact, check_signatures
from .schemas import Manifest
from .store import Store

log = logging.getLogger("cubinforge.service")


def import_artifacts(settings: Settings, items, *, trusted: dict | None = None, require_signature: bool = False,
                     publisher: str = "import") -> list[tuple[str, str]]:
    """Publish each (manifest, cubin); returns (name, "created"|"unchanged"|"refused: why") per item."""
    upgrade(settings.database_url)
    db = Database(settings.database_url)
    store = Store(BlobStore(settings.home / "blobs"))
    results = []
    try:
        for manifest, cubin in items:
            name = manifest.get("variant", "?")
            try:
                manifest = Manifest.model_validate(manifest).model_dump(mode="json", exclude_unset=True)
                check_artifact(manifest, cubin)
                signed_by = check_signatures(manifest, require_signature, None)
                if trusted:
                    signing.verify_manifest(manifest, trusted)
                with db.sessions() as s:
                    created, _ = store.publish(s, manifest, cubin, signed_by, publisher)
                results.append((name, "created" if created else "unchanged"))
            except APIError as e:
                results.append((name, f"refused: {e.message}"))
            except ValidationError as e:
                results.append((name, f"refused: not a valid manifest: {e.errors()[0].get('msg')} "
                                      f"at {'.'.join(map(str, e.errors()[0].get('loc', ())))}"))
            except signing.SignatureError as e:
                results.append((name, f"refused: {e}"))
    finally:
        db.dispose()
    return results
