// Loads the probe through the bundle (embedded or from the cubin file), launches it with the
// loader, and compares what the kernel received with what the loader packed.
#include <cstdio>
#include <cstring>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"

namespace cf = cubinforge;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  CUcontext ctx;
  cf::Status st = cf::init_primary_context(0, &ctx);
  std::string arch;
  if (st.ok()) st = cf::current_arch(&arch);
  const cf::Variant* v = nullptr;
  if (st.ok()) st = cf::select(cubinforge_bundle::kBundle, cf::attention_query(arch, "bf16", 128, true), &v);
  cf::Kernel kernel;
  if (st.ok()) st = cf::Kernel::load(*v, dir, &kernel);
  if (!st.ok()) { std::printf("error: %s\n", st.to_string().c_str()); return 1; }

  const int64_t b = 2, sq = 300, sk = 500, hq = 8, hkv = 2, d = 128;
  CUdeviceptr q, k, vv, o, lse;
  cuMemAlloc(&q, b * sq * hq * d * 2); cuMemAlloc(&k, b * sk * hkv * d * 2); cuMemAlloc(&vv, b * sk * hkv * d * 2);
  cuMemAlloc(&o, b * sq * hq * d * 2); cuMemAlloc(&lse, b * hq * sq * 4);
  cuMemsetD8(lse, 0xEE, b * hq * sq * 4);
  std::vector<cf::NamedTensor> t = {
      {"q", cf::make_contiguous(q, cf::DType::bf16, {b, sq, hq, d})},
      {"k", cf::make_contiguous(k, cf::DType::bf16, {b, sk, hkv, d})},
      {"v", cf::make_contiguous(vv, cf::DType::bf16, {b, sk, hkv, d})},
      {"o", cf::make_contiguous(o, cf::DType::bf16, {b, sq, hq, d})},
      {"lse", cf::make_contiguous(lse, cf::DType::f32, {b, hq, sq})}};
  cf::Bound bound;
  st = cf::bind(kernel.contract(), t.data(), 5, nullptr, 0, &bound);
  static cf::PackedParams expected;  // what launch_bound packs, with the real encoder
  if (st.ok()) st = cf::pack_params(bound, &expected);
  CUstream stream;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (st.ok()) st = cf::launch_bound(kernel, bound, stream);
  if (st.ok()) st = cf::check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize");
  if (!st.ok()) { std::printf("error: %s\n", st.to_string().c_str()); return 1; }

  std::vector<unsigned char> got(b * hq * sq * 4);
  cuMemcpyDtoH(got.data(), lse, got.size());
  int bad = 0;
  const cf::Contract& c = kernel.contract();
  for (int i = 0; i < expected.size; ++i) {
    bool in_param = false;  // the kernel writes back parameters, not the gaps between them
    for (int p = 0; p < c.num_params; ++p)
      in_param = in_param || (i >= c.params[p].offset && i < c.params[p].offset + c.params[p].size);
    const bool pad = (i >= 68 && i < 72);  // LSE struct padding: not guaranteed through a by-value copy
    if (in_param && !pad && got[i] != expected.bytes[i]) {
      if (bad++ < 10) std::printf("byte %d: kernel got 0x%02x, loader packed 0x%02x\n", i, got[i], expected.bytes[i]);
    }
  }
  unsigned launch[8];
  std::memcpy(launch, got.data() + 1024, sizeof launch);
  std::printf("%s (%s cubin): %d of %d parameter bytes differ; grid %ux%ux%u block %ux%ux%u cluster size %u dynamic smem %u\n",
              v->name, v->cubin_data ? "embedded" : "file", bad, expected.size, launch[0], launch[1], launch[2],
              launch[3], launch[4], launch[5], launch[6], launch[7]);
  const bool launch_ok = launch[0] == 4 && launch[1] == 8 && launch[2] == 2 && launch[3] == 384 && launch[6] == 2 &&
                         launch[7] == 164864;
  // grid x: ceil(300 / 128) = 3 rounded up to the 2-CTA cluster (make_bundle.py).
  std::printf("%s\n", bad == 0 && launch_ok ? "PROBE OK" : "PROBE FAILED");
  return bad == 0 && launch_ok ? 0 : 1;
}
