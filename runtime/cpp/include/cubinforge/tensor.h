// The caller's view of a device array: a pointer, a shape and strides in elements.
// No ownership, no framework types: a host fills it from whatever allocated the memory.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <initializer_list>

namespace cubinforge {

enum class DType : uint8_t { bf16, fp16, e4m3, f32, i32 };  // i32: index tensors (page tables)

constexpr int kMaxRank = 8;

inline constexpr int dtype_bytes(DType t) {
  return t == DType::f32 || t == DType::i32 ? 4 : t == DType::e4m3 ? 1 : 2;
}

inline constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::e4m3: return "e4m3";
    case DType::f32: return "f32";
    case DType::i32: return "i32";
  }
  return "?";
}

struct Tensor {
  CUdeviceptr ptr = 0;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};  // in elements, like torch/CuPy strides divided by itemsize
  DType dtype = DType::bf16;
};

// A tensor with explicit strides. Ranks above kMaxRank give rank -1, which validation rejects.
inline Tensor make_tensor(CUdeviceptr ptr, DType dtype, std::initializer_list<int64_t> shape,
                          std::initializer_list<int64_t> strides) {
  Tensor t;
  t.ptr = ptr;
  t.dtype = dtype;
  if (shape.size() > static_cast<size_t>(kMaxRank) || shape.size() != strides.size()) {
    t.rank = -1;
    return t;
  }
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  i = 0;
  for (int64_t s : strides) t.strides[i++] = s;
  return t;
}

// A row-major (C-contiguous) tensor: the last dimension has stride 1.
inline Tensor make_contiguous(CUdeviceptr ptr, DType dtype, std::initializer_list<int64_t> shape) {
  Tensor t;
  t.ptr = ptr;
  t.dtype = dtype;
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    t.rank = -1;
    return t;
  }
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

inline int64_t numel(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d) n *= t.shape[d];
  return n;
}

// A tensor handed to a launch, under the name the contract gives it ("q", "lse", ...).
struct NamedTensor {
  const char* name;
  Tensor tensor;
};

// A scalar argument given by the caller ("softmax_scale"); scalars not given take the
// contract's default expression.
struct NamedScalar {
  const char* name;
  double value;
};

}  // namespace cubinforge
