// Tensor-map parameters: the contract's recipe applied to the caller's tensor gives the
// arguments of cuTensorMapEncodeTiled (a pure step, unit-tested), then the driver encodes the
// 128-byte descriptor (it needs a current context).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "cubinforge/bind.h"
#include "cubinforge/contract.h"
#include "cubinforge/status.h"

namespace cubinforge {

// The arguments of one cuTensorMapEncodeTiled call.
struct TensorMapRequest {
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  uint32_t rank = 0;
  void* address = nullptr;
  cuuint64_t global_dim[kMaxTensorMapRank] = {};
  cuuint64_t global_strides[kMaxTensorMapRank - 1] = {};  // bytes, dimensions 1..rank-1
  cuuint32_t box[kMaxTensorMapRank] = {};
  cuuint32_t element_strides[kMaxTensorMapRank] = {};
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
};

inline CUtensorMapDataType tensormap_dtype(DType t) {
  switch (t) {
    case DType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::fp16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::e4m3: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // TMA moves fp8 as bytes
    case DType::f32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::i32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

inline Status make_tensormap_request(const ParamSpec& p, const Bound& b, TensorMapRequest* out) {
  const TensorMapSpec& m = p.tensormap;
  const Contract& c = *b.contract;
  const Tensor* t = (m.tensor >= 0 && m.tensor < c.num_tensors) ? b.tensors[m.tensor] : nullptr;
  const std::string who = std::string("parameter ") + p.name;
  if (t == nullptr) return invalid(who + ": its tensor is not given");
  if (m.rank < 1 || m.rank > kMaxTensorMapRank) return invalid(who + ": tensor map rank must be 1..5");
  const std::string tname = std::string("tensor '") + c.tensors[m.tensor].name + "'";
  const int elem = dtype_bytes(m.dtype);

  TensorMapRequest r;
  r.dtype = tensormap_dtype(m.dtype);
  r.rank = static_cast<uint32_t>(m.rank);
  r.address = reinterpret_cast<void*>(static_cast<uintptr_t>(t->ptr));
  if (t->ptr % 16 != 0) return invalid(who + ": " + tname + " pointer must be 16-byte aligned for TMA");
  if (m.ragged && m.rank < 2) return invalid(who + ": a ragged tensor map needs rank 2..5");
  for (int i = 0; i < m.rank; ++i) {
    const int d = m.dims[i];
    if (d < 0 || d >= t->rank) return invalid(who + ": map dimension " + std::to_string(i) + " names no dimension of " + tname);
    // A ragged map's last dimension: ragged_extent(rows) = rows + 1 entries over the rows' stride.
    const bool outer = m.ragged && i == m.rank - 1;
    const int64_t extent = outer ? t->shape[d] + 1 : t->shape[d];
    if (extent < 1 || extent > (int64_t(1) << 32))
      return invalid(who + ": " + tname + " dimension " + std::to_string(d) + " has size " +
                     std::to_string(extent) + "; TMA needs 1..2^32");
    r.global_dim[i] = static_cast<cuuint64_t>(extent);
    r.box[i] = m.box[i];
    r.element_strides[i] = m.element_strides[i];
    if (i == 0) {
      if (t->strides[d] != 1 && t->shape[d] != 1)
        return invalid(who + ": " + tname + " dimension " + std::to_string(d) +
                       " is the map's innermost and must have stride 1; its stride is " + std::to_string(t->strides[d]));
      continue;
    }
    const int64_t bytes = t->strides[d] * elem;
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t(1) << 40))
      return invalid(who + ": " + tname + " dimension " + std::to_string(d) + " has a stride of " +
                     std::to_string(bytes) + " bytes; TMA needs a positive multiple of 16 below 2^40");
    r.global_strides[i - 1] = static_cast<cuuint64_t>(bytes);
  }
  if (m.ragged) {
    // ragged_shift: the base moves back rows * stride elements, so a sequence at rows
    // [offset, offset + length) is the map's rows [rows - length, rows) at outer offset + length.
    const int d = m.dims[m.rank - 1];
    const uint64_t shift = static_cast<uint64_t>(t->shape[d]) * static_cast<uint64_t>(t->strides[d] * elem);
    if (t->ptr < shift)
      return invalid(who + ": " + tname + " pointer is below its own size: the ragged map's base (moved back " +
                     std::to_string(t->shape[d]) + " rows) would not be an address");
    r.address = reinterpret_cast<void*>(static_cast<uintptr_t>(t->ptr - shift));
  }
  static const CUtensorMapSwizzle kSwizzle[] = {CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
                                                CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B};
  static const CUtensorMapL2promotion kL2[] = {CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                                               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
  r.swizzle = kSwizzle[static_cast<int>(m.swizzle)];
  r.l2_promotion = kL2[static_cast<int>(m.l2_promotion)];
  r.oob_fill = m.oob_fill == OobFill::nan ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                                          : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
  *out = r;
  return Status::Ok();
}

// Encodes with the driver into `out` (128 bytes). The driver wants a 64-byte aligned
// destination: encode into a CUtensorMap (aligned by its type), then copy.
inline Status encode_tensormap(const TensorMapRequest& r, void* out) {
  CUtensorMap map;
  CUresult rc = cuTensorMapEncodeTiled(&map, r.dtype, r.rank, r.address, r.global_dim,
                                       r.global_strides, r.box, r.element_strides, r.interleave,
                                       r.swizzle, r.l2_promotion, r.oob_fill);
  if (rc != CUDA_SUCCESS) return Status(rc, "cuTensorMapEncodeTiled failed");
  static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
  std::memcpy(out, &map, sizeof map);
  return Status::Ok();
}

}  // namespace cubinforge
