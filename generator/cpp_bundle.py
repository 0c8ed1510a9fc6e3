"""Render a C++ bundle: the variants' launch contracts as constexpr tables, beside their cubins.

`render_cpp_bundle(manifests, cubin_bytes_by_sha, out_dir, embed)` writes into `out_dir`:

- `cubinforge_bundle.h`: one `cubinforge::Variant` per manifest (axes, cubin sha256/size, and
  its `cubinforge::Contract`: symbols, tensors, scalars, checks, params, grid), in namespace
  `cubinforge_bundle`, ending with `kBundle`. Names in expressions are resolved here to table
  indices, so the C++ loader needs no JSON parser and does no string lookups at launch.
- `<sha256>.cubin` for every variant's cubin (the loader reads them by default);
- with `embed=True`, `cubinforge_bundle_cubins.h` too: the cubins as byte arrays, which the
  bundle header includes and the loader prefers (a self-contained binary, like TensorRT-LLM's
  cubin tables).

The contract is checked while rendering (docs/launch-contract.md): an expression that names an
unknown symbol, a parameter at a misaligned offset or a tensor map with a bad recipe fails here,
not at a launch on the GPU.

    python -m cubinforge.generator.cpp_bundle --home $CUBINFORGE_HOME --out DIR [--embed]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import jinja2

from cubinforge.runtime.arrays import DTYPE_BYTES as DTYPES
from cubinforge.runtime.contract import BINARY_OPS as _BINARY, load_contract
from cubinforge.runtime import decode_plan
from cubinforge.runtime.axes import default_axes, derived_axes, form_axes
from cubinforge.runtime.dispatch import preference_table
from cubinforge.runtime.errors import ContractError
from cubinforge.runtime.registry_source import MANIFEST_VERSION

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "templates" / "cpp"
HEADER_NAME = "cubinforge_bundle.h"
CUBINS_HEADER_NAME = "cubinforge_bundle_cubins.h"

# Limits of the C++ loader (runtime/cpp/include/cubinforge/{bind,params,expr,contract}.h).
MAX_SYMBOLS, MAX_SCALARS, MAX_TENSORS = 32, 16, 16
MAX_PARAMS, MAX_PARAM_BYTES, MAX_EXPR_STACK, MAX_TENSORMAP_RANK = 64, 4096, 32, 5

BINARY_OPS = {
    "+": "Add", "-": "Sub", "*": "Mul", "/": "Div", "//": "FloorDiv", "ceil_div": "CeilDiv",
    "min": "Min", "max": "Max", "==": "Eq", "!=": "Ne", "<": "Lt", "<=": "Le", "%": "Mod",
}
UNARY_OPS = {"rsqrt": "Rsqrt", "log2e_mul": "Log2eMul"}
assert set(BINARY_OPS) == _BINARY, "the C++ operator table must cover the contract's operators"
SWIZZLE_SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
SWIZZLE = {"none": "none", "32B": "b32", "64B": "b64", "128B": "b128"}
L2_PROMOTION = {"none": "none", "64B": "b64", "128B": "b128", "256B": "b256"}
OOB_FILL = {"none": "none", "nan": "nan"}


class BundleError(ValueError):
    """A manifest or contract that cannot be rendered; the message names the variant and key."""


# ---- C++ literals ----------------------------------------------------------------------------

def c_string(s: str) -> str:
    """A C++ string literal (ASCII-safe: everything else as octal escapes)."""
    out = []
    for ch in s.encode("utf-8"):
        c = chr(ch)
        if c in '"\\':
            out.append("\\" + c)
        elif 32 <= ch < 127 and c != "?":  # '?' avoids trigraph surprises
            out.append(c)
        else:
            out.append("\\%03o" % ch)
    return '"' + "".join(out) + '"'


def c_double(x: float) -> str:
    if not math.isfinite(x):
        raise BundleError(f"non-finite number {x!r} in an expression")
    return repr(float(x))  # shortest round-trip form; compilers parse it correctly rounded


def c_bool(x: bool) -> str:
    return "true" if x else "false"


def axis_text(value: Any) -> str:
    """Canonical axis value, as the C++ Query writes it: true/false, decimal ints, strings."""
    if isinstance(value, bool):
        return c_bool(value)
    if value is None:
        return "none"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise BundleError(f"axis value {value!r} is not a scalar")


# ---- the contract, resolved to table indices -----------------------------------------------

class _Variant:
    """One manifest turned into what the template lays out (indices, not names)."""

    def __init__(self, manifest: dict, index: int):
        self.index = index
        self.name = manifest.get("variant") or manifest.get("contract", {}).get("variant")
        if not self.name:
            raise BundleError("manifest without a variant name")
        if manifest.get("manifest_version", MANIFEST_VERSION) != MANIFEST_VERSION:
            raise self.error(f"manifest_version {manifest.get('manifest_version')} is not supported")
        c = manifest["contract"]
        # The one contract validator (runtime/contract.py): what passes here is what the
        # Python runtime launches; the lowering below adds only the C++ loader's own limits.
        try:
            load_contract(c)
        except ContractError as e:
            raise self.error(str(e)) from None
        self.family = manifest.get("family", "")
        axes = dict(manifest.get("axes", {}))
        for k, v in default_axes().items():
            axes.setdefault(k, v)
        for k, source in derived_axes().items():  # a value head dim defaults to the head dim
            if source in axes:
                axes.setdefault(k, axes[source])
        self.axes = [(k, axis_text(v)) for k, v in axes.items()]
        self.sha256 = manifest["cubin"]["sha256"]
        # Non-empty when the loader must refuse the variant without an opt-in (the runtime's rule).
        from cubinforge.runtime.registry_source import refuses_unverified

        verification = (manifest.get("provenance") or {}).get("verification") or {}
        self.unverified_reason = (verification.get("reason") or "never checked numerically on a GPU") \
            if refuses_unverified(verification) else None
        self.cubin_size = int(manifest["cubin"]["size"])
        if self.cubin_size <= 0:
            raise self.error("the cubin is empty")
        self.exprs: list[dict] = []  # every expression of this variant, referenced by position

        self.contract_variant = c.get("variant", self.name)
        self.arch = c["arch"]
        self.entry = c["entry"]
        self.block = self._triple(c["block"], "block")
        self.cluster = self._triple(c.get("cluster", [1, 1, 1]), "cluster")
        self.dynamic_smem = int(c["dynamic_smem_bytes"])
        self.static_smem = int(c.get("static_smem_bytes", 0))
        self.smem_carveout = int(c.get("smem_carveout_percent", -1))

        self.tensor_names = list(c["tensors"])
        self.symbol_names = list(c.get("symbols", {}))
        self.scalar_names = list(c.get("scalars", {}))
        self._limits()

        self.tensors = [self._tensor(n, t) for n, t in c["tensors"].items()]
        self.symbols = [self._symbol(n, s) for n, s in c.get("symbols", {}).items()]
        self.scalars = [
            {"name": n, "type": s["type"],
             "default": self._expr(s["default"], f"scalars.{n}.default")}
            for n, s in c.get("scalars", {}).items()
        ]
        self.checks = [
            {"expr": self._expr(ch["expr"], f"checks[{i}]"), "message": ch["message"]}
            for i, ch in enumerate(c.get("checks", []))
        ]
        if len(c["grid"]) != 3:
            raise self.error("grid must have three expressions")
        self.grid = [self._expr(g, f"grid[{i}]") for i, g in enumerate(c["grid"])]
        self.params = [self._param(i, p) for i, p in enumerate(c["params"])]
        self.param_bytes = max((p["offset"] + p["size"] for p in self.params), default=0)
        if self.param_bytes > MAX_PARAM_BYTES:
            raise self.error(f"{self.param_bytes} parameter bytes exceed the loader's {MAX_PARAM_BYTES}")

    def error(self, message: str) -> BundleError:
        return BundleError(f"{self.name}: {message}")

    def _limits(self) -> None:
        for what, names, limit in (("symbols", self.symbol_names, MAX_SYMBOLS),
                                   ("scalars", self.scalar_names, MAX_SCALARS),
                                   ("tensors", self.tensor_names, MAX_TENSORS)):
            if len(names) > limit:
                raise self.error(f"{len(names)} {what}; the C++ loader takes at most {limit}")

    @staticmethod
    def _triple(v: list, key: str) -> list[int]:
        return [int(x) for x in v]

    def _choice(self, value: str, allowed, key: str) -> str:
        """`value` when it is one of `allowed` (a set, or a dict's keys)."""
        if value not in allowed:
            raise self.error(f"{key} is {value!r}; expected one of {sorted(allowed)}")
        return value

    def _enum(self, value: str, table: dict, key: str) -> str:
        """The C++ enumerator for a JSON spelling (e.g. swizzle "128B" -> b128)."""
        return table[self._choice(value, table, key)]

    def _tensor_index(self, name: str, key: str) -> int:
        if name not in self.tensor_names:
            raise self.error(f"{key} names tensor {name!r}; the contract has {self.tensor_names}")
        return self.tensor_names.index(name)

    # An expression: RPN tokens resolved to (op, ival, fval, index, dim, text), stack-checked.
    def _expr(self, tokens: list, key: str) -> int:
        out, depth = [], 0
        for tok in tokens:
            t = {"op": None, "ival": 0, "fval": "0.0", "index": -1, "dim": -1, "text": json.dumps(tok)}
            if isinstance(tok, int):
                t.update(op="Int", ival=int(tok))
                if not -(2**63) <= t["ival"] < 2**63:
                    raise self.error(f"{key}: {tok} does not fit in 64 bits")
                depth += 1
            elif isinstance(tok, float):
                t.update(op="Real", fval=c_double(tok))
                depth += 1
            elif tok in BINARY_OPS:
                t.update(op=BINARY_OPS[tok])
                depth -= 1
            elif tok in UNARY_OPS:
                t.update(op=UNARY_OPS[tok])
            else:
                t.update(self._name_token(tok, key))
                depth += 1
            t["text"] = tok if isinstance(tok, str) else json.dumps(tok)
            if depth > MAX_EXPR_STACK:
                raise self.error(f"{key}: deeper than the loader's {MAX_EXPR_STACK}-entry stack")
            out.append(t)
        self.exprs.append({"tokens": out, "text": json.dumps(tokens, separators=(",", ":"))})
        return len(self.exprs) - 1

    def _name_token(self, tok: str, key: str) -> dict:
        if tok == "sm_count":  # a device symbol: the launcher reads it off the device
            return {"op": "SmCount", "index": 0}
        if tok in self.symbol_names:
            return {"op": "Symbol", "index": self.symbol_names.index(tok)}
        if tok in self.scalar_names:
            return {"op": "Scalar", "index": self.scalar_names.index(tok)}
        parts = tok.split(".")
        if len(parts) >= 2 and parts[0] in self.tensor_names:
            index = self.tensor_names.index(parts[0])
            if parts[1:] == ["ptr"]:
                return {"op": "TensorPtr", "index": index}
            if len(parts) == 3 and parts[1] in ("shape", "stride") and parts[2].isdigit():
                op = "TensorShape" if parts[1] == "shape" else "TensorStride"
                return {"op": op, "index": index, "dim": int(parts[2])}
        raise AssertionError(f"{key}: {tok!r} passed the contract validator but names nothing")

    def _symbol(self, name: str, s: dict) -> dict:
        tensor, dim = -1, -1
        if "tensor" in s:
            tensor = self._tensor_index(s["tensor"], f"symbols.{name}")
            dim = int(s["dim"])
        return {"name": name, "tensor": tensor, "dim": dim,
                "has_fixed": "fixed" in s, "fixed": int(s.get("fixed", 0)),
                "has_min": "min" in s, "min": int(s.get("min", 0))}

    def _tensor(self, name: str, t: dict) -> dict:
        dims = []
        for d in t["dims"]:
            if isinstance(d, int) and not isinstance(d, bool):
                dims.append({"symbol": -1, "size": d})
            else:
                dims.append({"symbol": self.symbol_names.index(d), "size": 0})
        if not dims:
            raise self.error(f"tensors.{name}.dims is empty")
        cdim = t.get("contiguous_dim")
        align = int(t.get("align_bytes", 1))
        return {"name": name, "role": t.get("role", "input"), "dtype": t["dtype"],
                "dims": dims, "contiguous_dim": -1 if cdim is None else int(cdim),
                "align_bytes": align}

    def _param(self, i: int, p: dict) -> dict:
        key = f"params[{i}] ({p.get('name', '?')})"
        out = {"ordinal": int(p["ordinal"]), "name": p.get("name", f"param{i}"), "kind": p["kind"],
               "offset": int(p["offset"]), "size": int(p["size"]), "align": int(p["align"]),
               "fields": [], "scalar_type": "f32", "value": None, "tensormap": None}
        if out["align"] < 1:
            raise self.error(f"{key}: align must be positive, got {out['align']}")
        if i >= MAX_PARAMS:
            raise self.error(f"more than {MAX_PARAMS} parameters")
        kind = p["kind"]
        if kind == "struct":
            out["kind"] = "struct_"
            for f in p["fields"]:
                out["fields"].append({"offset": int(f["offset"]), "type": f["type"],
                                      "value": self._expr(f["value"], f"{key}.field@{f['offset']}")})
        elif kind == "scalar":
            out["scalar_type"] = p["type"]
            out["value"] = self._expr(p["value"], f"{key}.value")
        else:  # a tensormap, its recipe's keys on the parameter (docs/launch-contract.md)
            out["tensormap"] = self._tensormap(p, key)
        return out

    def _tensormap(self, p: dict, key: str) -> dict:
        # A ragged map (runtime/tensormap.py): the recipe's dims plus one outer map dimension
        # fed by ragged_dim (its extent and the base shift are the loader's, tensormap.h).
        ragged = p.get("ragged_dim")
        dims_in = [int(d) for d in p["dims"]]
        if ragged is not None and ragged not in dims_in[1:]:
            raise self.error(f"{key}: ragged_dim {ragged!r} must be one of the mapped dimensions {dims_in[1:]} "
                             f"(not the innermost)")
        rank = len(dims_in) + (ragged is not None)
        if not 1 <= rank <= MAX_TENSORMAP_RANK:
            raise self.error(f"{key}: tensor map rank {rank} is not 1..{MAX_TENSORMAP_RANK}")
        if len(p["box"]) != rank or len(p["element_strides"]) != rank:
            raise self.error(f"{key}: dims, box and element_strides must have the same length")
        if p.get("interleave", "none") != "none":
            raise self.error(f"{key}: interleave {p['interleave']!r} is not supported (contract v1: none)")
        tensor = self._tensor_index(p["tensor"], key)
        tspec = self.tensors[tensor]
        dims, box = dims_in, [int(b) for b in p["box"]]
        estr = [int(e) for e in p["element_strides"]]
        esize = DTYPES[p["dtype"]]
        swizzle = p.get("swizzle", "none")
        # TMA's own limits on the recipe (runtime/tensormap.py checks the same at launch).
        if len(set(dims)) != len(dims) or any(not 0 <= d < len(tspec["dims"]) for d in dims):
            raise self.error(f"{key}: dims {dims} are not distinct dimensions of {p['tensor']}")
        if esize != DTYPES[tspec["dtype"]]:
            raise self.error(f"{key}: map dtype {p['dtype']} does not match {p['tensor']}'s {tspec['dtype']}")
        if any(not 1 <= b <= 256 for b in box) or (box[0] * esize) % 16:
            raise self.error(f"{key}: box {box} must be 1..256 with an inner extent a multiple of 16 bytes")
        if SWIZZLE_SPAN.get(swizzle) and box[0] * esize > SWIZZLE_SPAN[swizzle]:
            raise self.error(f"{key}: inner box {box[0] * esize} B exceeds the {swizzle} swizzle span")
        if any(not 1 <= e <= 8 for e in estr):
            raise self.error(f"{key}: element_strides {estr} must be 1..8")
        pad = [0] * (MAX_TENSORMAP_RANK - rank)
        map_dims = dims + ([int(ragged)] if ragged is not None else [])
        return {"tensor": tensor,
                "dtype": p["dtype"], "rank": rank, "ragged": ragged is not None,
                "dims": map_dims + pad, "box": box + pad, "element_strides": estr + pad,
                "swizzle": self._enum(p.get("swizzle", "none"), SWIZZLE, f"{key}.swizzle"),
                "l2_promotion": self._enum(p.get("l2_promotion", "none"), L2_PROMOTION, f"{key}.l2_promotion"),
                "oob_fill": self._enum(p.get("oob_fill", "none"), OOB_FILL, f"{key}.oob_fill")}


# ---- rendering -------------------------------------------------------------------------------

def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["cstr"] = c_string
    env.filters["cbool"] = c_bool
    return env


def _byte_lines(data: bytes, per_line: int = 16) -> list[str]:
    return [",".join("0x%02x" % b for b in data[i:i + per_line]) + ","
            for i in range(0, len(data), per_line)]


def _preferences() -> list[dict]:
    """The dispatcher's preference table with values in the C++ Query's canonical text."""
    rows = []
    for p in preference_table():
        when = []
        for c in p["when"]:
            if "equals" in c:
                when.append({"key": c["key"], "equals": axis_text(c["equals"]),
                             "has_low": False, "low": 0, "has_high": False, "high": 0})
            else:
                when.append({"key": c["key"], "equals": None,
                             "has_low": c["low"] is not None, "low": c["low"] or 0,
                             "has_high": c["high"] is not None, "high": c["high"] or 0})
        rows.append({"name": p["name"], "when": when, "why": p["why"],
                     "prefer": [(k, axis_text(v)) for k, v in p["prefer"].items()],
                     "params": list(p.get("params", {}).items())})
    return rows


def _decode_plan_constants() -> list:
    d = decode_plan
    return [repr(float(d.FILL_FRACTION)), d.MIN_BLOCKS_PER_SPLIT, d.MAX_SPLITS, repr(float(d.EFFICIENCY_SLACK)),
            d.DECODE_TILE_M, d.DECODE_TILE_N]


def render_cpp_bundle(manifests: list[dict], cubin_bytes_by_sha: dict, out_dir,
                      embed: bool = False, namespace: str = "cubinforge_bundle") -> list[Path]:
    """Write the bundle header (and cubins) for `manifests` into `out_dir`; return the paths.

    `cubin_bytes_by_sha` maps each manifest's `cubin.sha256` to the cubin's bytes; their hash
    and size are checked against the manifest. Variants are laid out sorted by name, which is
    also the order the C++ `select` prefers among equal matches.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifests = sorted(manifests, key=lambda m: m.get("variant", ""))
    names = [m.get("variant") for m in manifests]
    if len(set(names)) != len(names):
        raise BundleError(f"duplicate variant names in {names}")
    variants = []
    for i, m in enumerate(manifests):
        try:
            variants.append(_Variant(m, i))
        except KeyError as e:
            raise BundleError(f"{m.get('variant', '?')}: missing key {e}") from None

    written: list[Path] = []
    cubins: dict[str, bytes] = {}
    for v in variants:
        data = cubin_bytes_by_sha.get(v.sha256)
        if data is None:
            raise v.error(f"no cubin bytes for sha256 {v.sha256}")
        data = bytes(data)
        if hashlib.sha256(data).hexdigest() != v.sha256 or len(data) != v.cubin_size:
            raise v.error(f"cubin bytes do not match sha256 {v.sha256} / size {v.cubin_size}")
        cubins[v.sha256] = data
    for sha, data in sorted(cubins.items()):
        path = out / f"{sha}.cubin"
        path.write_bytes(data)
        written.append(path)

    env = _environment()
    cubin_ids = {sha: f"kCubin_{sha[:16]}" for sha in cubins}
    if embed:
        path = out / CUBINS_HEADER_NAME
        path.write_text(env.get_template("bundle_cubins.h.j2").render(
            namespace=namespace,
            cubins=[{"id": cubin_ids[sha], "sha256": sha, "size": len(data), "lines": _byte_lines(data)}
                    for sha, data in sorted(cubins.items())]))
        written.append(path)
    path = out / HEADER_NAME
    path.write_text(env.get_template("bundle.h.j2").render(
        namespace=namespace, variants=variants, embed=embed, cubin_ids=cubin_ids,
        cubins_header=CUBINS_HEADER_NAME, preferences=_preferences(),
        default_axes=[(k, axis_text(v)) for k, v in default_axes().items()],
        derived_axes=sorted(derived_axes().items()), form_axes=sorted(form_axes()),
        decode_plan=_decode_plan_constants()))
    written.append(path)
    return written


# ---- the command line: read a cubinforge home -------------------------------------------------

def load_home(home) -> tuple[list[dict], dict[str, bytes]]:
    """The manifests of a CUBINFORGE_HOME and the cubin blobs they name."""
    home = Path(home)
    manifests = [json.loads(p.read_text()) for p in sorted((home / "manifests").glob("*.json"))]
    blobs: dict[str, bytes] = {}
    for m in manifests:
        sha = m["cubin"]["sha256"]
        blob = home / "blobs" / "sha256" / sha[:2] / sha
        if not blob.is_file():
            raise BundleError(f"{m.get('variant')}: cubin blob {blob} is missing")
        blobs[sha] = blob.read_bytes()
    return manifests, blobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cubinforge.generator.cpp_bundle",
                                 description="Render the C++ bundle (contract tables + cubins).")
    ap.add_argument("--home", default=os.environ.get("CUBINFORGE_HOME"),
                    help="cubinforge home with manifests/ and blobs/ (default: $CUBINFORGE_HOME)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--embed", action="store_true", help="also embed the cubins as byte arrays")
    ap.add_argument("--namespace", default="cubinforge_bundle", help="C++ namespace of the tables")
    args = ap.parse_args(argv)
    if not args.home:
        ap.error("--home (or CUBINFORGE_HOME) is required")
    try:
        manifests, blobs = load_home(args.home)
        if not manifests:
            raise BundleError(f"no manifests under {Path(args.home) / 'manifests'}")
        written = render_cpp_bundle(manifests, blobs, args.out, embed=args.embed, namespace=args.namespace)
    except (BundleError, KeyError, OSError, json.JSONDecodeError) as e:
        print(f"cpp_bundle: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(manifests)} variants to {Path(args.out) / HEADER_NAME} "
          f"({len(written)} files{', cubins embedded' if args.embed else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
