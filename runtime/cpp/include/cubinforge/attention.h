// flash_attn_func for a C++ host: dense attention, routed as runtime/attention.py `prepare`
// routes it. select() with the problem's sizes and the device's SM count picks the variant
// and its launch parameters (dispatch rules `decode-split-kv`: num_splits = decode_splits,
// `decode-pack-hd64` and `decode-pack-gqa`); a decode-shaped problem the rules send to a split-KV / pack-GQA
// form runs through prepare_kvcache (kvcache.h) with the dense k/v as a full cache (every
// sequence sees all seqlen_k keys), num_splits and pack_gqa as the dispatcher chose them,
// as attention._prepare_decode does: forward into split partials, then the combine (or the
// unsplit pack-GQA form alone). Any other problem is one launch of the chosen variant.
//
// Pre-packed like the kvcache plan (prepared.h): prepare_attention binds and packs every
// launch once, AttentionPlan::run only launches (one cuLaunchKernelEx each), so a CUDA graph
// can capture it. What must not change between runs: every buffer's address and shape (q, k,
// v, o, lse, learnable_sink), the scalars and the device; the contents may.
#pragma once

#include <cuda.h>

#include <string>
#include <utility>
#include <vector>

#include "cubinforge/device.h"
#include "cubinforge/kvcache.h"
#include "cubinforge/prepared.h"
#include "cubinforge/select.h"
#include "cubinforge/status.h"
#include "cubinforge/tensor.h"
#include "cubinforge/text.h"
#include "cubinforge/variants.h"

namespace cubinforge {

struct AttentionArgs {
  Tensor q;                  // (batch, seqlen_q, heads_q, d)
  Tensor k, v;               // (batch, seqlen_k, heads_kv, d) / (.., d_v)
  Tensor o;                  // (batch, seqlen_q, heads_q, d_v)
  Tensor lse;                // float32 (batch, heads_q, seqlen_q)
  bool causal = false;
  bool has_softmax_scale = false;
  double softmax_scale = 0;  // default 1/sqrt(d)
  ModelArgs model;           // window_size, softcap, learnable_sink (variants.h)
  // false: the plain kernel whatever the shape (Python's plan_attention, forms=False).
  bool forms = true;
};

// What prepare_attention chose, without the driver (tests compare it with Python's choice).
struct AttentionChoice {
  const Variant* variant = nullptr;  // the dispatcher's choice
  int64_t num_splits = 1;            // its num_splits launch parameter (1: none handed out)
  bool decode = false;               // a split-KV / pack-GQA form: the kvcache path launches
  KVCacheChoice forms;               // what that path runs (forward, combine, split plan), when decode
};

// attention.is_decode_form: a split-KV / pack-GQA form, launched through the kvcache path.
inline bool is_decode_form(const Variant& v) {
  const char* split = axis_value(v, "split_kv");
  const char* pack = axis_value(v, "pack_gqa");
  return (split && std::string(split) == "true") || (pack && std::string(pack) == "true");
}

// attention.choose_attention_variant, then _prepare_decode's kvcache choice. `sizes` as the
// dispatcher takes them (sm_count -1: the decode rules cannot apply); `head_dim_v` -1: as
// head_dim. `forms` false asks for the plain kernel (split_kv = pack_gqa = false).
inline Status choose_attention(const Bundle& bundle, const std::string& arch, const char* dtype, int head_dim,
                               int head_dim_v, const ModelVariant& mv, const ProblemSizes& sizes, bool forms,
                               AttentionChoice* out) {
  *out = AttentionChoice();
  Query q = attention_query(arch, dtype, head_dim, mv);
  if (head_dim_v >= 0) q.set("head_dim_v", head_dim_v);
  if (!forms) q.set("split_kv", false).set("pack_gqa", false);
  SelectedParams params;
  CUBINFORGE_TRY(select(bundle, q, sizes, &out->variant, nullptr, &params));
  for (const auto& p : params)
    if (p.first == "num_splits") out->num_splits = p.second;
  out->decode = is_decode_form(*out->variant);
  if (!out->decode) return Status::Ok();
  const char* split = axis_value(*out->variant, "split_kv");
  const char* pack = axis_value(*out->variant, "pack_gqa");
  const bool splits = split && std::string(split) == "true";
  return choose_kvcache(bundle, arch, dtype, head_dim, mv.causal, /*paged=*/false, sizes.batch, sizes.seqlen_q,
                        sizes.heads_q, sizes.heads_kv, sizes.seqlen_k, sizes.sm_count,
                        splits ? static_cast<int>(out->num_splits) : 1, pack && std::string(pack) == "true" ? 1 : 0,
                        &out->forms, &mv);
}

class AttentionPlan;
inline Status prepare_attention(const Bundle& bundle, const std::string& bundle_dir, const AttentionArgs& a,
                                AttentionPlan* out, CUstream stream = nullptr);

// A prepared dense call: one launch of the plain kernel, or the decode route's [forward,
// combine]. run() launches them and nothing else. The decode route's buffers (split
// partials, the key counts) were allocated and written on the stream it was prepared with:
// run it there, or order that stream first.
class AttentionPlan : public PreparedPlan {
 public:
  const AttentionChoice& choice() const { return choice_; }
  // The split count the launches use (1 unless the split-KV form runs).
  int num_splits() const { return choice_.decode ? choice_.forms.plan.num_splits : 1; }

 private:
  friend Status prepare_attention(const Bundle&, const std::string&, const AttentionArgs&, AttentionPlan*, CUstream);
  AttentionChoice choice_;
};

// flash_attn_func's host checks that come before the variant, in its words: the model
// arguments, q/k/v ranks and heads, the sink (its stride is left to the contract, as
// Python's), the outputs. The chosen variant's contract checks the rest at bind.
inline Status check_attention(const AttentionArgs& a, ModelVariant* mv) {
  CUBINFORGE_TRY(resolve_variant(a.causal, a.model, mv));  // flash_attn_func's order: the variant arguments first
  const std::pair<const char*, const Tensor*> qkv[] = {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}};
  for (const auto& [n, t] : qkv)
    if (t->rank != 4)
      return invalid(std::string(n) + " must be (batch, seqlen, heads, head_dim); got " + std::to_string(t->rank) +
                     " dims " + py_shape(*t));
  const int64_t hq = a.q.shape[2], hkv = a.k.shape[2];
  if ((hkv == 0 && hq != 0) || (hkv && hq % hkv))
    return invalid("heads_q (" + std::to_string(hq) + ") must be a multiple of heads_kv (" + std::to_string(hkv) +
                   ") (GQA/MQA)");
  CUBINFORGE_TRY(check_sink(a.model.learnable_sink, hq, false));
  if (!given(a.o) || !given(a.lse)) return invalid("AttentionArgs.o and .lse are required: the loader allocates no outputs");
  return Status::Ok();
}

// Checks, chooses for the current device (its arch and SM count), loads and packs. A
// context must be current.
inline Status prepare_attention(const Bundle& bundle, const std::string& bundle_dir, const AttentionArgs& a,
                                AttentionPlan* out, CUstream stream) {
  ModelVariant mv;
  CUBINFORGE_TRY(check_attention(a, &mv));
  std::string arch;
  CUBINFORGE_TRY(current_arch(&arch));
  ProblemSizes sizes;
  sizes.batch = a.q.shape[0], sizes.seqlen_q = a.q.shape[1], sizes.seqlen_k = a.k.shape[1];
  sizes.heads_q = a.q.shape[2], sizes.heads_kv = a.k.shape[2];
  // As Python: the SM count (and so the decode rules) only for a problem with work to do.
  const bool empty = sizes.batch == 0 || sizes.seqlen_q == 0 || sizes.heads_q == 0 || sizes.seqlen_k == 0;
  if (a.forms && !empty) {
    int sms = 0;
    CUBINFORGE_TRY(current_sm_count(&sms));
    sizes.sm_count = sms;
  }
  AttentionPlan p;
  CUBINFORGE_TRY(choose_attention(bundle, arch, dtype_name(a.q.dtype), static_cast<int>(a.q.shape[3]),
                                  static_cast<int>(a.v.shape[3]), mv, sizes, a.forms, &p.choice_));
  if (p.choice_.decode) {
    // The kvcache path, one home for the split / combine launches and their buffers.
    KVCacheArgs kv;
    kv.q = a.q, kv.k_cache = a.k, kv.v_cache = a.v, kv.o = a.o, kv.lse = a.lse;
    kv.causal = a.causal, kv.model = a.model;
    kv.num_splits = p.choice_.forms.combine ? p.choice_.forms.plan.num_splits : 1;
    kv.pack_gqa = p.choice_.forms.plan.pack_gqa ? 1 : 0;
    kv.has_softmax_scale = a.has_softmax_scale, kv.softmax_scale = a.softmax_scale;
    KVCachePlan plan;
    CUBINFORGE_TRY(prepare_kvcache(bundle, bundle_dir, kv, &plan, stream));
    if (plan.choice().forward != p.choice_.forms.forward || plan.choice().plan.num_splits != p.num_splits())
      return invalid("dense decode route: prepare_kvcache chose " + std::string(plan.choice().forward->name) +
                     " with " + std::to_string(plan.choice().plan.num_splits) + " splits, the dispatcher " +
                     p.choice_.forms.forward->name + " with " + std::to_string(p.num_splits()));
    static_cast<PreparedPlan&>(p) = std::move(static_cast<PreparedPlan&>(plan));  // its kernels, buffers, launches
    *out = std::move(p);
    return Status::Ok();
  }
  const Kernel* k = nullptr;
  CUBINFORGE_TRY(p.load(*p.choice_.variant, bundle_dir, &k));
  std::vector<NamedTensor> t = {{"q", a.q}, {"k", a.k}, {"v", a.v}, {"o", a.o}, {"lse", a.lse}};
  if (given(a.model.learnable_sink)) t.push_back({"learnable_sink", a.model.learnable_sink});
  std::vector<NamedScalar> scalars = mv.scalars();
  if (a.has_softmax_scale) scalars.push_back({"softmax_scale", a.softmax_scale});
  CUBINFORGE_TRY(p.add(*k, t, scalars));
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace cubinforge
