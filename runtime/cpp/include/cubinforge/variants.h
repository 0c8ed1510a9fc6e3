// FlashAttention's model-variant arguments (window_size, softcap, learnable_sink) -> the axes
// a variant is selected by and the scalars its contract takes: runtime/variants.py `resolve`,
// the one C++ home of that rule. The dense path (attention_query with a ModelVariant), the
// kvcache and the varlen entry points all resolve through here.
//
// The conventions are FlashAttention's: window (left, right) with -1 (any negative) unbounded,
// aligned bottom-right like causal; causal=true is the window (left, 0); a window (-1, 0) is
// causal; softcap 0 is off; learnable_sink is one natural-log logit per query head, float32
// (heads_q,).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cubinforge/select.h"
#include "cubinforge/status.h"
#include "cubinforge/tensor.h"
#include "cubinforge/text.h"

namespace cubinforge {

// The model-variant arguments as a caller passes them (FlashAttention's names and defaults).
struct ModelArgs {
  int64_t window_left = -1, window_right = -1;  // window_size = (left, right)
  double softcap = 0;                           // > 0: softcap * tanh(s / softcap)
  Tensor learnable_sink;                        // optional float32 (heads_q,); absent while rank 0
};

// What resolve_variant made of them: the variant axes and the contract's scalars.
struct ModelVariant {
  bool causal = false, local = false, softcap = false, learnable_sink = false;
  int64_t window_left = -1, window_right = -1;  // scalars, when local
  double softcap_value = 0;                     // scalar, when softcap

  // Sets the axes to select by besides (arch, dtype, head_dim): causal and the model axes.
  Query& apply(Query& q) const {
    return q.set("causal", causal).set("local", local).set("softcap", softcap).set("learnable_sink", learnable_sink);
  }
  // The scalars the variant's contract takes (VariantArgs.scalars).
  std::vector<NamedScalar> scalars() const {
    std::vector<NamedScalar> s;
    if (local) s.push_back({"window_left", static_cast<double>(window_left)}), s.push_back({"window_right", static_cast<double>(window_right)});
    if (softcap) s.push_back({"softcap", softcap_value});
    return s;
  }
  bool any() const { return local || softcap || learnable_sink; }
  // " and local=True, softcap=True" (kvcache._model_text), or "" when none is on.
  std::string text() const {
    std::string s;
    const std::pair<const char*, bool> on[] = {{"local", local}, {"softcap", softcap}, {"learnable_sink", learnable_sink}};
    for (const auto& [name, set] : on)
      if (set) s += std::string(s.empty() ? "" : ", ") + name + "=True";
    return s.empty() ? s : " and " + s;
  }
};

// runtime/variants.py resolve: checks the arguments and says which variant serves them.
inline Status resolve_variant(bool causal, int64_t window_left, int64_t window_right, double softcap, bool has_sink,
                              ModelVariant* out) {
  *out = ModelVariant();
  int64_t left = std::max<int64_t>(window_left, -1), right = std::max<int64_t>(window_right, -1);
  if (causal) right = 0;
  bool local = false;
  if (left < 0 && right < 0) {
    // no window
  } else if (left < 0 && right == 0) {
    causal = true;  // FlashAttention's causal
  } else {
    causal = false, local = true;
  }
  if (!std::isfinite(softcap) || softcap < 0)
    return invalid("softcap must be finite and >= 0 (0 turns it off), got " + py_float(softcap));
  out->causal = causal, out->local = local, out->softcap = softcap > 0, out->learnable_sink = has_sink;
  if (local) out->window_left = left, out->window_right = right;
  if (softcap > 0) out->softcap_value = softcap;
  return Status::Ok();
}

inline Status resolve_variant(bool causal, const ModelArgs& m, ModelVariant* out) {
  return resolve_variant(causal, m.window_left, m.window_right, m.softcap, given(m.learnable_sink), out);
}

// The learnable sink, where given: float32 (heads_q,), one logit per query head; `contiguous`:
// also stride 1 (kvcache.check_sink; flash_attn_func leaves the stride to the contract).
inline Status check_sink(const Tensor& sink, int64_t heads_q, bool contiguous = true) {
  if (!given(sink)) return Status::Ok();
  if (sink.dtype != DType::f32 || sink.rank != 1 || sink.shape[0] != heads_q)
    return invalid("learnable_sink must be float32 (heads_q,) = (" + std::to_string(heads_q) + ",); got " +
                   dtype_name(sink.dtype) + " " + py_shape(sink));
  if (contiguous && heads_q > 1 && sink.strides[0] != 1)
    return invalid("learnable_sink must be contiguous (stride 1); its stride is " + std::to_string(sink.strides[0]));
  return Status::Ok();
}

// The dense attention query for a resolved variant (its causal replaces the argument's).
inline Query attention_query(const std::string& arch, const std::string& dtype, int head_dim, const ModelVariant& v) {
  Query q = attention_query(arch, dtype, head_dim, v.causal);
  return v.apply(q);
}

}  // namespace cubinforge
