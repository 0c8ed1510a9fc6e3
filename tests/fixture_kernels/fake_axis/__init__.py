"""demo_scale behind one more axis, `fake`, to show a new axis is one entry in the axis table."""

from dataclasses import dataclass

from cubinforge.generator.kernels.demo_scale import DemoConfig
from cubinforge.generator.kernels.demo_scale import compile_variant as _compile


@dataclass(frozen=True)
class FakeAxisConfig:
    arch: str
    dtype: str
    fake: bool = False


def compile_variant(config: FakeAxisConfig):
    return _compile(DemoConfig(arch=config.arch, dtype=config.dtype))
