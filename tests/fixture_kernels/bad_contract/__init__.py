"""demo_scale with a contract whose second parameter sits at the wrong offset."""

from cubinforge.generator.kernels.demo_scale import DemoConfig
from cubinforge.generator.kernels.demo_scale import compile_variant as _compile


def compile_variant(config: DemoConfig):
    build = _compile(config)
    build.contract["params"][1]["offset"] = 20  # the cubin says 16
    return build
