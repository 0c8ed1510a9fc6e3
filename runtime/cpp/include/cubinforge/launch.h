// Step 4 of a launch: cuLaunchKernelEx on the caller's stream, with the cluster attribute
// when the contract's cluster is not 1x1x1. launch() runs steps 1-4 for one call.
#pragma once

#include <cuda.h>

#include <initializer_list>
#include <string>

#include "cubinforge/bind.h"
#include "cubinforge/contract.h"
#include "cubinforge/module.h"
#include "cubinforge/params.h"
#include "cubinforge/status.h"

namespace cubinforge {

// The launch configuration a bound problem gets, without the driver (tests read it).
inline CUlaunchConfig launch_config(const Contract& c, const Bound& b, CUstream stream,
                                    CUlaunchAttribute* cluster_attr) {
  CUlaunchConfig cfg = {};
  cfg.gridDimX = b.grid[0];
  cfg.gridDimY = b.grid[1];
  cfg.gridDimZ = b.grid[2];
  cfg.blockDimX = c.block[0];
  cfg.blockDimY = c.block[1];
  cfg.blockDimZ = c.block[2];
  cfg.sharedMemBytes = c.dynamic_smem_bytes;
  cfg.hStream = stream;
  if (c.cluster[0] * c.cluster[1] * c.cluster[2] != 1) {
    *cluster_attr = {};
    cluster_attr->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster_attr->value.clusterDim.x = c.cluster[0];
    cluster_attr->value.clusterDim.y = c.cluster[1];
    cluster_attr->value.clusterDim.z = c.cluster[2];
    cfg.attrs = cluster_attr;
    cfg.numAttrs = 1;
  }
  return cfg;
}

// Launches an already bound problem.
inline Status launch_bound(const Kernel& k, const Bound& b, CUstream stream) {
  if (!k.loaded()) return invalid("the kernel is not loaded");
  if (b.contract != &k.contract()) return invalid("the problem was bound to another variant's contract");
  PackedParams params;
  CUBINFORGE_TRY(pack_params(b, &params));
  CUlaunchAttribute cluster;
  const CUlaunchConfig cfg = launch_config(k.contract(), b, stream, &cluster);
  CUresult rc = cuLaunchKernelEx(&cfg, k.function(), params.pointers, nullptr);
  if (rc != CUDA_SUCCESS)
    return Status(rc, "cuLaunchKernelEx failed for " + std::string(k.variant().name) + " (grid " +
                          std::to_string(cfg.gridDimX) + "x" + std::to_string(cfg.gridDimY) + "x" +
                          std::to_string(cfg.gridDimZ) + ")");
  return Status::Ok();
}

// Validates the tensors against the contract, computes scalars, grid and parameters, and
// launches on `stream` (asynchronous, like any kernel launch).
inline Status launch(const Kernel& k, const NamedTensor* tensors, int num_tensors,
                     const NamedScalar* scalars, int num_scalars, CUstream stream) {
  if (!k.loaded()) return invalid("the kernel is not loaded");
  Bound b;
  Status st = bind(k.contract(), tensors, num_tensors, scalars, num_scalars, &b);
  if (!st.ok()) return Status(st.code(), std::string(k.variant().name) + ": " + st.message());
  return launch_bound(k, b, stream);
}

inline Status launch(const Kernel& k, std::initializer_list<NamedTensor> tensors,
                     std::initializer_list<NamedScalar> scalars, CUstream stream) {
  return launch(k, tensors.begin(), static_cast<int>(tensors.size()), scalars.begin(),
                static_cast<int>(scalars.size()), stream);
}

}  // namespace cubinforge
