"""The layers, checked on the sources: runtime depends on nothing of ours but itself; the
registry on the runtime; the generator and the service on the registry and the runtime, and
neither on the other. Read from the import statements, so a lazy import inside a function
counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package folder -> the cubinforge subpackages its code may import
ALLOWED = {
    "runtime": {"runtime"},
    "registry": {"registry", "runtime"},
    "generator": {"generator", "registry", "runtime", "templates"},
    "service": {"service", "registry", "runtime", ""},  # "": cubinforge's own __version__
}


def _ours(folder: str, root: Path = ROOT) -> list[tuple[Path, int, str]]:
    """(file, line, subpackage) of every import of cubinforge code under `folder`; a folder's
    own tests (runtime/cpp/tests: harness scripts that build bundles) are not part of it."""
    found = []
    for path in sorted((root / folder).rglob("*.py")):
        rel = path.relative_to(root / folder)
        if "tests" in rel.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    # A relative import may not climb out of its own package.
                    depth = len(rel.parts) - 1
                    if node.level > depth + 1:
                        found.append((path, node.lineno, f"(relative, {node.level} levels up)"))
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "cubinforge":
                    found.append((path, node.lineno, parts[1] if len(parts) > 1 else ""))
    return found


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below(folder):
    bad = [f"{p.relative_to(ROOT)}:{line} imports cubinforge.{sub}" for p, line, sub in _ours(folder)
           if sub not in ALLOWED[folder]]
    assert not bad, "\n".join(bad)


def test_the_checker_sees_a_violation(tmp_path):
    """The test above could fail: a lazy runtime import of the generator, or a relative
    import out of the package, is caught."""
    fake = tmp_path / "runtime"
    fake.mkdir()
    (fake / "x.py").write_text("def f():\n    from cubinforge.generator import spec\n    from ..service import app\n")
    assert [sub for _, _, sub in _ours("runtime", tmp_path)] == ["generator", "(relative, 2 levels up)"]
