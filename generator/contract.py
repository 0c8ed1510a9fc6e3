"""Assemble a variant's launch contract and check it against the cubin (docs/launch-contract.md).

The kernel supplies the sections only it knows (grid, symbols, tensors, scalars, checks,
params); the pipeline adds what the build and the cubin know. `verify` fails the build when
the contract's parameter layout (ordinal, offset, size) differs from the cubin's
EIATTR_KPARAM_INFO table, or when the contract is not one a launcher can follow.
"""

from __future__ import annotations

from .cubin_elf import KernelInfo
from .kernel_build import KernelBuild
from cubinforge.runtime.contract import CONTRACT_VERSION, load_contract
from cubinforge.runtime.errors import ContractError as _MalformedContract

KERNEL_SECTIONS = ("grid", "symbols", "tensors", "scalars", "checks", "params")


class ContractError(ValueError):
    """The contract is malformed or disagrees with the cubin."""


def assemble(variant: str, arch: str, build: KernelBuild, kernel: KernelInfo) -> dict:
    missing = [s for s in KERNEL_SECTIONS if s not in build.contract]
    if missing:
        raise ContractError(f"the kernel's contract lacks {', '.join(missing)}")
    extra = sorted(set(build.contract) - set(KERNEL_SECTIONS))
    if extra:
        raise ContractError(f"the kernel's contract has sections the pipeline owns or does not know: {extra}")
    return {
        "contract_version": CONTRACT_VERSION,
        "variant": variant,
        "arch": arch,
        "entry": build.entry,
        "block": list(build.block),
        "cluster": list(build.cluster),
        "dynamic_smem_bytes": int(build.dynamic_smem_bytes),
        "static_smem_bytes": kernel.static_smem_bytes,
        **({"smem_carveout_percent": int(build.smem_carveout_percent)}
           if getattr(build, "smem_carveout_percent", None) is not None else {}),
        **{s: build.contract[s] for s in KERNEL_SECTIONS},
    }


def verify(contract: dict, kernel: KernelInfo, cubin_arch: str) -> None:
    """Raise ContractError listing every problem found."""
    problems: list[str] = []
    problems += _check_params_against_cubin(contract["params"], kernel)
    if contract["arch"] != cubin_arch:
        problems.append(f"contract arch {contract['arch']} but the cubin is {cubin_arch}")
    if kernel.reqntid is not None and tuple(contract["block"]) != tuple(kernel.reqntid):
        problems.append(f"block {contract['block']} but the cubin requires {list(kernel.reqntid)} threads")
    # The structure: the one validator every launcher uses (runtime/contract.py), so a
    # contract the build accepts is one the runtime and the C++ bundle accept.
    try:
        load_contract(contract)
    except _MalformedContract as e:
        problems.append(str(e))
    if problems:
        raise ContractError(f"launch contract of {contract['variant']} is wrong:\n  - " + "\n  - ".join(problems))


def _check_params_against_cubin(params: list[dict], kernel: KernelInfo) -> list[str]:
    problems = []
    ours = [(p.get("ordinal"), p.get("offset"), p.get("size")) for p in params]
    theirs = [(k.ordinal, k.offset, k.size) for k in kernel.params]
    if len(ours) != len(theirs):
        problems.append(f"contract has {len(ours)} params, the cubin's KPARAM table has {len(theirs)}")
    for mine, cubin in zip(ours, theirs):
        if mine != cubin:
            problems.append(
                "param %s: contract (ordinal, offset, size) = %s, cubin = %s" % (mine[0], mine, cubin)
            )
    return problems
