// A launch bound and packed ahead of time: the parameter bytes (pointers, sizes, tensor
// maps) and the grid are fixed at prepare, so running it is one cuLaunchKernelEx and nothing
// else (no host work, no allocation): what a CUDA graph can capture. The kvcache and varlen
// plans are lists of these.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "cubinforge/bind.h"
#include "cubinforge/launch.h"
#include "cubinforge/module.h"
#include "cubinforge/params.h"
#include "cubinforge/status.h"

namespace cubinforge {

struct PreparedLaunch {
  const Kernel* kernel = nullptr;          // owned by the plan holding this launch
  std::unique_ptr<PackedParams> params;    // on the heap: its pointers point into itself
  uint32_t grid[3] = {1, 1, 1};
};

// Binds and validates the tensors against the kernel's contract and packs the parameters.
inline Status prepare_launch(const Kernel& k, const std::vector<NamedTensor>& tensors,
                             const std::vector<NamedScalar>& scalars, PreparedLaunch* out) {
  if (!k.loaded()) return invalid("the kernel is not loaded");
  Bound b;
  Status st = bind(k.contract(), tensors.data(), static_cast<int>(tensors.size()), scalars.data(),
                   static_cast<int>(scalars.size()), &b);
  if (!st.ok()) return Status(st.code(), std::string(k.variant().name) + ": " + st.message());
  auto params = std::make_unique<PackedParams>();
  st = pack_params(b, params.get());
  if (!st.ok()) return Status(st.code(), std::string(k.variant().name) + ": " + st.message());
  out->kernel = &k;
  out->params = std::move(params);
  for (int d = 0; d < 3; ++d) out->grid[d] = b.grid[d];
  return Status::Ok();
}

inline Status run_prepared(const PreparedLaunch& p, CUstream stream) {
  const Contract& c = p.kernel->contract();
  CUlaunchConfig cfg = {};
  cfg.gridDimX = p.grid[0], cfg.gridDimY = p.grid[1], cfg.gridDimZ = p.grid[2];
  cfg.blockDimX = c.block[0], cfg.blockDimY = c.block[1], cfg.blockDimZ = c.block[2];
  cfg.sharedMemBytes = c.dynamic_smem_bytes;
  cfg.hStream = stream;
  CUlaunchAttribute cluster = {};
  if (c.cluster[0] * c.cluster[1] * c.cluster[2] != 1) {
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = c.cluster[0];
    cluster.value.clusterDim.y = c.cluster[1];
    cluster.value.clusterDim.z = c.cluster[2];
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
  }
  const CUresult rc = cuLaunchKernelEx(&cfg, p.kernel->function(), p.params->pointers, nullptr);
  if (rc != CUDA_SUCCESS)
    return Status(rc, "cuLaunchKernelEx failed for " + std::string(p.kernel->variant().name) + " (grid " +
                          std::to_string(cfg.gridDimX) + "x" + std::to_string(cfg.gridDimY) + "x" +
                          std::to_string(cfg.gridDimZ) + ")");
  return Status::Ok();
}

// Device memory of our own (split partials, key counts, gathered caches), freed with its plan.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = 0; }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) { reset(); ptr_ = o.ptr_; o.ptr_ = 0; }
    return *this;
  }
  ~DeviceMemory() { reset(); }
  Status allocate(size_t bytes, const char* what) {
    reset();
    const std::string call = std::string("cuMemAlloc (") + what + ")";
    return check_cu(cuMemAlloc(&ptr_, bytes ? bytes : 1), call.c_str());
  }
  CUdeviceptr get() const { return ptr_; }

 private:
  void reset() {
    if (ptr_) cuMemFree(ptr_);
    ptr_ = 0;
  }
  CUdeviceptr ptr_ = 0;
};

// What a kvcache or varlen plan holds: its kernels, its buffers, its launches in order.
class PreparedPlan {
 public:
  // Launches every prepared launch on `stream`, in order; nothing else.
  Status run(CUstream stream) const {
    for (const PreparedLaunch& l : launches_) CUBINFORGE_TRY(run_prepared(l, stream));
    return Status::Ok();
  }
  // The variants launched, in launch order.
  std::vector<std::string> kernels() const {
    std::vector<std::string> names;
    for (const PreparedLaunch& l : launches_) names.push_back(l.kernel->variant().name);
    return names;
  }

 protected:
  // A kernel loaded once per plan; its address stays put when the plan moves.
  Status load(const Variant& v, const std::string& bundle_dir, const Kernel** out) {
    auto k = std::make_unique<Kernel>();
    CUBINFORGE_TRY(Kernel::load(v, bundle_dir, k.get()));
    *out = k.get();
    kernels_.push_back(std::move(k));
    return Status::Ok();
  }
  Status buffer(size_t bytes, const char* what, CUdeviceptr* out) {
    memory_.emplace_back();
    CUBINFORGE_TRY(memory_.back().allocate(bytes, what));
    *out = memory_.back().get();
    return Status::Ok();
  }
  Status add(const Kernel& k, const std::vector<NamedTensor>& t, const std::vector<NamedScalar>& s) {
    PreparedLaunch l;
    CUBINFORGE_TRY(prepare_launch(k, t, s, &l));
    launches_.push_back(std::move(l));
    return Status::Ok();
  }

  std::vector<std::unique_ptr<Kernel>> kernels_;
  std::vector<DeviceMemory> memory_;
  std::vector<PreparedLaunch> launches_;
};

}  // namespace cubinforge
