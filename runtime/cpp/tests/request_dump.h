// What the C++ tests print in place of a tensor-map descriptor: a fixed serialisation of its
// cuTensorMapEncodeTiled request (dtype, rank, address, dims[4], strides[3], box[4], element
// strides[4], four enums: 120 bytes, zero-padded to 128). tests/test_fa4_params.py `serialise`
// is the Python side of the same bytes.
#pragma once

#include <cstdint>
#include <cstring>

#include "cubinforge/cubinforge.h"

namespace cubinforge_test {

inline cubinforge::Status serialise_request(const cubinforge::TensorMapRequest& r, void* out) {
  unsigned char* p = static_cast<unsigned char*>(out);
  std::memset(p, 0, 128);
  size_t at = 0;
  auto put = [&](const void* v, size_t n) { std::memcpy(p + at, v, n); at += n; };
  uint32_t u = static_cast<uint32_t>(r.dtype);
  put(&u, 4);
  put(&r.rank, 4);
  uint64_t a = reinterpret_cast<uint64_t>(r.address);
  put(&a, 8);
  for (int i = 0; i < 4; ++i) { uint64_t x = r.global_dim[i]; put(&x, 8); }
  for (int i = 0; i < 3; ++i) { uint64_t x = r.global_strides[i]; put(&x, 8); }
  for (int i = 0; i < 4; ++i) { uint32_t x = r.box[i]; put(&x, 4); }
  for (int i = 0; i < 4; ++i) { uint32_t x = r.element_strides[i]; put(&x, 4); }
  for (uint32_t x : {static_cast<uint32_t>(r.interleave), static_cast<uint32_t>(r.swizzle),
                     static_cast<uint32_t>(r.l2_promotion), static_cast<uint32_t>(r.oob_fill)})
    put(&x, 4);
  return cubinforge::Status::Ok();
}

}  // namespace cubinforge_test
