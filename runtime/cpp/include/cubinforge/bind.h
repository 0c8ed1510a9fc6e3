// Step 1-2 of a launch (docs/launch-contract.md, "Launching"): bind the symbols from the
// caller's tensors, validate every tensor against its spec, then the checks, the scalars
// and the grid, in the same order and with the same rules as runtime/contract.py. Pure host
// code (unit-tested without a GPU), except that a grid reading `sm_count` asks the current
// context's device for it when the caller did not pass it.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include "cubinforge/contract.h"
#include "cubinforge/device.h"
#include "cubinforge/expr.h"
#include "cubinforge/status.h"
#include "cubinforge/tensor.h"

namespace cubinforge {

constexpr int kMaxSymbols = 32;
constexpr int kMaxScalars = 16;
constexpr int kMaxTensors = 16;

// A problem bound to a contract: everything the parameters and the grid are computed from.
struct Bound {
  const Contract* contract = nullptr;
  int64_t symbols[kMaxSymbols] = {};
  bool symbol_bound[kMaxSymbols] = {};
  Value scalars[kMaxScalars] = {};
  bool scalar_bound[kMaxScalars] = {};
  const Tensor* tensors[kMaxTensors] = {};  // by contract index; point into the caller's args
  uint32_t grid[3] = {1, 1, 1};
  int64_t sm_count = -1;  // the launching device's multiprocessors, for `sm_count`

  Env env() const {
    Env e;
    e.sm_count = sm_count;
    e.symbols = symbols;
    e.symbol_bound = symbol_bound;
    e.scalars = scalars;
    e.scalar_bound = scalar_bound;
    e.tensors = tensors;
    e.num_symbols = contract ? contract->num_symbols : 0;
    e.num_scalars = contract ? contract->num_scalars : 0;
    e.num_tensors = contract ? contract->num_tensors : 0;
    return e;
  }

  // The value of a symbol by name, or -1 when the contract has no such symbol.
  int64_t symbol(const char* name) const {
    const int i = contract ? find_symbol(*contract, name) : -1;
    return i >= 0 ? symbols[i] : -1;
  }
};

namespace detail {

inline bool grid_uses_sm_count(const Contract& c) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < c.grid[d].count; ++k)
      if (c.grid[d].tokens[k].op == Op::SmCount) return true;
  return false;
}

inline std::string dims_text(const Contract& c, const TensorSpec& t) {
  std::string s;
  for (int d = 0; d < t.rank; ++d) {
    if (d) s += ", ";
    s += t.dims[d].symbol >= 0 ? c.symbols[t.dims[d].symbol].name : std::to_string(t.dims[d].size);
  }
  return s;
}

inline std::string dim_label(const Contract& c, const TensorSpec& t, int d) {
  std::string s = "tensor '" + std::string(t.name) + "' dimension " + std::to_string(d);
  if (t.dims[d].symbol >= 0) s += std::string(" (") + c.symbols[t.dims[d].symbol].name + ")";
  return s;
}

inline std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// " (heads_q=6, heads_kv=4)": the symbols an expression reads, with their values.
inline std::string symbol_values(const Contract& c, const int64_t* symbols, const Expr& e) {
  std::string s;
  bool seen[kMaxSymbols] = {};
  for (int k = 0; k < e.count; ++k) {
    const Token& t = e.tokens[k];
    if (t.op != Op::Symbol || t.index < 0 || t.index >= c.num_symbols || seen[t.index]) continue;
    seen[t.index] = true;
    s += (s.empty() ? "" : ", ") + std::string(c.symbols[t.index].name) + "=" + std::to_string(symbols[t.index]);
  }
  return s.empty() ? s : " (" + s + ")";
}

}  // namespace detail

// Checks the contract's own tables (version, limits, layout of the parameters). The renderer
// already guarantees all of this; a hand-written or stale table is caught here.
inline Status validate_contract(const Contract& c) {
  if (c.contract_version != kContractVersion)
    return invalid("variant " + std::string(c.variant) + ": contract version " +
                   std::to_string(c.contract_version) + " is not supported (this loader knows " +
                   std::to_string(kContractVersion) + ")");
  if (c.num_symbols > kMaxSymbols || c.num_scalars > kMaxScalars || c.num_tensors > kMaxTensors)
    return invalid("variant " + std::string(c.variant) + ": too many symbols, scalars or tensors");
  int end = 0;
  for (int i = 0; i < c.num_params; ++i) {
    const ParamSpec& p = c.params[i];
    // No offset % align check: offsets are relative to the parameter block, whose bank base
    // (0x210 on sm_90) puts a 64-byte-aligned tensor map at offset 112.
    if (p.ordinal != i || p.align <= 0 || p.offset < end)
      return invalid("variant " + std::string(c.variant) + ": parameter " + std::to_string(i) +
                     " (" + p.name + ") has a bad ordinal, offset or alignment");
    if (p.kind == ParamKind::tensormap && p.size != 128)
      return invalid(std::string("parameter ") + p.name + ": a tensormap is 128 bytes");
    end = p.offset + p.size;
  }
  if (end != c.param_bytes) return invalid("variant " + std::string(c.variant) + ": param_bytes mismatch");
  return Status::Ok();
}

inline Status bind(const Contract& c, const NamedTensor* tensors, int num_tensors,
                   const NamedScalar* scalars, int num_scalars, Bound* out, int64_t sm_count = -1) {
  CUBINFORGE_TRY(validate_contract(c));
  Bound b;
  b.contract = &c;
  b.sm_count = sm_count;

  // Which given tensor is which contract tensor.
  for (int i = 0; i < num_tensors; ++i) {
    const int k = find_tensor(c, tensors[i].name);
    if (k < 0) {
      std::string names;
      for (int j = 0; j < c.num_tensors; ++j) names += std::string(j ? ", " : "") + c.tensors[j].name;
      return invalid("unknown tensor '" + std::string(tensors[i].name ? tensors[i].name : "") +
                     "'; variant " + c.variant + " takes " + names);
    }
    if (b.tensors[k] != nullptr) return invalid("tensor '" + std::string(c.tensors[k].name) + "' given twice");
    b.tensors[k] = &tensors[i].tensor;
  }

  // Dtype, rank, pointer of each tensor.
  for (int k = 0; k < c.num_tensors; ++k) {
    const TensorSpec& spec = c.tensors[k];
    const Tensor* t = b.tensors[k];
    const std::string name = std::string("tensor '") + spec.name + "'";
    if (t == nullptr)
      return invalid("missing " + name + " (" + detail::dims_text(c, spec) + ")");
    if (t->dtype != spec.dtype)
      return invalid(name + " has dtype " + dtype_name(t->dtype) + "; variant " + c.variant +
                     " takes " + dtype_name(spec.dtype));
    if (t->rank != spec.rank)
      return invalid(name + " has rank " + std::to_string(t->rank) + "; expected " +
                     std::to_string(spec.rank) + " (" + detail::dims_text(c, spec) + ")");
    if (t->ptr == 0) return invalid(name + " has a null pointer");
  }

  // Symbols from their defining dimensions, then every dimension must agree with them.
  for (int s = 0; s < c.num_symbols; ++s) {
    const SymbolSpec& sym = c.symbols[s];
    if (sym.tensor < 0) continue;  // not read from a tensor
    b.symbols[s] = b.tensors[sym.tensor]->shape[sym.dim];
    b.symbol_bound[s] = true;
  }
  for (int k = 0; k < c.num_tensors; ++k) {
    const TensorSpec& spec = c.tensors[k];
    const Tensor& t = *b.tensors[k];
    for (int d = 0; d < spec.rank; ++d) {
      const DimSpec& dim = spec.dims[d];
      if (dim.symbol < 0) {
        if (t.shape[d] != dim.size)
          return invalid(detail::dim_label(c, spec, d) + " is " + std::to_string(t.shape[d]) +
                         "; it must be " + std::to_string(dim.size));
        continue;
      }
      const SymbolSpec& sym = c.symbols[dim.symbol];
      if (!b.symbol_bound[dim.symbol]) {  // a symbol with no defining tensor: first use binds
        b.symbols[dim.symbol] = t.shape[d];
        b.symbol_bound[dim.symbol] = true;
      } else if (t.shape[d] != b.symbols[dim.symbol]) {
        return invalid(detail::dim_label(c, spec, d) + " is " + std::to_string(t.shape[d]) +
                       ", but " + sym.name + " = " + std::to_string(b.symbols[dim.symbol]) +
                       " from tensor '" + c.tensors[sym.tensor].name + "' dimension " +
                       std::to_string(sym.dim));
      }
    }
  }
  for (int s = 0; s < c.num_symbols; ++s) {
    const SymbolSpec& sym = c.symbols[s];
    if (!b.symbol_bound[s]) continue;
    const std::string where = sym.tensor >= 0
        ? " (tensor '" + std::string(c.tensors[sym.tensor].name) + "' dimension " + std::to_string(sym.dim) + ")"
        : std::string();
    if (sym.has_fixed && b.symbols[s] != sym.fixed)
      return invalid(std::string(sym.name) + " is " + std::to_string(b.symbols[s]) + where +
                     "; variant " + c.variant + " accepts only " + sym.name + " = " +
                     std::to_string(sym.fixed));
    if (sym.has_min && b.symbols[s] < sym.min)
      return invalid(std::string(sym.name) + " is " + std::to_string(b.symbols[s]) + where +
                     "; it must be at least " + std::to_string(sym.min));
  }

  // Layout: the contiguous dimension and the alignment of the pointer and the other strides.
  for (int k = 0; k < c.num_tensors; ++k) {
    const TensorSpec& spec = c.tensors[k];
    const Tensor& t = *b.tensors[k];
    const int elem = dtype_bytes(spec.dtype);
    // A size-1 dimension is never stepped over, so its stride cannot matter.
    if (spec.contiguous_dim >= 0 && t.strides[spec.contiguous_dim] != 1 && t.shape[spec.contiguous_dim] != 1)
      return invalid(detail::dim_label(c, spec, spec.contiguous_dim) + " must be contiguous (stride 1); its stride is " +
                     std::to_string(t.strides[spec.contiguous_dim]));
    if (spec.align_bytes > 1) {
      if (t.ptr % static_cast<uint64_t>(spec.align_bytes) != 0)
        return invalid("tensor '" + std::string(spec.name) + "' pointer " + detail::hex(t.ptr) +
                       " is not " + std::to_string(spec.align_bytes) + "-byte aligned");
      for (int d = 0; d < spec.rank; ++d) {
        if (d == spec.contiguous_dim) continue;
        const int64_t bytes = t.strides[d] * elem;
        if (bytes % spec.align_bytes != 0)
          return invalid(detail::dim_label(c, spec, d) + " has stride " + std::to_string(t.strides[d]) +
                         " elements (" + std::to_string(bytes) + " bytes), not a multiple of " +
                         std::to_string(spec.align_bytes) + " bytes");
      }
    }
  }

  // The contract's own conditions on the problem.
  for (int i = 0; i < c.num_checks; ++i) {
    Value v;
    CUBINFORGE_TRY(evaluate(c.checks[i].expr, b.env(), &v));
    if (!v.nonzero()) return invalid(std::string(c.checks[i].message) + detail::symbol_values(c, b.symbols, c.checks[i].expr));
  }

  // Scalars: the caller's value, else the default, in the contract's order.
  for (int i = 0; i < num_scalars; ++i) {
    const int k = find_scalar(c, scalars[i].name);
    if (k < 0) return invalid("unknown scalar '" + std::string(scalars[i].name ? scalars[i].name : "") +
                              "' for variant " + c.variant);
    const double v = scalars[i].value;
    if (!std::isfinite(v))
      return invalid("scalar '" + std::string(c.scalars[k].name) + "' must be a finite number");
    if (c.scalars[k].type == ScalarType::f32) {
      b.scalars[k] = Value::real_value(v);
    } else {
      if (v != static_cast<double>(static_cast<int64_t>(v)))
        return invalid("scalar '" + std::string(c.scalars[k].name) + "' must be an integer");
      b.scalars[k] = Value::integer(static_cast<int64_t>(v));
    }
    b.scalar_bound[k] = true;
  }
  for (int k = 0; k < c.num_scalars; ++k) {
    if (b.scalar_bound[k]) continue;
    Value v;
    CUBINFORGE_TRY(evaluate(c.scalars[k].default_value, b.env(), &v));
    if (c.scalars[k].type == ScalarType::f32) v = Value::real_value(v.as_double());
    b.scalars[k] = v;
    b.scalar_bound[k] = true;
  }

  // The grid. A persistent kernel's grid reads the device's SM count: when the caller did not
  // pass it, read it off the current context's device (the one the launch will use).
  if (b.sm_count < 0 && detail::grid_uses_sm_count(c)) {
    int sms = 0;
    CUBINFORGE_TRY(current_sm_count(&sms));
    b.sm_count = sms;
  }
  static const int64_t kGridMax[3] = {2147483647, 65535, 65535};
  for (int d = 0; d < 3; ++d) {
    int64_t g = 0;
    CUBINFORGE_TRY(evaluate_int(c.grid[d], b.env(), &g));
    if (g < 1 || g > kGridMax[d])
      return invalid("grid dimension " + std::to_string(d) + " " + c.grid[d].text + " is " +
                     std::to_string(g) + "; it must be in 1.." + std::to_string(kGridMax[d]));
    b.grid[d] = static_cast<uint32_t>(g);
  }
  *out = b;
  return Status::Ok();
}

}  // namespace cubinforge
