// Status: every cubinforge call returns one instead of throwing or aborting.
// It carries the driver's CUresult and its name (cuGetErrorName) plus a message that says
// what was wrong in the caller's terms (which tensor, which dimension, what is accepted).
#pragma once

#include <cuda.h>

#include <string>
#include <utility>

namespace cubinforge {

class Status {
 public:
  Status() = default;  // OK
  Status(CUresult code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == CUDA_SUCCESS; }
  explicit operator bool() const { return ok(); }
  CUresult code() const { return code_; }
  const std::string& message() const { return message_; }

  // "CUDA_ERROR_INVALID_VALUE": the driver's own name for the code.
  std::string code_name() const;
  // "CUDA_ERROR_INVALID_VALUE: q: dimension 3 (head_dim) is 96; this variant accepts only 128".
  std::string to_string() const {
    return ok() ? std::string("CUDA_SUCCESS") : code_name() + ": " + message_;
  }

 private:
  CUresult code_ = CUDA_SUCCESS;
  std::string message_;
};

// Codes the loader itself returns for caller mistakes, named without asking the driver so
// that the pure parts (validation, expressions, selection) work with no driver at all.
inline const char* builtin_code_name(CUresult code) {
  switch (code) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case CUDA_ERROR_FILE_NOT_FOUND: return "CUDA_ERROR_FILE_NOT_FOUND";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    default: return nullptr;
  }
}

inline std::string Status::code_name() const {
  if (const char* name = builtin_code_name(code_)) return name;
  const char* name = nullptr;
  if (cuGetErrorName(code_, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUresult(" + std::to_string(static_cast<int>(code_)) + ")";
}

// A caller mistake: bad shape, unaligned pointer, unknown scalar...
inline Status invalid(std::string message) {
  return Status(CUDA_ERROR_INVALID_VALUE, std::move(message));
}

// Wraps a driver call: check_cu(cuInit(0), "cuInit") returns the driver's code with
// the call that failed named in the message.
inline Status check_cu(CUresult code, const char* what) {
  if (code == CUDA_SUCCESS) return Status::Ok();
  return Status(code, std::string(what) + " failed");
}

}  // namespace cubinforge

// Early return on failure, for code that composes Status-returning calls.
#define CUBINFORGE_TRY(expr)                        \
  do {                                              \
    ::cubinforge::Status cubinforge_status_ = (expr); \
    if (!cubinforge_status_.ok()) return cubinforge_status_; \
  } while (0)
