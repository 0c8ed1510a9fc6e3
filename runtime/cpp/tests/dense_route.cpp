// The C++ dense entry point (attention.h prepare_attention) under a recording fake driver:
// for each problem on stdin it prepares the plan, runs it once, and prints what the
// dispatcher chose and every launch the plan made (variant, grid, every parameter byte),
// the fills done at prepare, and which driver calls run() made. tests/test_cpp_dense_route.py
// runs the same problems through the Python runtime's flash_attn_func under its MockDriver
// (bench/host_overhead.py) and compares line by line.
//
// The fake driver says what MockDriver says: one sm_90a device with SMS multiprocessors,
// allocations at MockDriver's addresses (0x7000_0000_0000 on, rounded to 64 KiB), and a
// tensor map that holds its global address in bytes 0-7 and, in bytes 8-15, an FNV-1a hash
// of every other encode argument (the test's Python encode writes the same).
//
// Input lines: batch seqlen_q seqlen_k heads_q heads_kv head_dim causal dtype sm_count.
// Output per problem: "choice VARIANT NUM_SPLITS DECODE", then "launch NAME grid X Y Z
// params HEX" per launch, "memset PTR VALUE COUNT" per fill at prepare, "run N_LAUNCHES
// OTHER_CALLS" (driver calls during run() other than cuLaunchKernelEx), or "error MESSAGE".
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"

namespace cf = cubinforge;

namespace {

int g_sms = 132;
uint64_t g_next = 0;
int g_other = 0;  // driver calls other than cuLaunchKernelEx
struct Memset { uint64_t ptr; unsigned value; size_t n; };
std::vector<Memset> g_memsets;
struct Launch { unsigned grid[3]; void** params; };
std::vector<Launch> g_launches;

void fnv(uint64_t* h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    *h ^= (v >> (8 * i)) & 0xff;
    *h *= 0x100000001b3ull;
  }
}

}  // namespace

// The fake driver: the entry points the loader calls, under cuda.h's (versioned) names.
extern "C" {
CUresult CUDAAPI cuGetErrorName(CUresult error, const char** s) { *s = error ? "CUDA_ERROR" : "CUDA_SUCCESS"; return CUDA_SUCCESS; }
CUresult CUDAAPI cuGetErrorString(CUresult error, const char** s) { return cuGetErrorName(error, s); }
CUresult CUDAAPI cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGet(CUdevice* d, int) { *d = 0; ++g_other; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  ++g_other;
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? g_sms : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) { *c = reinterpret_cast<CUcontext>(0xC0C0); return CUDA_SUCCESS; }
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxGetDevice(CUdevice* d) { *d = 0; ++g_other; return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSynchronize(void) { ++g_other; return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleLoadData(CUmodule* m, const void*) { *m = reinterpret_cast<CUmodule>(0x1000); ++g_other; return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleUnload(CUmodule) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuModuleGetFunction(CUfunction* f, CUmodule, const char*) { *f = reinterpret_cast<CUfunction>(0x2000); ++g_other; return CUDA_SUCCESS; }
CUresult CUDAAPI cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { ++g_other; return CUDA_SUCCESS; }
CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* address,
                                        const cuuint64_t* dim, const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* estr, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                        CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  ++g_other;
  uint64_t h = 0xcbf29ce484222325ull;
  fnv(&h, static_cast<uint64_t>(dtype)), fnv(&h, rank);
  for (cuuint32_t i = 0; i < rank; ++i) fnv(&h, dim[i]);
  for (cuuint32_t i = 0; i + 1 < rank; ++i) fnv(&h, strides[i]);
  for (cuuint32_t i = 0; i < rank; ++i) fnv(&h, box[i]);
  for (cuuint32_t i = 0; i < rank; ++i) fnv(&h, estr[i]);
  for (uint64_t e : {static_cast<uint64_t>(il), static_cast<uint64_t>(sw), static_cast<uint64_t>(l2), static_cast<uint64_t>(oob)})
    fnv(&h, e);
  std::memset(map, 0, sizeof *map);
  const uint64_t a = reinterpret_cast<uint64_t>(address);
  std::memcpy(reinterpret_cast<char*>(map), &a, 8);
  std::memcpy(reinterpret_cast<char*>(map) + 8, &h, 8);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction, void** params, void**) {
  g_launches.push_back({{c->gridDimX, c->gridDimY, c->gridDimZ}, params});
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr* p, size_t n) {
  ++g_other;
  g_next += (n + 0xFFFF) & ~static_cast<uint64_t>(0xFFFF);
  *p = g_next;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr p, unsigned int v, size_t n, CUstream) {
  ++g_other;
  g_memsets.push_back({p, v, n});
  return CUDA_SUCCESS;
}
#define UNUSED(decl) CUresult CUDAAPI decl { ++g_other; return CUDA_ERROR_NOT_SUPPORTED; }
UNUSED(cuMemcpyHtoD(CUdeviceptr, const void*, size_t))
UNUSED(cuMemcpyDtoH(void*, CUdeviceptr, size_t))
UNUSED(cuMemsetD8(CUdeviceptr, unsigned char, size_t))
UNUSED(cuMemcpyHtoDAsync(CUdeviceptr, const void*, size_t, CUstream))
UNUSED(cuStreamSynchronize(CUstream))
}

int main(int argc, char** argv) {
  const cf::Bundle& bundle = cubinforge_bundle::kBundle;
  const std::string dir = argc > 1 ? argv[1] : ".";
  char line[512];
  while (std::fgets(line, sizeof line, stdin)) {
    long long b, sq, sk, hq, hkv, d;
    int causal, sms;
    char dtype_text[16];
    if (std::sscanf(line, "%lld %lld %lld %lld %lld %lld %d %15s %d", &b, &sq, &sk, &hq, &hkv, &d, &causal, dtype_text,
                    &sms) != 9)
      continue;
    g_sms = sms, g_next = 0x700000000000ull, g_memsets.clear(), g_launches.clear();
    const cf::DType dt = std::string(dtype_text) == "fp16" ? cf::DType::fp16 : cf::DType::bf16;
    // The Python side's fake addresses (tests/test_cpp_dense_route.py ADDRESS).
    const uint64_t base = 1ull << 40, step = 1ull << 37;
    cf::AttentionArgs a;
    a.q = cf::make_contiguous(base, dt, {b, sq, hq, d});
    a.k = cf::make_contiguous(base + step, dt, {b, sk, hkv, d});
    a.v = cf::make_contiguous(base + 2 * step, dt, {b, sk, hkv, d});
    a.o = cf::make_contiguous(base + 3 * step, dt, {b, sq, hq, d});
    a.lse = cf::make_contiguous(base + 4 * step, cf::DType::f32, {b, hq, sq});
    a.causal = causal != 0;
    cf::AttentionPlan plan;
    cf::Status st = cf::prepare_attention(bundle, dir, a, &plan);
    if (!st.ok()) {
      std::printf("error %s\n", st.message().c_str());
      continue;
    }
    const cf::AttentionChoice& c = plan.choice();
    std::printf("choice %s %d %d\n", c.variant->name, plan.num_splits(), c.decode ? 1 : 0);
    for (const Memset& m : g_memsets)
      std::printf("memset %llu %u %zu\n", static_cast<unsigned long long>(m.ptr), m.value, m.n);
    g_other = 0;
    st = plan.run(nullptr);
    if (!st.ok()) {
      std::printf("error %s\n", st.message().c_str());
      continue;
    }
    const std::vector<std::string> names = plan.kernels();
    for (size_t i = 0; i < g_launches.size() && i < names.size(); ++i) {
      const cf::Variant* v = nullptr;
      cf::find_variant(bundle, names[i].c_str(), &v);
      const cf::Contract& k = *v->contract;
      std::string hex;
      char buf[3];
      for (int p = 0; p < k.num_params; ++p)
        for (int j = 0; j < k.params[p].size; ++j) {
          std::snprintf(buf, sizeof buf, "%02x", static_cast<const unsigned char*>(g_launches[i].params[p])[j]);
          hex += buf;
        }
      std::printf("launch %s grid %u %u %u params %s\n", names[i].c_str(), g_launches[i].grid[0], g_launches[i].grid[1],
                  g_launches[i].grid[2], hex.c_str());
    }
    std::printf("run %zu %d\n", g_launches.size(), g_other);
  }
  return 0;
}
