"""FlashAttention's variant arguments (window_size, softcap, learnable_sink) -> the axes a
variant is selected by and the scalars and tensors its contract takes.

The conventions are FlashAttention's (FA2/FA3/FA4 agree): window_size=(left, right) with -1
(any negative) unbounded, aligned bottom-right like causal; causal=True is the window
(left, 0); softcap=0 is off; learnable_sink is one natural-log logit per query head.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError


@dataclass(frozen=True)
class VariantArgs:
    causal: bool
    local: bool
    softcap: bool
    learnable_sink: bool
    scalars: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def axes(self) -> dict:
        """The axes to select by besides (arch, dtype, head_dim)."""
        return {"causal": self.causal, "local": self.local, "softcap": self.softcap,
                "learnable_sink": self.learnable_sink}

    @property
    def key(self) -> tuple:
        """Everything the launch depends on, for the call caches."""
        return (self.causal, self.local, self.softcap, self.learnable_sink,
                tuple(sorted(self.scalars.items())))


def _side(value: Any, which: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)                       # ints, numpy integers
    except TypeError:
        raise InputError(f"window_size {which} must be an integer (-1 for unbounded), got {value!r}") from None
    return max(v, -1)


def resolve(causal: Any = False, window_size: Any = (-1, -1), softcap: Any = 0.0,
            has_sink: bool = False) -> VariantArgs:
    """Check the arguments and say which variant serves them.

    (-1, -1) is no window; causal=True sets right = 0; a window (-1, 0) is causal; any other
    window is `local` with left/right as runtime scalars (the contract resolves -1 itself)."""
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise InputError(f"window_size must be a pair (left, right), got {window_size!r}") from None
    left, right = _side(left, "left"), _side(right, "right")
    causal = bool(causal)
    if causal:
        right = 0
    local = False
    if left < 0 and right < 0:
        pass                                            # no window
    elif left < 0 and right == 0:
        causal = True                                   # FlashAttention's causal
    else:
        causal, local = False, True
    try:
        cap = float(softcap)
    except (TypeError, ValueError):
        raise InputError(f"softcap must be a number (0 turns it off), got {softcap!r}") from None
    if not math.isfinite(cap) or cap < 0:
        raise InputError(f"softcap must be finite and >= 0 (0 turns it off), got {softcap!r}")
    scalars: dict = {}
    if local:
        scalars["window_left"], scalars["window_right"] = left, right
    if cap > 0:
        scalars["softcap"] = cap
    return VariantArgs(causal, local, cap > 0, bool(has_sink), scalars)


def refuse_e4m3(variant: VariantArgs, what: str) -> None:
    """e4m3 inputs take none of the model variants yet (FwdConfig refuses the pair; softcap,
    for one, would need q's and k's descales inside tanh): say so before looking for a kernel."""
    on = [a for a in ("local", "softcap", "learnable_sink") if getattr(variant, a)]
    if on:
        names = {"local": "window_size", "softcap": "softcap", "learnable_sink": "learnable_sink"}
        raise InputError(f"{what} with e4m3 inputs takes no {', '.join(names[a] for a in on)} yet: "
                         f"call it with bf16/fp16 inputs for those, or leave them at their defaults for e4m3")
