// Shapes and values written the way the Python runtime writes them in its errors ("(4, 2)",
// "(4,)", "0x1000"), so a C++ host and a Python one report a bad call in the same words
// (tests/test_cpp_inference.py compares the messages).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "cubinforge/tensor.h"

namespace cubinforge {

inline std::string py_tuple(const int64_t* v, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (n == 1 ? ",)" : ")");
}

inline std::string py_shape(const Tensor& t) { return py_tuple(t.shape, t.rank < 0 ? 0 : t.rank); }
inline std::string py_strides(const Tensor& t) { return py_tuple(t.strides, t.rank < 0 ? 0 : t.rank); }

inline std::string py_hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// "given": the optional tensors of an entry point are absent while their rank is 0.
inline bool given(const Tensor& t) { return t.rank != 0; }

}  // namespace cubinforge
