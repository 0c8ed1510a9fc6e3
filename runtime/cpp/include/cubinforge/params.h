// Step 3 of a launch: every parameter's bytes, packed at the contract's offsets into one
// buffer laid out exactly like the kernel's parameter space, and the kernelParams array of
// pointers into it that cuLaunchKernelEx takes.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "cubinforge/bind.h"
#include "cubinforge/contract.h"
#include "cubinforge/expr.h"
#include "cubinforge/status.h"
#include "cubinforge/tensormap.h"

namespace cubinforge {

constexpr int kMaxParams = 64;
constexpr int kMaxParamBytes = 4096;  // the classic kernel parameter limit

struct PackedParams {
  alignas(128) unsigned char bytes[kMaxParamBytes];
  void* pointers[kMaxParams];  // kernelParams: pointers[i] = bytes + params[i].offset
  int num_params = 0;
  int size = 0;

  PackedParams() = default;
  PackedParams(const PackedParams&) = delete;  // pointers point into this object
  PackedParams& operator=(const PackedParams&) = delete;
};

// Lets tests (and tools) see tensor-map requests without a driver; launches use the driver.
using TensorMapEncoder = Status (*)(const TensorMapRequest&, void* out128);

namespace detail {

inline int field_bytes(FieldType t) { return t == FieldType::i32 || t == FieldType::f32 ? 4 : 8; }
inline int scalar_bytes(ScalarType t) { return t == ScalarType::i64 ? 8 : 4; }

// Writes `v` as `type` at `dst`; integers must fit, reals go only into f32.
inline Status store(const std::string& who, FieldType type, const Value& v, unsigned char* dst) {
  if (type == FieldType::f32) {
    const float f = static_cast<float>(v.as_double());  // round to nearest, like numpy
    std::memcpy(dst, &f, 4);
    return Status::Ok();
  }
  if (v.real) return invalid(who + ": a real value where an integer is needed");
  if (type == FieldType::i32) {
    if (v.i < std::numeric_limits<int32_t>::min() || v.i > std::numeric_limits<int32_t>::max())
      return invalid(who + ": " + std::to_string(v.i) + " does not fit in a 32-bit integer");
    const int32_t x = static_cast<int32_t>(v.i);
    std::memcpy(dst, &x, 4);
    return Status::Ok();
  }
  if ((type == FieldType::u64 || type == FieldType::ptr) && v.i < 0)
    return invalid(who + ": " + std::to_string(v.i) + " is negative for an unsigned field");
  const int64_t x = v.i;  // i64, u64 and ptr: the 64-bit pattern
  std::memcpy(dst, &x, 8);
  return Status::Ok();
}

inline FieldType as_field(ScalarType t) {
  return t == ScalarType::i32 ? FieldType::i32 : t == ScalarType::i64 ? FieldType::i64 : FieldType::f32;
}

}  // namespace detail

inline Status pack_params(const Bound& b, PackedParams* out,
                          TensorMapEncoder encoder = encode_tensormap) {
  const Contract& c = *b.contract;
  if (c.num_params > kMaxParams || c.param_bytes > kMaxParamBytes)
    return invalid("variant " + std::string(c.variant) + ": too many parameter bytes for this loader");
  std::memset(out->bytes, 0, static_cast<size_t>(c.param_bytes));  // bytes not covered are zero
  const Env env = b.env();
  for (int i = 0; i < c.num_params; ++i) {
    const ParamSpec& p = c.params[i];
    unsigned char* dst = out->bytes + p.offset;
    const std::string who = "parameter " + std::to_string(i) + " (" + p.name + ")";
    switch (p.kind) {
      case ParamKind::struct_:
        for (int f = 0; f < p.num_fields; ++f) {
          const FieldSpec& field = p.fields[f];
          if (field.offset < 0 || field.offset + detail::field_bytes(field.type) > p.size)
            return invalid(who + ": field at offset " + std::to_string(field.offset) + " is outside the parameter");
          Value v;
          CUBINFORGE_TRY(evaluate(field.value, env, &v));
          CUBINFORGE_TRY(detail::store(who + " field at offset " + std::to_string(field.offset), field.type, v,
                                       dst + field.offset));
        }
        break;
      case ParamKind::scalar: {
        if (detail::scalar_bytes(p.scalar_type) != p.size) return invalid(who + ": size does not match its type");
        Value v;
        CUBINFORGE_TRY(evaluate(p.value, env, &v));
        CUBINFORGE_TRY(detail::store(who, detail::as_field(p.scalar_type), v, dst));
        break;
      }
      case ParamKind::tensormap: {
        TensorMapRequest r;
        CUBINFORGE_TRY(make_tensormap_request(p, b, &r));
        Status st = encoder(r, dst);
        if (!st.ok()) return Status(st.code(), who + ": " + st.message());
        break;
      }
    }
    out->pointers[i] = dst;
  }
  out->num_params = c.num_params;
  out->size = c.param_bytes;
  return Status::Ok();
}

}  // namespace cubinforge
