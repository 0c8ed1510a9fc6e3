"""The one variant to build for a miss: what a select asked for, whether or not a set holds it.

A select fixes some axes (arch, dtype, head_dim, causal...). The variant built for it takes
those values exactly; the axes it left open (scheduler, tiles) take the shipping sets'
choice when a set holds a match (the default set first), else the spec's defaults. Axes the
family does not have are allowed only at their default (the runtime always sends
varlen=False etc.). What the spec does not allow is a SpecError saying why.
"""

from __future__ import annotations

from typing import Any, Mapping

from .families import get_family
from .spec import AXES, SETS, SpecError, Variant, expand_set, make_variant, parse_value


def variant_for(family: str, axes: Mapping[str, Any]) -> Variant:
    fam = get_family(family)
    own: dict[str, Any] = {}
    for axis, value in axes.items():
        if axis in fam.axes:
            own[axis] = parse_value(axis, value)
        elif axis in AXES and AXES[axis].default is not None and parse_value(axis, value) == AXES[axis].default:
            continue
        else:
            raise SpecError(f"{fam.name} has no axis {axis} (its axes: {', '.join(fam.axes)}); "
                            f"cannot build {axis}={value!r}")
    wanted = make_variant(family, **own)  # validates the request (and is the answer when no set has it)
    # The exact axes left out mean the plain kernel (runtime/axes.py): varlen=False,
    # head_dim_v = head_dim, ...; only the free axes (scheduler, tiles) are the sets' choice.
    own.update({a: wanted.axes[a] for a in fam.axes if a not in own and AXES[a].exact})
    for set_name in ["default", *[s for s in SETS if s != "default"]]:
        for v in expand_set(set_name):
            if v.family == fam.name and all(v.axes[a] == x for a, x in own.items()):
                return v
    return wanted
