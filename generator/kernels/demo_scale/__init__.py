"""demo_scale: a tiny real CuTe DSL kernel (scale a vector in place) with a real launch contract.

It has the same interface as the attention families, `compile_variant(config) -> KernelBuild`,
so it exercises the whole pipeline (compile, ELF metadata, contract check, registry) in seconds.
"""

from .config import DemoConfig
from .kernel import compile_variant

__all__ = ["DemoConfig", "compile_variant"]
