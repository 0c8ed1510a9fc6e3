// Shapes and values written the way the Python runtime writes them in its errors ("(4, 2)",
// "(4,)", "0x1000"), so a C++ host and a Python one report a bad call in the same words
// (tests/test_cpp_inference.py compares the messages).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// A double as Python's repr writes it: the shortest text that reads back the same ("30.0",
// "-1.5", "1e-05", "nan", "inf").
inline std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  // %g writes exponents as e-05 / e+16, as Python does; it switches to them at other points.
  const size_t e = s.find('e');
  const int exp10 = v == 0 ? 0 : static_cast<int>(std::floor(std::log10(std::fabs(v))));
  if (e == std::string::npos && exp10 >= 16) {
    std::snprintf(buf, sizeof buf, "%.16e", v);  // rare here: keep it readable, not byte-exact
    return buf;
  }
  if (e != std::string::npos && exp10 >= -4 && exp10 < 16) {
    // Python writes these positionally: 1e+06 -> 1000000.0
    for (int p = 0; p <= 17; ++p) {
      std::snprintf(buf, sizeof buf, "%.*f", p, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    s = buf;
  }
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// "given": the optional tensors of an entry point are absent while their rank is 0.
inline bool given(const Tensor& t) { return t.rank != 0; }

}  // namespace cubinforge
