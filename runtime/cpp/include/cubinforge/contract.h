// The launch contract as constexpr tables (docs/launch-contract.md, version 1).
// `cubinforge bundle --cpp` renders one Contract per variant from its JSON; names in
// expressions are resolved to indices at render time, so a launch does no string lookups.
#pragma once

#include <cstdint>

#include "cubinforge/tensor.h"

namespace cubinforge {

constexpr int kContractVersion = 1;

// ---- expressions (reverse Polish notation) --------------------------------------------

enum class Op : uint8_t {
  Int,           // push `ival`
  Real,          // push `fval`
  Symbol,        // push symbols[index]
  Scalar,        // push scalars[index]
  TensorPtr,     // push tensors[index].ptr
  TensorShape,   // push tensors[index].shape[dim]
  TensorStride,  // push tensors[index].strides[dim] (elements)
  SmCount,       // push the launching device's multiprocessor count (`sm_count`)
  Add, Sub, Mul, Div, FloorDiv, CeilDiv, Min, Max, Eq, Ne, Lt, Le, Mod,  // binary
  Rsqrt, Log2eMul,                                                      // unary
};

struct Token {
  Op op;
  int64_t ival;       // Int
  double fval;        // Real
  int16_t index;      // Symbol / Scalar / Tensor*: index into the contract's table
  int16_t dim;        // TensorShape / TensorStride
  const char* text;   // the token as written in the JSON, for error messages
};

struct Expr {
  const Token* tokens;
  int count;
  const char* text;   // the whole expression as written, for error messages
};

// ---- symbols, tensors, scalars, checks -------------------------------------------------

struct SymbolSpec {
  const char* name;
  int16_t tensor;  // the first tensor dimension that defines the symbol
  int16_t dim;
  bool has_fixed;
  int64_t fixed;   // the only value this variant accepts
  bool has_min;
  int64_t min;
};

// One dimension of a tensor spec: a symbol, or a fixed size when symbol < 0.
struct DimSpec {
  int16_t symbol;
  int64_t size;
};

enum class Role : uint8_t { input, output };

struct TensorSpec {
  const char* name;
  Role role;
  DType dtype;
  int rank;
  const DimSpec* dims;  // in the caller's order
  int contiguous_dim;   // -1: none
  int align_bytes;      // base pointer and every non-contiguous stride, in bytes
};

enum class ScalarType : uint8_t { i32, i64, f32 };

struct ScalarSpec {
  const char* name;
  ScalarType type;
  Expr default_value;
};

struct CheckSpec {
  Expr expr;           // must be non-zero
  const char* message;
};

// ---- parameters -------------------------------------------------------------------------

enum class ParamKind : uint8_t { tensormap, struct_, scalar };
enum class FieldType : uint8_t { i32, i64, u64, f32, ptr };

struct FieldSpec {
  int offset;  // relative to the parameter's start
  FieldType type;
  Expr value;
};

enum class Swizzle : uint8_t { none, b32, b64, b128 };
enum class L2Promotion : uint8_t { none, b64, b128, b256 };
enum class OobFill : uint8_t { none, nan };

constexpr int kMaxTensorMapRank = 5;

// The cuTensorMapEncodeTiled recipe; arrays are in map order, innermost first.
struct TensorMapSpec {
  int16_t tensor;
  DType dtype;
  int rank;
  int16_t dims[kMaxTensorMapRank];  // tensor dimension feeding map dimension i
  uint32_t box[kMaxTensorMapRank];
  uint32_t element_strides[kMaxTensorMapRank];
  Swizzle swizzle;
  L2Promotion l2_promotion;
  OobFill oob_fill;  // interleave is always none in contract v1
  // A ragged map (runtime/tensormap.py ragged_*): the last map dimension (dims[rank - 1], the
  // tensor dimension the map clips per sequence) has rows + 1 entries, and the base moves back
  // rows * stride elements. false: a plain map.
  bool ragged;
};

struct ParamSpec {
  int ordinal;
  const char* name;
  ParamKind kind;
  int offset;  // bytes, as in the cubin's EIATTR_KPARAM_INFO
  int size;
  int align;
  // kind == struct_
  const FieldSpec* fields;
  int num_fields;
  // kind == scalar
  ScalarType scalar_type;
  Expr value;
  // kind == tensormap
  TensorMapSpec tensormap;
};

// ---- the contract and the bundle's variants --------------------------------------------

struct Contract {
  int contract_version;
  const char* variant;
  const char* arch;   // "sm_90a" | "sm_100a"
  const char* entry;  // cuModuleGetFunction name
  uint32_t block[3];
  uint32_t cluster[3];
  uint32_t dynamic_smem_bytes;
  uint32_t static_smem_bytes;
  Expr grid[3];
  const SymbolSpec* symbols;
  int num_symbols;
  const TensorSpec* tensors;
  int num_tensors;
  const ScalarSpec* scalars;
  int num_scalars;
  const CheckSpec* checks;
  int num_checks;
  const ParamSpec* params;
  int num_params;
  int param_bytes;  // end of the last parameter: the size of the packed argument buffer
  // Percent of the SM's L1/shared memory to prefer as shared memory, set at load (a kernel
  // built for two CTAs an SM); -1: the driver's default.
  int smem_carveout_percent;
};

// A selection axis of a variant, as a canonical string: "sm_90a", "bf16", "128", "true".
struct Axis {
  const char* key;
  const char* value;
};

struct Variant {
  const char* name;
  const char* family;
  const Axis* axes;
  int num_axes;
  const char* cubin_sha256;
  uint64_t cubin_size;
  const unsigned char* cubin_data;  // the embedded image, or nullptr (then load the file)
  const Contract* contract;
  // Why the loader refuses this variant without an opt-in (never checked numerically on a GPU
  // of its arch), or nullptr when it may launch. Kernel::load says it and stops.
  const char* unverified_reason = nullptr;
};

// A dispatcher preference, generated from runtime/dispatch.py PREFERENCES: when every
// condition holds for the problem, variants with the preferred axis values rank first. A
// condition is an exact value (`equals`, canonical axis text) or inclusive bounds on a size.
struct PrefCondition {
  const char* key;
  const char* equals;  // nullptr: a range
  bool has_low;
  int64_t low;
  bool has_high;
  int64_t high;
};

struct PrefAxis {
  const char* key;
  const char* value;
};

struct Preference {
  const char* name;
  const PrefCondition* when;
  int num_when;
  const PrefAxis* prefer;
  int num_prefer;
  const char* why;
  // Launch parameters the chosen variant takes when it meets this rule: {parameter, the
  // derived value it is set to} (dispatch.Preference.params; e.g. {"num_splits", "decode_splits"}).
  const PrefAxis* params = nullptr;
  int num_params = 0;
};

// An axis whose default is another axis's value (runtime/axes.py Axis.default_from: head_dim_v
// follows head_dim), generated.
struct DerivedAxis {
  const char* key;
  const char* source;
};

// The decode plan's constants (runtime/decode_plan.py), generated: the split heuristic and the
// decode forms' tiles the dispatcher's `decode_splits` value plans with.
struct DecodePlanConstants {
  double fill_fraction;
  int min_blocks_per_split;
  int max_splits;
  double efficiency_slack;
  int tile_m;
  int tile_n;
};

struct Bundle {
  const Variant* variants;
  int count;
  const Preference* preferences = nullptr;  // earlier ones weigh more
  int num_preferences = 0;
  // Exact axes a query may leave out, with the plain kernel's value (runtime/axes.py
  // DEFAULT_AXES, generated): select() assumes them unless the query says otherwise.
  const Axis* default_axes = nullptr;
  int num_default_axes = 0;
  const DerivedAxis* derived_axes = nullptr;  // axes.derived_axes(): a query that leaves one out means its source's value
  int num_derived_axes = 0;
  // Exact axes a preference may choose when the query left them out (axes.Axis.form:
  // split_kv, pack_gqa change how a kernel computes, not what).
  const char* const* form_axes = nullptr;
  int num_form_axes = 0;
  const DecodePlanConstants* decode_plan = nullptr;
};

// Lookups by name over the tables (linear: contracts have a handful of entries).
inline bool names_equal(const char* a, const char* b) {
  if (a == nullptr || b == nullptr) return a == b;
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

inline int find_tensor(const Contract& c, const char* name) {
  for (int i = 0; i < c.num_tensors; ++i)
    if (names_equal(c.tensors[i].name, name)) return i;
  return -1;
}

inline int find_symbol(const Contract& c, const char* name) {
  for (int i = 0; i < c.num_symbols; ++i)
    if (names_equal(c.symbols[i].name, name)) return i;
  return -1;
}

inline int find_scalar(const Contract& c, const char* name) {
  for (int i = 0; i < c.num_scalars; ++i)
    if (names_equal(c.scalars[i].name, name)) return i;
  return -1;
}

inline const char* axis_value(const Variant& v, const char* key) {
  for (int i = 0; i < v.num_axes; ++i)
    if (names_equal(v.axes[i].key, key)) return v.axes[i].value;
  return nullptr;
}

}  // namespace cubinforge
