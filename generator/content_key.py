"""The content key: what a variant's cubin depends on, hashed without importing cutlass.

sha256 over the rendered source, every .py file of the family's kernel package (sorted by
path) and every module of the kernel tree outside it that those files import (a helper
shared between kernel packages: found by reading the imports, transitively), the DSL
toolchain versions (importlib.metadata), the compile options and the arch. A module of the
project outside the kernel tree that a kernel file imports by name (the runtime's tensor-map
helpers, which the varlen kernel calls while it is traced) is hashed too, by its own file
only: not what it imports, nor its packages' __init__ files, which re-export the whole
runtime, whose other modules the kernel never runs (so a runtime edit does not rebuild
every kernel). The generator's own modules stay under PIPELINE_VERSION. If the registry
already holds the variant under the same key, the build skips it. The pipeline's own modules
(kernel_build, cubin_elf, sass) are covered by PIPELINE_VERSION, not by the key.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
from functools import lru_cache
from pathlib import Path

# Bump when what the pipeline stores beside the cubin (metadata, contract assembly) changes shape.
PIPELINE_VERSION = 1
DSL_DISTRIBUTION = "nvidia-cutlass-dsl"
_TOOLCHAIN = (
    DSL_DISTRIBUTION,
    "nvidia-cutlass-dsl-libs-base",
    "nvidia-cutlass-dsl-libs-core",
    "nvidia-cutlass-dsl-libs-cu12",
    "nvidia-cutlass-dsl-libs-cu13",
)


def dsl_version() -> str:
    try:
        return importlib.metadata.version(DSL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "not-installed"


@lru_cache(maxsize=None)
def toolchain() -> str:
    """`name==version` of each installed DSL distribution (the libs wheel carries ptxas)."""
    parts = []
    for name in _TOOLCHAIN:
        try:
            parts.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ";".join(parts)


def package_dir(module: str) -> Path:
    """The folder of a kernel package, found without executing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"kernel package {module!r} is not importable (is it written yet?)")
    return Path(next(iter(spec.submodule_search_locations)))


def _imported_modules(path: Path, module: str) -> set[str]:
    """Absolute names of the modules a file imports (anywhere in it, function bodies too):
    for `from M import a`, both M and M.a (a may be a submodule)."""
    is_pkg = path.name == "__init__.py"
    here = module if is_pkg else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here.split(".") if here else []
            if node.level:
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def _module_file(name: str, root_name: str, root: Path) -> Path | None:
    """The file of module `name` under the kernel tree `root` (named root_name), or None."""
    if not name.startswith(root_name + "."):
        return None
    rel = Path(*name[len(root_name) + 1:].split("."))
    for candidate in (root / rel / "__init__.py", (root / rel).with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _project_module_file(name: str, project: str) -> Path | None:
    """The file of a plain module of the project (outside the kernel tree), or None for a
    package, a name that is not a module (`from M import a` also yields M.a) or another
    project. Finding it imports its parent packages, never cutlass (the project's runtime
    and registry do not import it)."""
    if not name.startswith(project + "."):
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, AttributeError, ValueError):
        return None
    if spec is None or spec.submodule_search_locations is not None or not spec.origin:
        return None
    origin = Path(spec.origin)
    return origin if origin.suffix == ".py" and origin.is_file() else None


def shared_modules(module: str) -> dict[str, Path]:
    """Modules of the kernel tree (the package's parent) outside the package that its files
    import, transitively, and modules of the project outside that tree that they import by
    name: name -> file. Empty for a package that imports only itself."""
    root_name = module.rpartition(".")[0]
    if not root_name:
        return {}
    project = module.partition(".")[0]
    pipeline = root_name.rpartition(".")[0]  # the generator, whose modules PIPELINE_VERSION covers
    pkg_root = package_dir(module)
    root = pkg_root.parent
    found: dict[str, Path] = {}
    todo = [(p, module + "." + ".".join(p.relative_to(pkg_root).with_suffix("").parts))
            for p in pkg_root.rglob("*.py") if "__pycache__" not in p.parts]
    todo = [(p, name[: -len(".__init__")] if name.endswith(".__init__") else name) for p, name in todo]
    while todo:
        path, name = todo.pop()
        named = _imported_modules(path, name)
        # Importing a.b.c runs the __init__ of a and a.b too.
        imports = named | {m.rsplit(".", k)[0] for m in named for k in range(1, m.count(".") + 1)}
        for imported in sorted(imports):
            if imported == module or imported.startswith(module + ".") or imported in found:
                continue
            file = _module_file(imported, root_name, root)
            if file is not None:
                found[imported] = file
                todo.append((file, imported))
            elif (imported in named and not imported.startswith(root_name + ".")
                  and not (pipeline and imported.startswith(pipeline + "."))):
                file = _project_module_file(imported, project)
                if file is not None:
                    found[imported] = file  # by file only: its own imports are not followed
    return dict(sorted(found.items()))


@lru_cache(maxsize=None)
def library_digest(module: str) -> str:
    """sha256 over every .py file of a kernel package (relative path and contents, sorted),
    then over each shared module it imports (name and contents). A package that imports
    nothing outside itself keeps the digest it had before shared modules were counted."""
    root = package_dir(module)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    for name, path in shared_modules(module).items():
        label = b"import:" + name.encode()
        data = path.read_bytes()
        h.update(len(label).to_bytes(8, "little") + label + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def content_key(rendered_source: str, package: str, compile_options: str, arch: str) -> str:
    h = hashlib.sha256()
    for label, value in (
        ("pipeline", str(PIPELINE_VERSION)),
        ("source", rendered_source),
        ("library", library_digest(package)),
        ("toolchain", toolchain()),
        ("options", compile_options),
        ("arch", arch),
    ):
        data = value.encode()
        h.update(label.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()
