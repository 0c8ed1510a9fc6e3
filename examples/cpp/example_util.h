// What the C++ examples share: a seeded normal generator, float -> bf16 / fp16, owned device
// memory, the Python runtime's output layout, dense downloads and small JSON/file helpers.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"

namespace cf_example {
namespace cf = cubinforge;

// ---- host-side numbers: a seeded generator and float -> bf16 / fp16 (round to nearest even)

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {  // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline uint16_t float_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x7fffffu;
  const int exp = static_cast<int>((x >> 23) & 0xffu);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int e = exp - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // subnormal half
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

// ---- device memory, owned

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { if (ptr_) cuMemFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  cf::Status allocate(size_t bytes) {
    bytes_ = bytes;
    return cf::check_cu(cuMemAlloc(&ptr_, bytes ? bytes : 1), "cuMemAlloc");
  }
  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Row-major strides whose outer entries are multiples of `row_align` elements: the layout the
// Python runtime allocates outputs with (runtime/attention.py _padded_strides).
inline void padded_strides(cf::Tensor* t, int64_t row_align) {
  int64_t acc = 1;
  for (int d = t->rank - 1; d >= 0; --d) {
    if (d != t->rank - 1) acc = (acc + row_align - 1) / row_align * row_align;
    t->strides[d] = acc;
    acc *= t->shape[d] > 0 ? t->shape[d] : 1;
  }
}

inline size_t span_bytes(const cf::Tensor& t) {
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
  return static_cast<size_t>(last + 1) * cf::dtype_bytes(t.dtype);
}

// The tensor's elements, dense and row-major, whatever its strides.
inline cf::Status download_dense(const cf::Tensor& t, std::vector<unsigned char>* out) {
  const size_t elem = cf::dtype_bytes(t.dtype);
  std::vector<unsigned char> span(span_bytes(t));
  CUBINFORGE_TRY(cf::check_cu(cuMemcpyDtoH(span.data(), t.ptr, span.size()), "cuMemcpyDtoH"));
  out->assign(static_cast<size_t>(cf::numel(t)) * elem, 0);
  std::vector<int64_t> idx(t.rank, 0);
  for (int64_t n = 0; n < cf::numel(t); ++n) {
    int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += idx[d] * t.strides[d];
    std::memcpy(out->data() + n * elem, span.data() + off * elem, elem);
    for (int d = t.rank - 1; d >= 0; --d) {  // next index, row-major
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return cf::Status::Ok();
}

inline bool write_file(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return static_cast<bool>(f);
}

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return out + "\"";
}

}  // namespace cf_example
