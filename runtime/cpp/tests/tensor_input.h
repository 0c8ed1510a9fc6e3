// How the C++ test programs read a tensor from the Python side's text: after its name,
// `dtype ptr rank shape[rank] strides[rank]` (dtype as cubinforge::dtype_name spells it).
#pragma once

#include <istream>
#include <string>

#include "cubinforge/cubinforge.h"

namespace cubinforge_test {

inline cubinforge::Tensor read_tensor(std::istream& in) {
  std::string dtype;
  unsigned long long ptr;
  int rank;
  in >> dtype >> ptr >> rank;
  cubinforge::Tensor x;
  x.ptr = ptr, x.rank = rank;
  for (int i = 0; i < rank; ++i) in >> x.shape[i];
  for (int i = 0; i < rank; ++i) in >> x.strides[i];
  for (cubinforge::DType d : {cubinforge::DType::bf16, cubinforge::DType::fp16, cubinforge::DType::e4m3,
                              cubinforge::DType::f32, cubinforge::DType::i32})
    if (dtype == cubinforge::dtype_name(d)) x.dtype = d;
  return x;
}

}  // namespace cubinforge_test
