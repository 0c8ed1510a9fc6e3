"""Finding variants: manifests and cubin blobs from a registry, read with the stdlib only.

A ``Source`` lists manifest names, returns a manifest dict and returns blob bytes.
``LocalSource`` reads ``$CUBINFORGE_HOME`` (default ``./.cubinforge``):
``manifests/<variant>.json`` and ``blobs/sha256/<first 2 hex>/<sha256>``. An HTTP source can
implement the same three methods later. ``select`` picks the one variant whose axes match
what was asked; when none does, ``VariantNotFound`` says which values do not exist and
which variants come nearest. Blobs are checked against their sha256 before use, whatever
the source.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, runtime_checkable

from .contract import Contract, load_contract
from .axes import axis_value, derived_axes
from .dispatch import Choice, Problem, fmt_axes, matches, rank, same_value
from .errors import ContractError, IntegrityError, UnverifiedVariant, VariantNotFound

MANIFEST_VERSION = 1
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
log = logging.getLogger("cubinforge.runtime")
ALLOW_UNVERIFIED_ENV = "CUBINFORGE_ALLOW_UNVERIFIED"


def refuses_unverified(verification: Mapping[str, Any] | None) -> bool:
    """The refusal rule (registry/verification.py writes the entry): a variant is refused without
    an opt-in when it is unverified and no cubin of its family on its arch has passed a GPU check
    (every sm_100a variant today), or its cubin failed one. A manifest written before
    verification was recorded (no entry) is not refused."""
    if not verification:
        return False
    return verification.get("status") != "verified" and not verification.get("arch_verified", False)


def allow_unverified_from_env() -> bool:
    return os.environ.get(ALLOW_UNVERIFIED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def check_verified(manifest: "Manifest", allow_unverified: bool | None = None) -> None:
    """Raise UnverifiedVariant, saying why, unless the variant may launch (see refuses_unverified)."""
    allow = allow_unverified_from_env() if allow_unverified is None else allow_unverified
    v = manifest.verification
    if allow or not refuses_unverified(v):
        return
    raise UnverifiedVariant(
        f"{manifest.variant} is unverified: {v.get('reason', 'it has never been checked numerically on a GPU')}. "
        f"Its results have never been compared with a reference, so they may be wrong. To launch it anyway "
        f"set {ALLOW_UNVERIFIED_ENV}=1 or pass allow_unverified=True.")


@runtime_checkable
class Source(Protocol):
    def list(self) -> Iterable[str]: ...
    def get(self, name: str) -> Mapping[str, Any]: ...
    def blob(self, sha256: str) -> bytes: ...


@dataclass(frozen=True)
class Manifest:
    variant: str
    family: str
    axes: Mapping[str, Any]
    cubin_sha256: str
    cubin_size: int
    contract: Contract
    metadata: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def verification(self) -> dict:
        """provenance.verification: where this cubin was checked numerically, or why not ({} if
        the manifest predates the record)."""
        return dict((self.raw.get("provenance") or {}).get("verification") or {})


def load_manifest(raw: Mapping[str, Any]) -> Manifest:
    """Validate a manifest and cross-check its contract against the cubin metadata."""
    if not isinstance(raw, Mapping):
        raise ContractError(f"a manifest is a JSON object, got {type(raw).__name__}")
    if raw.get("manifest_version") != MANIFEST_VERSION:
        raise ContractError(f"manifest_version {raw.get('manifest_version')!r} is not supported "
                            f"(this runtime reads {MANIFEST_VERSION})")
    name = raw.get("variant")
    where = f"manifest {name!r}"
    for key, typ in (("variant", str), ("family", str), ("axes", Mapping), ("cubin", Mapping),
                     ("contract", Mapping)):
        if not isinstance(raw.get(key), typ):
            raise ContractError(f"{where}: '{key}' is missing or not a {typ.__name__}")
    sha = str(raw["cubin"].get("sha256", "")).lower()
    if not _SHA_RE.match(sha):
        raise ContractError(f"{where}: cubin.sha256 {sha!r} is not 64 hex digits")
    contract = load_contract(raw["contract"])
    meta = raw.get("metadata") or {}
    # The contract is what we launch from; where the metadata also says it, they must agree.
    for key, cval in (("entry", contract.entry), ("block", list(contract.block)),
                      ("cluster", list(contract.cluster)), ("dynamic_smem_bytes", contract.dynamic_smem_bytes)):
        if key in meta and meta[key] != cval:
            raise ContractError(f"{where}: metadata.{key} = {meta[key]!r} but contract.{key} = {cval!r}")
    if "param_table" in meta:
        table = sorted((e["ordinal"], e["offset"], e["size"]) for e in meta["param_table"])
        mine = [(p.ordinal, p.offset, p.size) for p in contract.params]
        if table != mine:
            raise ContractError(f"{where}: contract params (ordinal, offset, size) {mine} differ from the "
                                f"cubin's parameter table {table}")
    arch = raw["axes"].get("arch")
    if arch is not None and arch != contract.arch:
        raise ContractError(f"{where}: axes.arch {arch!r} but contract.arch {contract.arch!r}")
    return Manifest(raw["variant"], raw["family"], dict(raw["axes"]), sha,
                    int(raw["cubin"].get("size", -1)), contract, meta, raw)


def fetch_cubin(manifest: Manifest, source: Source) -> bytes:
    """The manifest's cubin, verified against its sha256 and size."""
    data = source.blob(manifest.cubin_sha256)
    got = hashlib.sha256(data).hexdigest()
    if got != manifest.cubin_sha256:
        raise IntegrityError(f"cubin of {manifest.variant}: sha256 is {got}, the manifest says "
                             f"{manifest.cubin_sha256}; the blob is corrupt or was replaced - rebuild it")
    if manifest.cubin_size >= 0 and len(data) != manifest.cubin_size:
        raise IntegrityError(f"cubin of {manifest.variant}: {len(data)} bytes, the manifest says "
                             f"{manifest.cubin_size}")
    return data


class LocalSource:
    """The on-disk registry under ``home`` (default ``$CUBINFORGE_HOME`` or ``./.cubinforge``)."""

    def __init__(self, home: str | os.PathLike | None = None):
        self.home = Path(home or os.environ.get("CUBINFORGE_HOME") or ".cubinforge")
        self._cache: dict[Path, tuple[int, int, dict]] = {}

    def __repr__(self) -> str:
        return f"LocalSource({str(self.home)!r})"

    def list(self) -> list[str]:
        d = self.home / "manifests"
        if not d.is_dir():
            return []
        return sorted(p.stem for p in d.iterdir() if p.suffix == ".json")

    def get(self, name: str) -> dict:
        if not _NAME_RE.match(name):
            raise VariantNotFound(f"{name!r} is not a variant name")
        path = self.home / "manifests" / f"{name}.json"
        try:
            st = path.stat()
        except FileNotFoundError:
            raise VariantNotFound(f"no manifest {path}") from None
        hit = self._cache.get(path)
        if hit and hit[:2] == (st.st_mtime_ns, st.st_size):
            return hit[2]
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ContractError(f"{path}: not valid JSON ({e})") from e
        self._cache[path] = (st.st_mtime_ns, st.st_size, raw)
        return raw

    def blob(self, sha256: str) -> bytes:
        if not _SHA_RE.match(sha256):
            raise IntegrityError(f"{sha256!r} is not a sha256 hex digest")
        path = self.home / "blobs" / "sha256" / sha256[:2] / sha256
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise IntegrityError(f"cubin blob {path} is missing from the registry") from None


def default_source() -> Source:
    """The remote registry when CUBINFORGE_REGISTRY_URL is set, else the local one."""
    from .remote import source_from_env

    return source_from_env() or LocalSource()


def manifests(source: Source | None = None, family: str | None = None) -> tuple[list[Manifest], list[str]]:
    """Every readable manifest (optionally of one family), and a note per unreadable one.

    One bad artifact (unreadable, or failing its signature check) is skipped and logged, so
    it cannot break the selection of the others."""
    source = source or default_source()
    found, broken = [], []
    for name in source.list():
        try:
            m = load_manifest(source.get(name))
        except (ContractError, VariantNotFound, IntegrityError) as e:
            log.warning("cubinforge: skipping variant %s: %s", name, e)
            broken.append(f"{name}: {e}")
            continue
        if m.variant != name:
            broken.append(f"{name}: its 'variant' field says {m.variant!r}")
            continue
        if family is None or m.family == family:
            found.append(m)
    return found, broken


def select(family: str, axes: Mapping[str, Any] | None = None, source: Source | None = None,
           *, sizes: Mapping[str, int] | None = None, **more) -> Manifest:
    """The variant of ``family`` whose axes equal ``axes`` (plus axes.default_axes() for those not
    given). Axes not asked for (scheduler, tiles) may take any value: among several such
    matches the dispatcher's preferences for the problem's ``sizes`` (seqlen_q, ...) rank
    them, then the name, so the choice is stable. Nothing else is substituted. With
    CUBINFORGE_COMPILE_ON_MISS=1, a miss on a LocalSource first compiles exactly the asked
    variant into it (runtime/compile_on_miss.py), then chooses again."""
    return choose(Problem(family, {**(axes or {}), **more}, **(sizes or {})), source).best


def choose(problem: Problem, source: Source | None = None) -> Choice:
    """The dispatcher's ranked choice over ``source``'s manifests, or VariantNotFound naming
    what does not exist and the nearest variants."""
    source = source or default_source()
    found, broken = manifests(source, problem.family)
    choice = rank(problem, found)
    if choice is not None:
        return choice
    family, want = problem.family, problem.exact()
    derived = derived_axes()

    def differs(m: Manifest) -> list[str]:
        # A derived axis nobody asked for (head_dim_v) is said once, beside its source
        # (head_dim), unless the variant's own value departs from its source's.
        return [k for k in matches(problem, m.axes)
                if not (k in derived and k not in problem.axes
                        and same_value(axis_value(m.axes, k), axis_value(m.axes, derived[k])))]

    def have(m: Manifest, k: str):
        return axis_value(m.axes, k)

    asked = {k: v for k, v in want.items() if k not in derived or k in problem.axes}
    lines = [f"no {family} variant with {fmt_axes(asked)} in {source!r}."]
    from . import compile_on_miss  # only on a miss; it runs the build in a subprocess

    if compile_on_miss.enabled() and isinstance(source, LocalSource):
        ok, said = compile_on_miss.compile_variant(source.home, family, want)
        choice = rank(problem, manifests(source, family)[0]) if ok else None
        if choice is not None:
            return choice
        lines.append(f"{compile_on_miss.ENV}=1 tried to compile it: {said}")
    if not found:
        lines.append(f"The registry holds no {family} variants at all"
                     + (" (build some: make kernels)." if not broken else "."))
    else:
        for k, v in asked.items():
            if not any(same_value(have(m, k), v) for m in found):
                values = sorted({repr(have(m, k)) for m in found})
                lines.append(f"No {family} variant has {k}={v!r} (available: {', '.join(values)}).")
        ranked = sorted(found, key=lambda m: (len(differs(m)), m.variant))
        best = len(differs(ranked[0]))
        near = [m for m in ranked if len(differs(m)) == best][:8]
        lines.append("Nearest: " + "; ".join(
            f"{m.variant} (differs in {', '.join(f'{k}={have(m, k)!r}' for k in differs(m))})" for m in near))
    if broken:
        lines.append(f"{len(broken)} manifest(s) could not be read: " + "; ".join(broken[:5]))
    raise VariantNotFound(" ".join(lines))
