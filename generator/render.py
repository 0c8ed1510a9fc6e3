"""Render one variant into a small Python module: its compile-time configuration + `build()`.

Rendering is a pure function of the variant; the kernel code lives in the family's package,
which the rendered module imports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from .families import get_family
from .spec import Variant, axis_default

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


@dataclass(frozen=True)
class RenderedSource:
    variant: str
    template: str  # path relative to the repository, as written in the header
    text: str

    @property
    def module_name(self) -> str:
        return "cubinforge_variant_" + self.variant.replace("-", "_")


def py_literal(value: object) -> str:
    """A Python literal for a config value (strings in double quotes, as people write them)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    raise TypeError(f"cannot render {value!r} as a config literal")


@lru_cache(maxsize=None)
def _environment(directory: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["py"] = py_literal
    return env


def config_items(v: Variant) -> list[tuple[str, object]]:
    """The CONFIG keyword arguments: the family's config axes always, other axes when not default."""
    fam = get_family(v.family)
    return [
        (axis, value)
        for axis, value in v.values
        if axis in fam.config_axes or value != axis_default(axis, v.axes)
    ]


def render(v: Variant) -> RenderedSource:
    fam = get_family(v.family)
    path = Path(fam.template)
    if not path.is_absolute():
        path = TEMPLATES_DIR / path
    template = _environment(str(path.parent)).get_template(path.name)
    shown = f"templates/{path.name}" if path.parent == TEMPLATES_DIR else str(path)
    text = template.render(
        template_path=shown,
        package=fam.package,
        config_class=fam.config_class,
        variant=v.name,
        config=config_items(v),
    )
    return RenderedSource(variant=v.name, template=shown, text=text)
