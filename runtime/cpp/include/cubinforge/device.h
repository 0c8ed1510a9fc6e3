// The device side of selection: which arch string a device's compute capability means, and
// a helper that makes the primary context current (tensor-map encoding and module loading
// need one).
#pragma once

#include <cuda.h>

#include <string>

#include "cubinforge/status.h"

namespace cubinforge {

// "sm_90a" for 9.0, "sm_100a" for 10.0: the arch-specific targets the cubins are built for
// (any cc >= 9 gets the 'a' suffix, as in runtime/driver.py). An arch the bundle lacks is
// reported by select(), which lists the archs the bundle has.
inline std::string arch_for_compute_capability(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor) + (major >= 9 ? "a" : "");
}

inline Status device_arch(CUdevice dev, std::string* arch) {
  int major = 0, minor = 0;
  CUBINFORGE_TRY(check_cu(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                          "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)"));
  CUBINFORGE_TRY(check_cu(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                          "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)"));
  *arch = arch_for_compute_capability(major, minor);
  return Status::Ok();
}

// The arch of the device of the current context.
inline Status current_arch(std::string* arch) {
  CUdevice dev = 0;
  CUBINFORGE_TRY(check_cu(cuCtxGetDevice(&dev), "cuCtxGetDevice (is a context current?)"));
  return device_arch(dev, arch);
}

// Multiprocessors of the current context's device: the contracts' `sm_count` symbol.
inline Status current_sm_count(int* count) {
  CUdevice dev = 0;
  CUBINFORGE_TRY(check_cu(cuCtxGetDevice(&dev), "cuCtxGetDevice (is a context current?)"));
  return check_cu(cuDeviceGetAttribute(count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                  "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
}

// For hosts with no context of their own: cuInit, retain device `ordinal`'s primary context
// and make it current. Frameworks that already manage contexts skip this.
inline Status init_primary_context(int ordinal, CUcontext* ctx) {
  CUBINFORGE_TRY(check_cu(cuInit(0), "cuInit"));
  CUdevice dev = 0;
  CUBINFORGE_TRY(check_cu(cuDeviceGet(&dev, ordinal), "cuDeviceGet"));
  CUBINFORGE_TRY(check_cu(cuDevicePrimaryCtxRetain(ctx, dev), "cuDevicePrimaryCtxRetain"));
  return check_cu(cuCtxSetCurrent(*ctx), "cuCtxSetCurrent");
}

}  // namespace cubinforge
