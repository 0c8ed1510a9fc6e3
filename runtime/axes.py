"""The axis table: every kernel axis the project knows, as plain data with no dependencies.

One entry per axis; everything else is derived from it or imports it: the generator's spec
(names, sets, filters, the CLI's --<axis> flags), the dispatcher's defaults, the C++ bundle's
default-axis table, the bench. A new axis is one entry here plus the kernel code that builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple  # every value the project knows of, built or not
    default: Any = None  # optional axes have a default that is left out of the name
    flag: str | None = None  # name token of a boolean optional axis when true
    # Exact axes must equal what a caller asks (a cubin for one head dim cannot run another);
    # free axes (scheduler, tiles) are the dispatcher's to choose among what fits.
    exact: bool = True


AXES: dict[str, Axis] = {
    a.name: a
    for a in (
        Axis("arch", ("sm_90a", "sm_100a")),
        Axis("dtype", ("bf16", "fp16", "e4m3")),
        Axis("head_dim", (64, 96, 128, 192, 256)),
        Axis("causal", (False, True)),
        Axis("varlen", (False, True), False, "varlen"),
        Axis("paged_kv", (False, True), False, "paged"),
        Axis("pack_gqa", (False, True), False, "packgqa"),
        Axis("split_kv", (False, True), False, "splitkv"),
        # How V is laid out: (batch, seqlen_k, heads_kv, head_dim) or, for FP8,
        # (batch, heads_kv, head_dim, seqlen_k) (token "colmajor").
        Axis("v_layout", ("rowmajor", "colmajor"), "rowmajor"),
        Axis("scheduler", ("single", "persistent", "lpt"), "single", exact=False),
        Axis("tile_m", (64, 128, 192, 256), exact=False),
        Axis("tile_n", tuple(range(16, 257, 16)), exact=False),
    )
}
TILE_AXES = ("tile_m", "tile_n")



def default_axes() -> dict:
    """Exact axes a caller may leave out, with the plain kernel's value: leaving one out means
    "the plain kernel", never "whatever exists". Read from AXES on every call, so an axis
    added to the table is seen everywhere at once."""
    return {a.name: a.default for a in AXES.values() if a.exact and a.default is not None}
