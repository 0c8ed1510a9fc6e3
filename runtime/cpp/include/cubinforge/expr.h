// A small stack machine for the contract's RPN expressions (grid, struct fields, scalar
// values and defaults, checks). Integers are exact 64-bit (overflow is an error, never a
// wrap); a value is real as soon as one operand is, exactly as in the Python runtime.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "cubinforge/contract.h"
#include "cubinforge/status.h"
#include "cubinforge/tensor.h"

namespace cubinforge {

struct Value {
  bool real = false;
  int64_t i = 0;
  double f = 0.0;

  static Value integer(int64_t v) { return Value{false, v, 0.0}; }
  static Value real_value(double v) { return Value{true, 0, v}; }
  double as_double() const { return real ? f : static_cast<double>(i); }
  bool nonzero() const { return real ? f != 0.0 : i != 0; }
};

// What an expression can read: the bound symbols, the scalars' values and the tensors, each
// indexed as in the Contract's tables (the renderer resolved the names to these indices).
struct Env {
  const int64_t* symbols = nullptr;
  const bool* symbol_bound = nullptr;  // optional: reading an unbound symbol is an error
  const Value* scalars = nullptr;
  const bool* scalar_bound = nullptr;  // optional: scalars are evaluated in order
  const Tensor* const* tensors = nullptr;
  int num_symbols = 0, num_scalars = 0, num_tensors = 0;
  int64_t sm_count = -1;  // the launching device's multiprocessors; -1: not known
};

constexpr double kLog2e = 1.4426950408889634;
constexpr int kMaxExprStack = 32;

namespace detail {

inline int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

inline int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

inline Status expr_error(const Expr& e, const std::string& what) {
  return invalid("expression " + std::string(e.text ? e.text : "?") + ": " + what);
}

inline Status apply_binary(const Expr& e, const Token& t, Value a, Value b, Value* out) {
  const bool real = a.real || b.real;
  const double x = a.as_double(), y = b.as_double();
  switch (t.op) {
    case Op::Add:
    case Op::Sub:
    case Op::Mul: {
      if (real) {
        *out = Value::real_value(t.op == Op::Add ? x + y : t.op == Op::Sub ? x - y : x * y);
        return Status::Ok();
      }
      int64_t r = 0;
      bool overflow = t.op == Op::Add   ? __builtin_add_overflow(a.i, b.i, &r)
                      : t.op == Op::Sub ? __builtin_sub_overflow(a.i, b.i, &r)
                                        : __builtin_mul_overflow(a.i, b.i, &r);
      if (overflow) return expr_error(e, std::string("64-bit overflow at '") + t.text + "'");
      *out = Value::integer(r);
      return Status::Ok();
    }
    case Op::Div:  // real division, always
      if (y == 0.0) return expr_error(e, "division by zero");
      *out = Value::real_value(x / y);
      return Status::Ok();
    case Op::FloorDiv:
    case Op::CeilDiv:
    case Op::Mod:
      if (y == 0.0) return expr_error(e, std::string("division by zero at '") + t.text + "'");
      if (real) {
        const double q = t.op == Op::CeilDiv ? std::ceil(x / y) : std::floor(x / y);
        *out = Value::real_value(t.op == Op::Mod ? x - std::floor(x / y) * y : q);
      } else if (a.i == INT64_MIN && b.i == -1) {
        return expr_error(e, "64-bit overflow in division");
      } else if (t.op == Op::FloorDiv) {
        *out = Value::integer(floor_div(a.i, b.i));
      } else if (t.op == Op::CeilDiv) {
        *out = Value::integer(-floor_div(-a.i, b.i));  // ceil(a/b) = -floor(-a/b)
      } else {
        *out = Value::integer(floor_mod(a.i, b.i));  // sign of the divisor, as in Python
      }
      return Status::Ok();
    case Op::Min:
    case Op::Max: {
      const bool a_less = real ? x < y : a.i < b.i;
      const bool b_less = real ? y < x : b.i < a.i;
      const bool take_a = t.op == Op::Min ? !b_less : !a_less;
      const Value& v = take_a ? a : b;
      *out = real ? Value::real_value(v.as_double()) : v;
      return Status::Ok();
    }
    case Op::Eq: *out = Value::integer(real ? x == y : a.i == b.i); return Status::Ok();
    case Op::Ne: *out = Value::integer(real ? x != y : a.i != b.i); return Status::Ok();
    case Op::Lt: *out = Value::integer(real ? x < y : a.i < b.i); return Status::Ok();
    case Op::Le: *out = Value::integer(real ? x <= y : a.i <= b.i); return Status::Ok();
    default: return expr_error(e, "not a binary operator");
  }
}

}  // namespace detail

inline bool is_binary(Op op) { return op >= Op::Add && op <= Op::Mod; }
inline bool is_unary(Op op) { return op == Op::Rsqrt || op == Op::Log2eMul; }

inline Status evaluate(const Expr& e, const Env& env, Value* out) {
  Value stack[kMaxExprStack];
  int top = 0;
  for (int k = 0; k < e.count; ++k) {
    const Token& t = e.tokens[k];
    if (is_binary(t.op)) {
      if (top < 2) return detail::expr_error(e, std::string("'") + t.text + "' needs two operands");
      Value r;
      CUBINFORGE_TRY(detail::apply_binary(e, t, stack[top - 2], stack[top - 1], &r));
      stack[top - 2] = r;
      --top;
      continue;
    }
    if (is_unary(t.op)) {
      if (top < 1) return detail::expr_error(e, std::string("'") + t.text + "' needs an operand");
      const double x = stack[top - 1].as_double();
      if (t.op == Op::Rsqrt) {
        if (!(x > 0.0)) return detail::expr_error(e, "rsqrt of a non-positive value");
        stack[top - 1] = Value::real_value(1.0 / std::sqrt(x));
      } else {
        stack[top - 1] = Value::real_value(x * kLog2e);
      }
      continue;
    }
    if (top == kMaxExprStack) return detail::expr_error(e, "stack overflow");
    Value v;
    switch (t.op) {
      case Op::Int: v = Value::integer(t.ival); break;
      case Op::Real: v = Value::real_value(t.fval); break;
      case Op::Symbol:
        if (t.index < 0 || t.index >= env.num_symbols || env.symbols == nullptr)
          return detail::expr_error(e, std::string("unknown symbol '") + t.text + "'");
        if (env.symbol_bound != nullptr && !env.symbol_bound[t.index])
          return detail::expr_error(e, std::string("symbol '") + t.text + "' is not bound");
        v = Value::integer(env.symbols[t.index]);
        break;
      case Op::SmCount:
        if (env.sm_count < 0) return detail::expr_error(e, "sm_count needs the launching device");
        v = Value::integer(env.sm_count);
        break;
      case Op::Scalar:
        if (t.index < 0 || t.index >= env.num_scalars || env.scalars == nullptr)
          return detail::expr_error(e, std::string("unknown scalar '") + t.text + "'");
        if (env.scalar_bound != nullptr && !env.scalar_bound[t.index])
          return detail::expr_error(e, std::string("scalar '") + t.text + "' is not set yet");
        v = env.scalars[t.index];
        break;
      case Op::TensorPtr:
      case Op::TensorShape:
      case Op::TensorStride: {
        if (t.index < 0 || t.index >= env.num_tensors || env.tensors == nullptr ||
            env.tensors[t.index] == nullptr)
          return detail::expr_error(e, std::string("tensor of '") + t.text + "' is not given");
        const Tensor& tensor = *env.tensors[t.index];
        if (t.op == Op::TensorPtr) {
          v = Value::integer(static_cast<int64_t>(tensor.ptr));  // the bit pattern of the address
        } else {
          if (t.dim < 0 || t.dim >= tensor.rank)
            return detail::expr_error(e, std::string("'") + t.text + "': no such dimension");
          v = Value::integer(t.op == Op::TensorShape ? tensor.shape[t.dim] : tensor.strides[t.dim]);
        }
        break;
      }
      default: return detail::expr_error(e, "bad token");
    }
    stack[top++] = v;
  }
  if (top != 1)
    return detail::expr_error(e, "leaves " + std::to_string(top) + " values on the stack, not 1");
  *out = stack[0];
  return Status::Ok();
}

// An expression that must give an integer (grid sizes, i32/i64/ptr fields).
inline Status evaluate_int(const Expr& e, const Env& env, int64_t* out) {
  Value v;
  CUBINFORGE_TRY(evaluate(e, env, &v));
  if (v.real)
    return detail::expr_error(e, "gives a real number where an integer is needed");
  *out = v.i;
  return Status::Ok();
}

}  // namespace cubinforge
