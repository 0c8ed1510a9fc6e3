// A kernel with the fa3_fwd parameter layout (sample_manifests.py) that writes back what it
// received: every parameter's bytes at its offset, and the launch it saw (grid, block,
// cluster, dynamic smem). Verifies the loader against a real driver without a real kernel.
#include <cuda.h>

struct Coord3 { int a, b, c; };                                       // 12 B, align 4
struct Lse { float* ptr; int s0, s1, s2; long long st1, st2; };        // 40 B, align 8

__device__ void put(unsigned char* dst, const void* src, int n) {
  for (int i = 0; i < n; ++i) dst[i] = static_cast<const unsigned char*>(src)[i];
}

extern "C" __global__ void __launch_bounds__(384) probe(
    Coord3 q, Coord3 k, Coord3 v, Coord3 o, Lse lse, const __grid_constant__ CUtensorMap tq,
    const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
    const __grid_constant__ CUtensorMap to, float scale, char m1, char m2) {
  extern __shared__ unsigned char smem[];
  unsigned dyn = 0, nctarank = 0;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nctarank));
  if (threadIdx.x == 0) smem[dyn - 1] = 1;  // touch the last dynamic byte
  if (blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x) return;
  unsigned char* out = reinterpret_cast<unsigned char*>(lse.ptr);
  put(out + 0, &q, 12); put(out + 12, &k, 12); put(out + 24, &v, 12); put(out + 36, &o, 12);
  put(out + 48, &lse, 40);
  // At the offsets of this kernel's KPARAM table (make_bundle.py writes the same into the contract).
  put(out + 112, &tq, 128); put(out + 240, &tk, 128); put(out + 368, &tv, 128); put(out + 496, &to, 128);
  put(out + 624, &scale, 4); out[628] = m1; out[629] = m2;
  unsigned launch[8] = {gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y, blockDim.z, nctarank, dyn};
  put(out + 1024, launch, sizeof launch);
}
