"""TMA descriptors: a contract's tensormap recipe + an array -> 128 bytes of CUtensorMap.

``tensormap_args`` is pure (no driver) so the arguments, and TMA's own limits, can be
tested on a machine without a GPU; ``encode`` hands them to cuTensorMapEncodeTiled, which
needs a current context.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Mapping

from .arrays import DTYPE_BYTES
from .errors import ContractError, InputError

# Contract names -> driver enum member names.
DATA_TYPES = {"bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "fp16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
              "e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8", "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"}
INTERLEAVES = {"none": "CU_TENSOR_MAP_INTERLEAVE_NONE"}
SWIZZLES = {"none": "CU_TENSOR_MAP_SWIZZLE_NONE", "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
            "64B": "CU_TENSOR_MAP_SWIZZLE_64B", "128B": "CU_TENSOR_MAP_SWIZZLE_128B"}
SWIZZLE_SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
L2_PROMOTIONS = {"none": "CU_TENSOR_MAP_L2_PROMOTION_NONE", "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                 "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}
OOB_FILLS = {"none": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
             "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}


@dataclass(frozen=True)
class TensorMapArgs:
    """The arguments of cuTensorMapEncodeTiled, enums by name, strides in bytes."""
    data_type: str
    rank: int
    global_address: int
    global_dim: tuple
    global_strides: tuple     # rank - 1 entries: dims 1.. in bytes
    box: tuple
    element_strides: tuple
    interleave: str
    swizzle: str
    l2_promotion: str
    oob_fill: str


# A ragged tensor map (FA4's trick for varlen O, our own arithmetic): a packed
# (total, heads, d) tensor mapped with one more outermost dimension of `ragged_extent(rows)`
# entries whose stride is the ragged dimension's, and its base moved back by
# `ragged_shift(rows, stride)` elements. A sequence at rows [offset, offset + length) is then
# the map's rows [rows - length, rows) at outer coordinate offset + length
# (`ragged_coords`): the map's own bound on the ragged dimension ends at the sequence's end,
# so a TMA store of a tile clips the rows past it instead of writing the next sequence's.
# Address of (ragged coordinate rows - length + r, outer offset + length):
#   base - rows * s + (rows - length + r) * s + (offset + length) * s = base + (offset + r) * s.
def ragged_extent(rows):
    """Entries of the added outer dimension: offset + length reaches rows (the last sequence)."""
    return rows + 1


def ragged_shift(rows, row_stride):
    """Elements the map's base address moves back."""
    return rows * row_stride


def ragged_coords(rows, offset, length):
    """(first row's coordinate on the ragged dimension, coordinate on the added dimension) of
    the sequence at rows [offset, offset + length) of a tensor with `rows` rows."""
    return rows - length, offset + length


def _pick(table: Mapping, key, what: str):
    if key not in table:
        raise ContractError(f"tensormap {what} {key!r} is not one of {sorted(table)}")
    return table[key]


def tensormap_args(recipe: Mapping, array, tensor: str | None = None) -> TensorMapArgs:
    """Compute and check the encode arguments for ``array`` (a DeviceArray) from ``recipe``."""
    name = tensor or recipe.get("tensor", "tensor")
    dtype = recipe.get("dtype", array.dtype)
    data_type = _pick(DATA_TYPES, dtype, "dtype")
    esize = DTYPE_BYTES[dtype]
    if esize != array.itemsize:
        raise ContractError(f"tensormap of {name}: map dtype {dtype} ({esize} B) does not match the "
                            f"tensor's {array.dtype} ({array.itemsize} B)")
    dims = list(recipe["dims"])
    # ragged_dim: the tensor dimension a ragged map clips per sequence (ragged_coords); the
    # map then has one more (outermost) dimension than `dims` names.
    ragged = recipe.get("ragged_dim")
    if ragged is not None and ragged not in dims[1:]:
        raise ContractError(f"tensormap of {name}: ragged_dim {ragged!r} must be one of the mapped "
                            f"dimensions {dims[1:]} (not the innermost)")
    rank = len(dims) + (ragged is not None)
    if not 1 <= rank <= 5:
        raise ContractError(f"tensormap of {name}: rank {rank} is outside TMA's 1..5")
    if len(set(dims)) != len(dims) or any(not 0 <= d < array.ndim for d in dims):
        raise ContractError(f"tensormap of {name}: dims {dims} are not distinct dimensions of a "
                            f"rank-{array.ndim} tensor")
    box = tuple(int(b) for b in recipe["box"])
    estr = tuple(int(e) for e in recipe.get("element_strides", [1] * rank))
    if len(box) != rank or len(estr) != rank:
        raise ContractError(f"tensormap of {name}: box {box} / element_strides {estr} need {rank} entries")
    interleave = _pick(INTERLEAVES, recipe.get("interleave", "none"), "interleave")
    swz = recipe.get("swizzle", "none")
    swizzle = _pick(SWIZZLES, swz, "swizzle")
    l2 = _pick(L2_PROMOTIONS, recipe.get("l2_promotion", "none"), "l2_promotion")
    oob = _pick(OOB_FILLS, recipe.get("oob_fill", "none"), "oob_fill")

    # The recipe's own limits (a generator bug if violated).
    if any(not 1 <= b <= 256 for b in box):
        raise ContractError(f"tensormap of {name}: box {box} has an entry outside TMA's 1..256")
    if (box[0] * esize) % 16:
        raise ContractError(f"tensormap of {name}: inner box {box[0]} x {esize} B is not a multiple of 16 B")
    if SWIZZLE_SPAN[swz] is not None and box[0] * esize > SWIZZLE_SPAN[swz]:
        raise ContractError(f"tensormap of {name}: inner box {box[0] * esize} B exceeds the {swz} swizzle span")
    if any(not 1 <= e <= 8 for e in estr):
        raise ContractError(f"tensormap of {name}: element_strides {estr} outside TMA's 1..8")

    # The caller's array (an input error if violated).
    shape, strides = array.shape, array.strides
    d0 = dims[0]
    if strides[d0] != 1 and shape[d0] != 1:
        raise InputError(f"{name}.stride[{d0}] is {strides[d0]}; TMA needs the innermost mapped "
                         f"dimension {d0} to be contiguous (stride 1)")
    if array.ptr % 16:
        raise InputError(f"{name}'s base pointer 0x{array.ptr:x} is not 16-byte aligned, as TMA requires")
    map_dims = dims + ([ragged] if ragged is not None else [])
    gdim = tuple(shape[d] for d in dims)
    address = array.ptr
    if ragged is not None:
        gdim += (ragged_extent(shape[ragged]),)
        address -= ragged_shift(shape[ragged], strides[ragged]) * esize
        if address < 0:
            raise InputError(f"{name}'s base pointer 0x{array.ptr:x} is below its own size: the ragged map's "
                             f"base (moved back {shape[ragged]} rows) would not be an address")
    for i, g in enumerate(gdim):
        if not 1 <= g <= (1 << 32):
            raise InputError(f"{name}.shape[{map_dims[i]}] = {g} is outside TMA's 1..2^32")
    gstr = tuple(strides[d] * esize for d in map_dims[1:])
    for i, g in enumerate(gstr):
        d = map_dims[i + 1]
        if g % 16:
            raise InputError(f"{name}.stride[{d}] = {strides[d]} elements = {g} B is not a multiple "
                             f"of 16 B, as TMA requires")
        if g >= (1 << 40):
            raise InputError(f"{name}.stride[{d}] = {g} B is not below TMA's 2^40 B")
    return TensorMapArgs(data_type, rank, address, gdim, gstr, box, estr, interleave, swizzle, l2, oob)


def encode(args: TensorMapArgs) -> bytes:
    """cuTensorMapEncodeTiled (needs a current context) -> the 128 descriptor bytes."""
    from . import driver
    d = driver.drv()
    tm = driver.call(
        "cuTensorMapEncodeTiled",
        getattr(d.CUtensorMapDataType, args.data_type), args.rank, args.global_address,
        [d.cuuint64_t(x) for x in args.global_dim], [d.cuuint64_t(x) for x in args.global_strides],
        [d.cuuint32_t(x) for x in args.box], [d.cuuint32_t(x) for x in args.element_strides],
        getattr(d.CUtensorMapInterleave, args.interleave), getattr(d.CUtensorMapSwizzle, args.swizzle),
        getattr(d.CUtensorMapL2promotion, args.l2_promotion), getattr(d.CUtensorMapFloatOOBfill, args.oob_fill),
        detail=f"dims={args.global_dim} strides={args.global_strides} box={args.box}")
    return ctypes.string_at(tm.getPtr(), 128)


def encode_tensormap(recipe: Mapping, array, tensor: str | None = None) -> bytes:
    return encode(tensormap_args(recipe, array, tensor))
