// Prints, for every variant of a rendered bundle, what the C++ loader would launch it with on
// one fixed problem: grid, block, cluster, dynamic smem and every parameter's bytes (tensor
// maps as a fixed serialisation of their cuTensorMapEncodeTiled request, not a real
// descriptor). tests/test_fa4_params.py computes the same with the Python runtime and compares.
// Then tries Kernel::load on each variant (stub driver: no GPU) and prints what it said.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"
#include "request_dump.h"

namespace cf = cubinforge;

static cf::Status serialise(const cf::TensorMapRequest& r, void* out) { return cubinforge_test::serialise_request(r, out); }

int main() {
  const cf::Bundle& bundle = cubinforge_bundle::kBundle;
  for (int vi = 0; vi < bundle.count; ++vi) {
    const cf::Variant& v = bundle.variants[vi];
    const cf::Contract& c = *v.contract;
    cf::DType dt = c.tensors[cf::find_tensor(c, "q")].dtype;
    int64_t d = 0;
    for (int i = 0; i < v.num_axes; ++i)
      if (std::strcmp(v.axes[i].key, "head_dim") == 0) d = std::atoll(v.axes[i].value);
    std::vector<cf::NamedTensor> t = {
        {"q", cf::make_contiguous(0x10000000, dt, {2, 300, 8, d})},
        {"k", cf::make_contiguous(0x20000000, dt, {2, 500, 2, d})},
        {"v", cf::make_contiguous(0x30000000, dt, {2, 500, 2, d})},
        {"o", cf::make_contiguous(0x40000000, dt, {2, 300, 8, d})},
        {"lse", cf::make_contiguous(0x50000000, cf::DType::f32, {2, 8, 300})},
    };
    cf::Bound b;
    cf::Status st = cf::bind(c, t.data(), static_cast<int>(t.size()), nullptr, 0, &b, 148);
    static cf::PackedParams params;
    if (st.ok()) st = cf::pack_params(b, &params, serialise);
    std::printf("variant %s\n", v.name);
    if (!st.ok()) { std::printf("error %s\n", st.to_string().c_str()); continue; }
    std::printf("grid %u %u %u block %u %u %u cluster %u %u %u smem %lld\n", b.grid[0], b.grid[1], b.grid[2],
                c.block[0], c.block[1], c.block[2], c.cluster[0], c.cluster[1], c.cluster[2],
                static_cast<long long>(c.dynamic_smem_bytes));
    for (int i = 0; i < c.num_params; ++i) {
      std::printf("param %d %d %d ", i, c.params[i].offset, c.params[i].size);
      for (int j = 0; j < c.params[i].size; ++j) std::printf("%02x", params.bytes[c.params[i].offset + j]);
      std::printf("\n");
    }
    cf::Kernel k;
    st = cf::Kernel::load(v, ".", &k);
    std::printf("load %s\n", st.ok() ? "ok" : st.message().c_str());
    st = cf::Kernel::load(v, ".", &k, /*allow_unverified=*/true);
    std::printf("load-allowed %s\n", st.ok() ? "ok" : st.message().c_str());
  }
  return 0;
}
