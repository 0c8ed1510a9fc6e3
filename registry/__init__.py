"""cubinforge.registry: the local store of built cubins (SQLite rows, sha256 blobs, manifests)."""

from .store import ArtifactInput, Registry

__all__ = ["ArtifactInput", "Registry"]
