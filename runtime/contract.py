"""The launch contract (docs/launch-contract.md, version 1): load, evaluate, bind.

``load_contract`` validates a contract dict once (so generator bugs surface at load,
not mid-launch); ``evaluate`` is the RPN expression language; ``bind`` reads the
symbols from the caller's arrays and runs every check the contract lists, raising
``InputError`` messages that name the tensor, the dimension, the value given and
what the variant accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from .arrays import DTYPE_BYTES
from .errors import ContractError, InputError

CONTRACT_VERSION = 1
LOG2E = 1.4426950408889634
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

# Symbols the launcher reads off the device it launches on, not off the tensors.
DEVICE_SYMBOLS = frozenset(["sm_count"])
BINARY_OPS = frozenset(["+", "-", "*", "/", "//", "ceil_div", "min", "max",
                        "==", "!=", "<", "<=", "%"])
UNARY_OPS = frozenset(["rsqrt", "log2e_mul"])
PARAM_KINDS = frozenset(["tensormap", "struct", "scalar"])
FIELD_TYPES = {"i32": 4, "i64": 8, "u64": 8, "f32": 4, "ptr": 8}
SCALAR_TYPES = {"i32": 4, "i64": 8, "f32": 4}
# A tensormap parameter's recipe, on the parameter itself (docs/launch-contract.md).
TENSORMAP_KEYS = ("tensor", "dtype", "dims", "box", "element_strides", "interleave", "swizzle",
                  "l2_promotion", "oob_fill")


# --------------------------------------------------------------------------- model

@dataclass(frozen=True)
class TensorSpec:
    name: str
    role: str
    dtype: str
    dims: tuple            # symbol name (str) or fixed size (int) per dimension
    contiguous_dim: int | None
    align_bytes: int


@dataclass(frozen=True)
class SymbolSpec:
    name: str
    tensor: str
    dim: int
    fixed: int | None = None
    min: int | None = None


@dataclass(frozen=True)
class ScalarSpec:
    name: str
    type: str
    default: list | None


@dataclass(frozen=True)
class CheckSpec:
    expr: list
    message: str


@dataclass(frozen=True)
class ParamSpec:
    ordinal: int
    offset: int
    size: int
    align: int
    name: str
    kind: str
    spec: Mapping[str, Any]   # the kind-specific keys, as written


@dataclass(frozen=True)
class Contract:
    variant: str
    arch: str
    entry: str
    block: tuple
    cluster: tuple
    dynamic_smem_bytes: int
    static_smem_bytes: int
    grid: tuple
    symbols: Mapping[str, SymbolSpec]
    tensors: Mapping[str, TensorSpec]
    scalars: Mapping[str, ScalarSpec]
    checks: tuple
    params: tuple
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    # Percent of the SM's L1/shared memory to prefer as shared memory before launching (set
    # once per loaded function); None: the driver's default.
    smem_carveout_percent: int | None = None


# --------------------------------------------------------------------------- loading

def _need(d: Mapping, key: str, typ, where: str):
    if key not in d:
        raise ContractError(f"{where}: missing key '{key}'")
    v = d[key]
    if typ is int and isinstance(v, bool) or not isinstance(v, typ):
        raise ContractError(f"{where}: '{key}' must be {getattr(typ, '__name__', typ)}, got {v!r}")
    return v


def _int3(v, where: str) -> tuple:
    if (not isinstance(v, list) or len(v) != 3
            or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v)):
        raise ContractError(f"{where} must be three positive ints, got {v!r}")
    return tuple(v)


def load_contract(raw: Mapping[str, Any]) -> Contract:
    """Validate a contract dict and return its typed form; ContractError on any defect."""
    if not isinstance(raw, Mapping):
        raise ContractError(f"a contract is a JSON object, got {type(raw).__name__}")
    version = raw.get("contract_version")
    if version != CONTRACT_VERSION:
        raise ContractError(
            f"contract_version {version!r} is not supported by this runtime "
            f"(it implements version {CONTRACT_VERSION}); update cubinforge or rebuild the variant")
    variant = _need(raw, "variant", str, "contract")
    where = f"contract of {variant}"
    arch = _need(raw, "arch", str, where)
    entry = _need(raw, "entry", str, where)
    block = _int3(raw.get("block"), f"{where}: block")
    cluster = _int3(raw.get("cluster"), f"{where}: cluster")
    dyn = _need(raw, "dynamic_smem_bytes", int, where)
    static = raw.get("static_smem_bytes", 0)
    grid = raw.get("grid")
    if not isinstance(grid, list) or len(grid) != 3:
        raise ContractError(f"{where}: grid must be three expressions, got {grid!r}")

    tensors: dict[str, TensorSpec] = {}
    for name, t in _need(raw, "tensors", Mapping, where).items():
        tw = f"{where}: tensors.{name}"
        role = _need(t, "role", str, tw)
        if role not in ("input", "output"):
            raise ContractError(f"{tw}: role must be 'input' or 'output', got {role!r}")
        dtype = _need(t, "dtype", str, tw)
        if dtype not in DTYPE_BYTES:
            raise ContractError(f"{tw}: dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
        dims = _need(t, "dims", list, tw)
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (str, int)):
                raise ContractError(f"{tw}: each dim is a symbol name or an int, got {d!r}")
        cdim = t.get("contiguous_dim")
        if cdim is not None and (isinstance(cdim, bool) or not isinstance(cdim, int)
                                 or not 0 <= cdim < len(dims)):
            raise ContractError(f"{tw}: contiguous_dim {cdim!r} is not a dimension index")
        align = t.get("align_bytes", 1)
        if isinstance(align, bool) or not isinstance(align, int) or align < 1 or align & (align - 1):
            raise ContractError(f"{tw}: align_bytes must be a power of two, got {align!r}")
        tensors[name] = TensorSpec(name, role, dtype, tuple(dims), cdim, align)

    symbols: dict[str, SymbolSpec] = {}
    for name, s in raw.get("symbols", {}).items():
        sw = f"{where}: symbols.{name}"
        tname = _need(s, "tensor", str, sw)
        dim = _need(s, "dim", int, sw)
        if tname not in tensors or not 0 <= dim < len(tensors[tname].dims):
            raise ContractError(f"{sw}: {tname}.dim {dim} names no tensor dimension")
        if tensors[tname].dims[dim] != name:
            raise ContractError(f"{sw}: {tname} dimension {dim} is {tensors[tname].dims[dim]!r}, not {name!r}")
        symbols[name] = SymbolSpec(name, tname, dim, s.get("fixed"), s.get("min"))
    for t in tensors.values():
        for d in t.dims:
            if isinstance(d, str) and d not in symbols:
                raise ContractError(f"{where}: tensors.{t.name} uses symbol {d!r} that 'symbols' does not define")

    scalars: dict[str, ScalarSpec] = {}
    for name, s in raw.get("scalars", {}).items():
        typ = s.get("type", "f32")
        if typ not in SCALAR_TYPES:
            raise ContractError(f"{where}: scalars.{name}: type {typ!r} is not one of {sorted(SCALAR_TYPES)}")
        if name in symbols:
            raise ContractError(f"{where}: scalars.{name} shadows a symbol")
        scalars[name] = ScalarSpec(name, typ, s.get("default"))

    checks = []
    for i, c in enumerate(raw.get("checks", [])):
        # The message is what a caller reads when the check fails: a contract must say it.
        checks.append(CheckSpec(_need(c, "expr", list, f"{where}: checks[{i}]"),
                                _need(c, "message", str, f"{where}: checks[{i}]")))

    params = []
    for i, p in enumerate(_need(raw, "params", list, where)):
        pw = f"{where}: params[{i}]"
        ordinal = _need(p, "ordinal", int, pw)
        if ordinal != i:
            raise ContractError(f"{pw}: ordinal {ordinal} out of order (params are listed by ordinal)")
        kind = _need(p, "kind", str, pw)
        if kind not in PARAM_KINDS:
            raise ContractError(f"{pw}: kind {kind!r} is not one of {sorted(PARAM_KINDS)}")
        offset, size = _need(p, "offset", int, pw), _need(p, "size", int, pw)
        align = p.get("align", 1)
        # No `offset % align` check: offsets count from the parameter block, which itself sits
        # at an aligned constant-bank address, so a 64 B-aligned tensor map can have offset 112.
        if params and offset < params[-1].offset + params[-1].size:
            raise ContractError(f"{pw}: offset {offset} overlaps the previous parameter")
        spec = {k: v for k, v in p.items() if k not in ("ordinal", "offset", "size", "align", "name", "kind")}
        params.append(ParamSpec(ordinal, offset, size, align, str(p.get("name", f"param{i}")), kind, spec))
        _check_param(params[-1], tensors, pw)

    carveout = raw.get("smem_carveout_percent")
    if carveout is not None and (isinstance(carveout, bool) or not isinstance(carveout, int)
                                 or not 0 <= carveout <= 100):
        raise ContractError(f"{where}: 'smem_carveout_percent' must be an int in [0, 100], got {carveout!r}")
    c = Contract(variant, arch, entry, block, cluster, dyn, static, tuple(grid),
                 symbols, tensors, scalars, tuple(checks), tuple(params), raw, carveout)
    # Parse every expression now: an unknown token is a generator bug, caught at load.
    for i, e in enumerate(grid):
        validate_expr(e, c, f"{where}: grid[{i}]")
    for s in scalars.values():
        if s.default is not None:
            validate_expr(s.default, c, f"{where}: scalars.{s.name}.default")
    for i, chk in enumerate(checks):
        validate_expr(chk.expr, c, f"{where}: checks[{i}]")
    for p in params:
        for j, f in enumerate(p.spec.get("fields", [])):
            validate_expr(f.get("value"), c, f"{where}: params[{p.ordinal}].fields[{j}]")
        if p.kind == "scalar":
            validate_expr(p.spec.get("value"), c, f"{where}: params[{p.ordinal}].value")
    return c


def _check_param(p: ParamSpec, tensors: Mapping[str, TensorSpec], where: str) -> None:
    if p.kind == "tensormap":
        if p.size != 128:
            raise ContractError(f"{where}: a tensormap parameter is 128 bytes, not {p.size}")
        recipe = p.spec
        if "tensor" not in recipe and any(isinstance(v, Mapping) for v in p.spec.values()):
            raise ContractError(f"{where}: the tensormap recipe (tensor, dims, box, ...) belongs at the "
                                f"param's top level, not in a nested object")
        lacking = [k for k in TENSORMAP_KEYS if k not in recipe]
        if lacking:
            raise ContractError(f"{where}: tensormap lacks {', '.join(lacking)}")
        if recipe["tensor"] not in tensors:
            raise ContractError(f"{where}: tensormap names unknown tensor {recipe['tensor']!r}")
        for key in ("dims", "box", "element_strides"):
            if not isinstance(recipe[key], list):
                raise ContractError(f"{where}: tensormap needs a '{key}' list")
    elif p.kind == "struct":
        for j, f in enumerate(p.spec.get("fields", [])):
            typ, off = f.get("type"), f.get("offset")
            if typ not in FIELD_TYPES:
                raise ContractError(f"{where}.fields[{j}]: type {typ!r} is not one of {sorted(FIELD_TYPES)}")
            if not isinstance(off, int) or off < 0 or off + FIELD_TYPES[typ] > p.size:
                raise ContractError(f"{where}.fields[{j}]: offset {off!r} + {FIELD_TYPES[typ]} bytes "
                                    f"does not fit in the parameter's {p.size} bytes")
    elif p.kind == "scalar":
        typ = p.spec.get("type")
        if typ not in SCALAR_TYPES:
            raise ContractError(f"{where}: scalar type {typ!r} is not one of {sorted(SCALAR_TYPES)}")
        if SCALAR_TYPES[typ] != p.size:
            raise ContractError(f"{where}: scalar {typ} is {SCALAR_TYPES[typ]} bytes, size says {p.size}")


# --------------------------------------------------------------------------- expressions

def _parse_ref(token: str):
    """'q.ptr' -> ('q','ptr',None); 'q.shape.2' -> ('q','shape',2); otherwise None."""
    parts = token.split(".")
    if len(parts) == 2 and parts[1] == "ptr":
        return parts[0], "ptr", None
    if len(parts) == 3 and parts[1] in ("shape", "stride") and parts[2].isdigit():
        return parts[0], parts[1], int(parts[2])
    return None


def validate_expr(expr, contract: Contract, where: str) -> None:
    """Check tokens and stack depth without evaluating (no input needed)."""
    if not isinstance(expr, list) or not expr:
        raise ContractError(f"{where}: an expression is a non-empty list of tokens, got {expr!r}")
    depth = 0
    for tok in expr:
        if isinstance(tok, bool) or not isinstance(tok, (int, float, str)):
            raise ContractError(f"{where}: token {tok!r} is not a number or a name")
        if isinstance(tok, str) and (tok in BINARY_OPS or tok in UNARY_OPS):
            need = 2 if tok in BINARY_OPS else 1
            if depth < need:
                raise ContractError(f"{where}: stack underflow at {tok!r} in {expr!r}")
            depth -= need - 1
            continue
        depth += 1
        if isinstance(tok, str) and tok not in contract.symbols and tok not in contract.scalars \
                and tok not in DEVICE_SYMBOLS:
            ref = _parse_ref(tok)
            if ref is None or ref[0] not in contract.tensors:
                raise ContractError(f"{where}: unknown token {tok!r} in {expr!r}")
            if ref[2] is not None and ref[2] >= len(contract.tensors[ref[0]].dims):
                raise ContractError(f"{where}: {tok!r} names a dimension {ref[0]} does not have")
    if depth != 1:
        raise ContractError(f"{where}: {expr!r} leaves {depth} values on the stack, not 1")


def _is_real(x) -> bool:
    return isinstance(x, float)


def _binary(op: str, a, b, expr):
    real = _is_real(a) or _is_real(b)
    if op in ("/", "//", "%", "ceil_div") and b == 0:
        raise InputError(f"division by zero in {expr!r} ({a} {op} {b})")
    if op == "+": r = a + b
    elif op == "-": r = a - b
    elif op == "*": r = a * b
    elif op == "/": return a / b
    elif op == "//": r = a // b               # floor for ints and reals alike
    elif op == "%": r = a % b                 # floor-mod, consistent with //
    elif op == "ceil_div": r = float(math.ceil(a / b)) if real else -((-a) // b)
    elif op == "min": r = min(a, b)
    elif op == "max": r = max(a, b)
    elif op == "==": return int(a == b)
    elif op == "!=": return int(a != b)
    elif op == "<": return int(a < b)
    elif op == "<=": return int(a <= b)
    else:  # pragma: no cover - BINARY_OPS is closed
        raise ContractError(f"unknown operator {op!r}")
    if real:
        return float(r)
    if not _INT64_MIN <= r <= _INT64_MAX:
        raise InputError(f"64-bit integer overflow in {expr!r} ({a} {op} {b})")
    return r


def evaluate(expr, lookup) -> int | float:
    """Evaluate an RPN expression. ``lookup(name)`` returns a symbol, scalar or tensor-ref value."""
    if not isinstance(expr, list) or not expr:
        raise ContractError(f"an expression is a non-empty list of tokens, got {expr!r}")
    stack: list = []
    for tok in expr:
        if isinstance(tok, bool):
            raise ContractError(f"token {tok!r} is not a number or a name in {expr!r}")
        if isinstance(tok, (int, float)):
            stack.append(tok)
        elif isinstance(tok, str) and tok in BINARY_OPS:
            if len(stack) < 2:
                raise ContractError(f"stack underflow at {tok!r} in {expr!r}")
            b, a = stack.pop(), stack.pop()
            stack.append(_binary(tok, a, b, expr))
        elif isinstance(tok, str) and tok in UNARY_OPS:
            if not stack:
                raise ContractError(f"stack underflow at {tok!r} in {expr!r}")
            a = stack.pop()
            if tok == "rsqrt":
                if a <= 0:
                    raise InputError(f"rsqrt of {a} in {expr!r}")
                stack.append(1.0 / math.sqrt(a))
            else:
                stack.append(float(a) * LOG2E)
        elif isinstance(tok, str):
            stack.append(lookup(tok))
        else:
            raise ContractError(f"token {tok!r} is not a number or a name in {expr!r}")
    if len(stack) != 1:
        raise ContractError(f"{expr!r} leaves {len(stack)} values on the stack, not 1")
    return stack[0]


# --------------------------------------------------------------------------- binding

@dataclass
class Bound:
    """A contract bound to one call's arrays: symbol, scalar and grid values."""
    contract: Contract
    tensors: Mapping[str, Any]
    symbols: dict
    scalars: dict
    grid: tuple = ()
    device: Mapping[str, int] = field(default_factory=dict)  # DEVICE_SYMBOLS' values

    def lookup(self, token: str):
        if token in self.symbols:
            return self.symbols[token]
        if token in DEVICE_SYMBOLS:
            if token not in self.device:
                raise ContractError(f"{token!r} needs the launching device's attributes")
            return self.device[token]
        if token in self.scalars:
            return self.scalars[token]
        ref = _parse_ref(token)
        if ref is None or ref[0] not in self.tensors:
            raise ContractError(f"unknown token {token!r}")
        t = self.tensors[ref[0]]
        if ref[1] == "ptr":
            return t.ptr
        seq = t.shape if ref[1] == "shape" else t.strides
        if ref[2] >= len(seq):
            raise ContractError(f"{token!r}: {ref[0]} has {len(seq)} dimensions")
        return seq[ref[2]]

    def eval(self, expr):
        return evaluate(expr, self.lookup)


def _dim_label(spec: TensorSpec, i: int) -> str:
    d = spec.dims[i]
    return f"{spec.name}.shape[{i}] ({d})" if isinstance(d, str) else f"{spec.name}.shape[{i}]"


def bind(contract: Contract, tensors: Mapping[str, Any], scalars: Mapping[str, Any] | None = None,
         device: Mapping[str, int] | None = None) -> Bound:
    """Launch step 1-2: bind symbols, check tensors and ``checks``, evaluate scalars and grid.
    ``device`` gives the launching device's DEVICE_SYMBOLS (e.g. sm_count)."""
    c = contract
    scalars = dict(scalars or {})
    extra = sorted(set(tensors) - set(c.tensors))
    if extra:
        raise InputError(f"{c.variant} takes tensors {sorted(c.tensors)}; got unknown {extra}")
    missing = [n for n in c.tensors if tensors.get(n) is None]
    if missing:
        raise InputError(f"{c.variant} needs tensors {missing} (it takes {sorted(c.tensors)})")

    devices = {}
    for name, spec in c.tensors.items():
        t = tensors[name]
        if t.dtype != spec.dtype:
            raise InputError(f"{name} has dtype {t.dtype}; {c.variant} accepts only {spec.dtype}")
        if len(t.shape) != len(spec.dims):
            raise InputError(f"{name} has {len(t.shape)} dimensions {tuple(t.shape)}; {c.variant} "
                             f"expects {len(spec.dims)}: ({', '.join(map(str, spec.dims))})")
        if t.device is not None:
            devices.setdefault(t.device, name)
    if len(devices) > 1:
        where = ", ".join(f"{n} on device {d}" for d, n in devices.items())
        raise InputError(f"tensors are on different devices ({where}); all must be on one device")

    # Symbols: read from their defining dimension (checked against fixed/min), then every
    # other use must agree.
    symbols = {}
    for s in c.symbols.values():
        symbols[s.name] = tensors[s.tensor].shape[s.dim]
    for s in c.symbols.values():
        label = _dim_label(c.tensors[s.tensor], s.dim)
        v = symbols[s.name]
        if s.fixed is not None and v != s.fixed:
            raise InputError(f"{label} is {v}; {c.variant} accepts only {s.name} = {s.fixed}")
        if s.min is not None and v < s.min:
            raise InputError(f"{label} is {v}; {c.variant} needs {s.name} >= {s.min}")
    for name, spec in c.tensors.items():
        shape = tensors[name].shape
        for i, d in enumerate(spec.dims):
            if isinstance(d, int):
                if shape[i] != d:
                    raise InputError(f"{_dim_label(spec, i)} is {shape[i]}; {c.variant} accepts only {d}")
            elif shape[i] != symbols[d]:
                src = c.symbols[d]
                raise InputError(f"{_dim_label(spec, i)} is {shape[i]} but {src.tensor}.shape[{src.dim}] "
                                 f"gives {d} = {symbols[d]}; they must be equal")

    # Layout: the contiguous dimension has stride 1; base and other strides are aligned.
    for name, spec in c.tensors.items():
        t = tensors[name]
        esize = DTYPE_BYTES[spec.dtype]
        cd = spec.contiguous_dim
        # A size-1 dimension is never stepped over, so its stride cannot matter.
        if cd is not None and t.strides[cd] != 1 and t.shape[cd] != 1:
            raise InputError(f"{_dim_label(spec, cd)} must be contiguous (stride 1); {name} has strides "
                             f"{tuple(t.strides)} (elements): make it contiguous in that dimension")
        if t.ptr % spec.align_bytes:
            raise InputError(f"{name}'s base pointer 0x{t.ptr:x} is not {spec.align_bytes}-byte aligned "
                             f"(offset {t.ptr % spec.align_bytes}); {c.variant} needs {spec.align_bytes} B")
        for i, st in enumerate(t.strides):
            if i != cd and (st * esize) % spec.align_bytes:
                raise InputError(f"{name}.stride[{i}] is {st} elements = {st * esize} B, not a multiple of "
                                 f"{spec.align_bytes} B (dimension {_dim_label(spec, i)}); pad that "
                                 f"dimension or copy the tensor")

    for chk in c.checks:
        env = Bound(c, tensors, symbols, {}, device=dict(device or {}))
        if not env.eval(chk.expr):
            used = [tok for tok in chk.expr if isinstance(tok, str) and tok in symbols]
            vals = ", ".join(f"{u}={symbols[u]}" for u in dict.fromkeys(used))
            raise InputError(f"{chk.message} ({vals})" if vals else chk.message)

    unknown = sorted(set(scalars) - set(c.scalars))
    if unknown:
        raise InputError(f"{c.variant} takes scalars {sorted(c.scalars)}; got unknown {unknown}")
    b = Bound(c, tensors, symbols, {}, device=dict(device or {}))
    for s in c.scalars.values():   # in declared order: a default may use an earlier scalar
        v = scalars.get(s.name)
        if v is None:
            if s.default is None:
                raise InputError(f"scalar {s.name} has no default in {c.variant}; pass it")
            v = b.eval(s.default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InputError(f"scalar {s.name} must be a finite number, got {v!r}")
        b.scalars[s.name] = float(v) if s.type == "f32" else v

    grid = []
    for i, e in enumerate(c.grid):
        g = b.eval(e)
        if not isinstance(g, int):
            raise ContractError(f"{c.variant}: grid[{i}] {e!r} evaluated to the real {g}")
        limit = (1 << 31) - 1 if i == 0 else 65535
        if not 1 <= g <= limit:
            raise InputError(f"grid[{i}] = {g} from {e!r} with {symbols} is outside 1..{limit}")
        grid.append(g)
    b.grid = tuple(grid)
    return b
