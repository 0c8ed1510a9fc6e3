"""What a kernel family's `compile_variant(config)` returns: one compiled cubin and what it knows."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KernelBuild:
    """A compiled kernel as the family hands it to the pipeline.

    `contract` holds the launch-contract sections only the kernel knows (grid, symbols,
    tensors, scalars, checks, params); the pipeline adds entry, arch, block, cluster, the
    shared-memory sizes and the variant name (docs/launch-contract.md).
    """

    cubin: bytes
    entry: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dynamic_smem_bytes: int
    contract: dict
    compile_options: str
    extra: dict = field(default_factory=dict)  # free-form facts worth keeping (e.g. tile sizes)
    # The shared-memory carveout (percent of the SM's unified L1/shared memory) the launcher
    # asks for before launching, where the kernel's occupancy needs more than the driver's
    # default split gives (two CTAs an SM); None: the driver's default.
    smem_carveout_percent: int | None = None
