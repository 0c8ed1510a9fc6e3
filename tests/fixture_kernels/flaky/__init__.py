"""demo_scale that fails for fp16 (a kernel bug stand-in) and builds bf16."""

from cubinforge.generator.kernels.demo_scale import DemoConfig
from cubinforge.generator.kernels.demo_scale import compile_variant as _compile


def compile_variant(config: DemoConfig):
    if config.dtype == "fp16":
        raise RuntimeError("deliberate failure: this test kernel does not build fp16")
    return _compile(config)
