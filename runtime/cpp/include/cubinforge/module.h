// A loaded cubin and one variant's function, ready to launch. Each object owns exactly one
// resource (the CUmodule); the dynamic shared memory attribute is raised once, at load.
#pragma once

#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cubinforge/contract.h"
#include "cubinforge/device.h"
#include "cubinforge/status.h"

namespace cubinforge {

class Module {
 public:
  Module() = default;
  ~Module() { reset(); }
  Module(Module&& o) noexcept : module_(std::exchange(o.module_, nullptr)) {}
  Module& operator=(Module&& o) noexcept {
    if (this != &o) { reset(); module_ = std::exchange(o.module_, nullptr); }
    return *this;
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // From an image in memory (an embedded cubin, or bytes read by the host).
  static Status load_data(const void* image, Module* out) {
    CUmodule m = nullptr;
    CUBINFORGE_TRY(check_cu(cuModuleLoadData(&m, image), "cuModuleLoadData"));
    *out = Module(m);
    return Status::Ok();
  }

  // From a cubin file; `expected_size` (when non-zero) catches a truncated or wrong file.
  static Status load_file(const std::string& path, Module* out, uint64_t expected_size = 0) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return Status(CUDA_ERROR_FILE_NOT_FOUND, "cannot open cubin " + path);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (expected_size != 0 && bytes.size() != expected_size)
      return Status(CUDA_ERROR_INVALID_IMAGE, "cubin " + path + " has " + std::to_string(bytes.size()) +
                                                  " bytes; the bundle says " + std::to_string(expected_size));
    Status st = load_data(bytes.data(), out);  // the driver copies the image
    if (!st.ok()) return Status(st.code(), st.message() + " for " + path);
    return st;
  }

  Status function(const char* entry, CUfunction* fn) const {
    CUresult rc = cuModuleGetFunction(fn, module_, entry);
    if (rc != CUDA_SUCCESS) return Status(rc, std::string("cuModuleGetFunction(\"") + entry + "\") failed");
    return Status::Ok();
  }

  CUmodule get() const { return module_; }

 private:
  explicit Module(CUmodule m) : module_(m) {}
  void reset() {
    if (module_ != nullptr) cuModuleUnload(module_);
    module_ = nullptr;
  }
  CUmodule module_ = nullptr;
};

class Kernel {
 public:
  // Loads `v`'s cubin (embedded bytes when the bundle has them, else
  // `<bundle_dir>/<sha256>.cubin`) into the current context, after checking that the
  // device is the arch the variant was built for. A variant with an `unverified_reason` is
  // refused unless `allow_unverified` or CUBINFORGE_ALLOW_UNVERIFIED=1 (docs/kernels.md).
  static Status load(const Variant& v, const std::string& bundle_dir, Kernel* out,
                     bool allow_unverified = false) {
    const Contract& c = *v.contract;
    if (v.unverified_reason != nullptr && !allow_unverified && !unverified_allowed_by_env())
      return Status(CUDA_ERROR_NOT_PERMITTED,
                    "variant " + std::string(v.name) + " is unverified: " + v.unverified_reason +
                        ". Its results have never been compared with a reference, so they may be wrong. "
                        "To load it anyway set CUBINFORGE_ALLOW_UNVERIFIED=1 or pass allow_unverified=true");
    std::string arch;
    CUBINFORGE_TRY(current_arch(&arch));
    if (arch != c.arch)
      return Status(CUDA_ERROR_NO_BINARY_FOR_GPU, "variant " + std::string(v.name) + " is built for " + c.arch +
                                                      " but the current device is " + arch);
    Kernel k;
    k.variant_ = &v;
    if (v.cubin_data != nullptr) {
      CUBINFORGE_TRY(Module::load_data(v.cubin_data, &k.module_));
    } else {
      const std::string dir = bundle_dir.empty() ? std::string(".") : bundle_dir;
      CUBINFORGE_TRY(Module::load_file(dir + "/" + v.cubin_sha256 + ".cubin", &k.module_, v.cubin_size));
    }
    CUBINFORGE_TRY(k.module_.function(c.entry, &k.function_));
    // The cubin does not record the dynamic smem size; without this the launch fails with
    // CUDA_ERROR_INVALID_VALUE as soon as it asks for more than 48 KiB.
    CUresult rc = cuFuncSetAttribute(k.function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(c.dynamic_smem_bytes));
    if (rc != CUDA_SUCCESS)
      return Status(rc, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " +
                            std::to_string(c.dynamic_smem_bytes) + ") failed for " + v.name);
    if (c.smem_carveout_percent >= 0) {
      // Two CTAs an SM fit only where the driver's L1/shared split leaves room for both.
      rc = cuFuncSetAttribute(k.function_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                              c.smem_carveout_percent);
      if (rc != CUDA_SUCCESS)
        return Status(rc, "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT, " +
                              std::to_string(c.smem_carveout_percent) + ") failed for " + v.name);
    }
    *out = std::move(k);
    return Status::Ok();
  }

  static bool unverified_allowed_by_env() {
    const char* e = std::getenv("CUBINFORGE_ALLOW_UNVERIFIED");
    if (e == nullptr) return false;
    for (const char* yes : {"1", "true", "yes", "on"})
      if (std::strcmp(e, yes) == 0) return true;
    return false;
  }

  const Variant& variant() const { return *variant_; }
  const Contract& contract() const { return *variant_->contract; }
  CUfunction function() const { return function_; }
  bool loaded() const { return function_ != nullptr; }

 private:
  Module module_;
  CUfunction function_ = nullptr;
  const Variant* variant_ = nullptr;
};

}  // namespace cubinforge
