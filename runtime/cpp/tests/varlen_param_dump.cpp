// Prints, for each case on stdin, what the C++ loader binds one named variant of a rendered
// bundle to: the grid and every parameter's bytes (tensor maps as request_dump.h's
// serialisation of their cuTensorMapEncodeTiled request). tests/test_cpp_ragged_tensormap.py
// binds the same tensors with the Python runtime and compares line for line.
// Input per case: "case VARIANT SM_COUNT", then "t NAME DTYPE PTR RANK SHAPE... STRIDES..." and
// "s NAME VALUE" lines, then "end".
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"
#include "request_dump.h"
#include "tensor_input.h"

namespace cf = cubinforge;

int main() {
  std::string word;
  while (std::cin >> word && word == "case") {
    std::string variant;
    long long sm_count;
    std::cin >> variant >> sm_count;
    std::vector<std::string> names;   // owns the names NamedTensor / NamedScalar point at
    std::vector<cf::Tensor> tensors;
    std::vector<std::pair<std::string, double>> scalars;
    std::string tok;
    while (std::cin >> tok && tok != "end") {
      if (tok == "s") {
        std::string name;
        double value;
        std::cin >> name >> value;
        scalars.push_back({name, value});
        continue;
      }
      std::string name;
      std::cin >> name;
      names.push_back(name);
      tensors.push_back(cubinforge_test::read_tensor(std::cin));
    }
    std::vector<cf::NamedTensor> nt;
    for (size_t i = 0; i < tensors.size(); ++i) nt.push_back({names[i].c_str(), tensors[i]});
    std::vector<cf::NamedScalar> ns;
    for (const auto& s : scalars) ns.push_back({s.first.c_str(), s.second});
    std::printf("variant %s\n", variant.c_str());
    const cf::Variant* v = nullptr;
    cf::Status st = cf::find_variant(cubinforge_bundle::kBundle, variant.c_str(), &v);
    cf::Bound b;
    static cf::PackedParams params;
    if (st.ok())
      st = cf::bind(*v->contract, nt.data(), static_cast<int>(nt.size()), ns.data(), static_cast<int>(ns.size()), &b,
                    sm_count);
    if (st.ok()) st = cf::pack_params(b, &params, cubinforge_test::serialise_request);
    if (!st.ok()) { std::printf("error %s\n", st.message().c_str()); continue; }
    const cf::Contract& c = *v->contract;
    std::printf("grid %u %u %u\n", b.grid[0], b.grid[1], b.grid[2]);
    for (int i = 0; i < c.num_params; ++i) {
      std::printf("param %d %s %d %d ", i, c.params[i].name, c.params[i].offset, c.params[i].size);
      for (int j = 0; j < c.params[i].size; ++j) std::printf("%02x", params.bytes[c.params[i].offset + j]);
      std::printf("\n");
    }
  }
  return 0;
}
