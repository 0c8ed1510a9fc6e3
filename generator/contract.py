"""Assemble a variant's launch contract and check it against the cubin (docs/launch-contract.md).

The kernel supplies the sections only it knows (grid, symbols, tensors, scalars, checks,
params); the pipeline adds what the build and the cubin know. `verify` fails the build when
the contract's parameter layout (ordinal, offset, size) differs from the cubin's
EIATTR_KPARAM_INFO table, or when the contract is not one a launcher can follow.
"""

from __future__ import annotations

from .cubin_elf import KernelInfo
from .kernel_build import KernelBuild
from cubinforge.runtime.contract import DEVICE_SYMBOLS

CONTRACT_VERSION = 1
KERNEL_SECTIONS = ("grid", "symbols", "tensors", "scalars", "checks", "params")
OPERATORS = {"+", "-", "*", "/", "//", "ceil_div", "min", "max", "==", "!=", "<", "<=", "%", "rsqrt", "log2e_mul"}
UNARY = {"rsqrt", "log2e_mul"}
DTYPES = {"bf16", "fp16", "e4m3", "f32", "i32"}
FIELD_TYPES = {"i32": 4, "i64": 8, "u64": 8, "f32": 4, "ptr": 8}
SCALAR_TYPES = {"i32": 4, "i64": 8, "f32": 4}
TENSORMAP_KEYS = ("tensor", "dtype", "dims", "box", "element_strides", "interleave", "swizzle", "l2_promotion", "oob_fill")


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
    for key in ("block", "cluster"):
        v = contract[key]
        if len(v) != 3 or not all(isinstance(x, int) and x >= 1 for x in v):
            problems.append(f"{key} must be three positive ints, not {v}")
    problems += _check_structure(contract)
    if problems:
        raise ContractError(f"launch contract of {contract['variant']} is wrong:\n  - " + "\n  - ".join(problems))


def _check_params_against_cubin(params: list[dict], kernel: KernelInfo) -> list[str]:
    problems = []
    ours = [(p.get("ordinal"), p.get("offset"), p.get("size")) for p in params]
    theirs = [(k.ordinal, k.offset, k.size) for k in kernel.params]
    if [o for o, _, _ in ours] != list(range(len(ours))):
        problems.append(f"params must be listed in ordinal order 0..{len(ours) - 1}, got {[o for o, _, _ in ours]}")
    if len(ours) != len(theirs):
        problems.append(f"contract has {len(ours)} params, the cubin's KPARAM table has {len(theirs)}")
    for mine, cubin in zip(ours, theirs):
        if mine != cubin:
            problems.append(
                "param %s: contract (ordinal, offset, size) = %s, cubin = %s" % (mine[0], mine, cubin)
            )
    return problems


def _check_structure(c: dict) -> list[str]:
    """The contract refers only to what it declares, in forms a launcher understands."""
    problems: list[str] = []
    tensors, symbols, scalars = c["tensors"], c["symbols"], c["scalars"]
    names = set(symbols) | set(scalars) | DEVICE_SYMBOLS

    def expr(e, where: str) -> None:
        if not isinstance(e, list) or not e:
            problems.append(f"{where}: an expression is a non-empty list of tokens, not {e!r}")
            return
        depth = 0
        for tok in e:
            if isinstance(tok, bool):
                problems.append(f"{where}: token {tok!r} is a bool")
            elif isinstance(tok, (int, float)):
                depth += 1
            elif tok in OPERATORS:
                need = 1 if tok in UNARY else 2
                if depth < need:
                    problems.append(f"{where}: {tok!r} lacks operands")
                    return
                depth += 1 - need
            elif isinstance(tok, str) and (tok in names or _tensor_ref(tok, tensors)):
                depth += 1
            else:
                problems.append(f"{where}: unknown token {tok!r}")
                return
        if depth != 1:
            problems.append(f"{where}: leaves {depth} values on the stack, not 1")

    if len(c["grid"]) != 3:
        problems.append("grid must have three expressions")
    for i, g in enumerate(c["grid"]):
        expr(g, f"grid[{i}]")
    for name, t in tensors.items():
        if t.get("role") not in ("input", "output"):
            problems.append(f"tensor {name}: role must be input or output")
        if t.get("dtype") not in DTYPES:
            problems.append(f"tensor {name}: unknown dtype {t.get('dtype')!r}")
        dims = t.get("dims", [])
        for d in dims:
            if not isinstance(d, int) and d not in symbols:
                problems.append(f"tensor {name}: dimension {d!r} is not a symbol")
        cd = t.get("contiguous_dim")
        if cd is not None and not (0 <= cd < len(dims)):
            problems.append(f"tensor {name}: contiguous_dim {cd} out of range")
        if not isinstance(t.get("align_bytes"), int):
            problems.append(f"tensor {name}: align_bytes must be an int")
    for name, s in symbols.items():
        t = tensors.get(s.get("tensor"))
        if t is None or not (0 <= s.get("dim", -1) < len(t.get("dims", []))):
            problems.append(f"symbol {name}: {s} does not name a tensor dimension")
    for name, s in scalars.items():
        if s.get("type") not in SCALAR_TYPES:
            problems.append(f"scalar {name}: unknown type {s.get('type')!r}")
        if "default" in s:
            expr(s["default"], f"scalar {name} default")
    for i, chk in enumerate(c["checks"]):
        expr(chk.get("expr"), f"checks[{i}]")
        if not chk.get("message"):
            problems.append(f"checks[{i}] has no message")
    for p in c["params"]:
        where = f"param {p.get('ordinal')} ({p.get('name')})"
        for key in ("align", "name", "kind"):  # ordinal, offset, size: compared with the cubin above
            if key not in p:
                problems.append(f"{where}: missing {key}")
        # No `offset % align` check: offsets are relative to the parameter block, which itself
        # starts at an aligned constant-bank address (0x210 on sm_90a), so a 64 B-aligned
        # tensor map sits at offset 112 in a real FA3 cubin.
        kind = p.get("kind")
        if kind == "tensormap":
            if p.get("size") != 128:
                problems.append(f"{where}: a tensormap is 128 bytes")
            lacking = [k for k in TENSORMAP_KEYS if k not in p]
            if lacking:
                nested = " (they belong at the param's top level, not in a nested object)" if any(
                    isinstance(v, dict) for v in p.values()) else ""
                problems.append(f"{where}: tensormap lacks {', '.join(lacking)}{nested}")
            elif p["tensor"] not in tensors:
                problems.append(f"{where}: unknown tensor {p['tensor']!r}")
        elif kind == "struct":
            for f in p.get("fields", []):
                size = FIELD_TYPES.get(f.get("type"))
                if size is None:
                    problems.append(f"{where}: unknown field type {f.get('type')!r}")
                    continue
                if f["offset"] % size or f["offset"] + size > p.get("size", 0):
                    problems.append(f"{where}: field at {f['offset']} ({f['type']}) misaligned or outside the param")
                expr(f.get("value"), f"{where} field at {f['offset']}")
        elif kind == "scalar":
            if SCALAR_TYPES.get(p.get("type")) != p.get("size"):
                problems.append(f"{where}: scalar type {p.get('type')!r} does not match size {p.get('size')}")
            expr(p.get("value"), where)
        else:
            problems.append(f"{where}: unknown kind {kind!r}")
    return problems


def _tensor_ref(tok: str, tensors: dict) -> bool:
    parts = tok.split(".")
    if len(parts) == 2:
        return parts[0] in tensors and parts[1] == "ptr"
    if len(parts) == 3 and parts[0] in tensors and parts[1] in ("shape", "stride") and parts[2].isdigit():
        return int(parts[2]) < len(tensors[parts[0]].get("dims", []))
    return False
