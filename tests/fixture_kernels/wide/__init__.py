"""demo_scale behind the attention axes (head_dim, causal), to build a default-sized set fast."""

from dataclasses import dataclass

from cubinforge.generator.kernels.demo_scale import DemoConfig
from cubinforge.generator.kernels.demo_scale import compile_variant as _compile


@dataclass(frozen=True)
class WideConfig:
    arch: str
    dtype: str
    head_dim: int
    causal: bool


def compile_variant(config: WideConfig):
    return _compile(DemoConfig(arch=config.arch, dtype=config.dtype))
