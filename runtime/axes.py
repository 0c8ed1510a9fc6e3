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
    # An axis whose default is another axis's value (V as wide as Q: head_dim_v = head_dim),
    # left out of names when it equals it.
    default_from: str | None = None
    # A form axis changes how the kernel computes, not what: every value gives the same answer
    # for the same inputs (split-KV + combine, pack-GQA). A dispatcher rule may choose its
    # value for a problem that did not ask (dispatch.Preference); other exact axes never move.
    form: bool = False


AXES: dict[str, Axis] = {
    a.name: a
    for a in (
        Axis("arch", ("sm_90a", "sm_100a")),
        Axis("dtype", ("bf16", "fp16", "e4m3")),
        Axis("head_dim", (64, 96, 128, 192, 256)),
        Axis("head_dim_v", (64, 96, 128, 192, 256), default_from="head_dim"),
        Axis("causal", (False, True)),
        Axis("varlen", (False, True), False, "varlen"),
        Axis("paged_kv", (False, True), False, "paged"),
        Axis("pack_gqa", (False, True), False, "packgqa", form=True),
        Axis("split_kv", (False, True), False, "splitkv", form=True),
        # How V is laid out: (batch, seqlen_k, heads_kv, head_dim) or, for FP8,
        # (batch, heads_kv, head_dim, seqlen_k) (token "colmajor").
        Axis("v_layout", ("rowmajor", "colmajor"), "rowmajor"),
        # e4m3 q/k descales: per (batch, head_kv) (FA3's) or per block of q and k tokens
        # ("blockq128k192": quantize_fp8(q, block=128), quantize_fp8(k, block=192)).
        Axis("descale_block", ("head", "blockq128k128", "blockq128k192"), "head"),
        Axis("softcap", (False, True), False, "softcap"),
        Axis("local", (False, True), False, "local"),
        Axis("learnable_sink", (False, True), False, "sink"),
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


def form_axes() -> set:
    """Exact axes a dispatcher rule may set for a problem that left them out (Axis.form)."""
    return {a.name for a in AXES.values() if a.form}


def derived_axes() -> dict:
    """Axes whose default is another axis's value: {axis: the axis it defaults to}."""
    return {a.name: a.default_from for a in AXES.values() if a.default_from}


def axis_value(axes, name: str):
    """A variant's value of axis `name`, from its axes; an axis written before it existed
    takes its default (a value head dim is the head dim)."""
    if name in axes:
        return axes[name]
    axis = AXES.get(name)
    if axis is not None and axis.default_from:
        return axes.get(axis.default_from)
    return default_axes().get(name)


def with_defaults(axes) -> dict:
    """The exact axes a request means: the plain kernel's defaults, what was asked, and each
    derived axis from the axis it follows (head_dim_v = head_dim unless asked)."""
    want = default_axes()
    want.update(axes)
    for name, source in derived_axes().items():
        if name not in want and source in want:
            want[name] = want[source]
    return want
