// flash_attn_combine for a C++ host, as runtime/kvcache.py `flash_attn_combine` does it:
// out_partial float32 (num_splits, batch, seqlen_q, heads, d) and lse_partial float32
// (num_splits, batch, heads, seqlen_q) reduced into o (batch, seqlen_q, heads, d; its dtype
// picks the variant) and lse float32 (batch, heads, seqlen_q). A split with LSE -inf counts
// for nothing. Pre-packed like the kvcache plan (prepared.h): run() only launches.
#pragma once

#include <string>

#include "cubinforge/device.h"
#include "cubinforge/prepared.h"
#include "cubinforge/select.h"
#include "cubinforge/status.h"
#include "cubinforge/tensor.h"
#include "cubinforge/text.h"

namespace cubinforge {

struct CombineArgs {
  Tensor out_partial;  // float32 (num_splits, batch, seqlen_q, heads, d)
  Tensor lse_partial;  // float32 (num_splits, batch, heads, seqlen_q)
  Tensor o;            // (batch, seqlen_q, heads, d), bf16 or fp16
  Tensor lse;          // float32 (batch, heads, seqlen_q)
};

// flash_attn_combine's checks, in its order and words (the outputs: the loader allocates none).
inline Status check_combine(const CombineArgs& a) {
  const Tensor& op = a.out_partial;
  if (op.dtype != DType::f32 || op.rank != 5)
    return invalid(std::string("out_partial must be float32 (num_splits, batch, seqlen_q, heads, d); got ") +
                   dtype_name(op.dtype) + " " + py_shape(op));
  const int64_t want[4] = {op.shape[0], op.shape[1], op.shape[3], op.shape[2]};
  const Tensor& lp = a.lse_partial;
  if (lp.dtype != DType::f32 || lp.rank != 4 || lp.shape[0] != want[0] || lp.shape[1] != want[1] ||
      lp.shape[2] != want[2] || lp.shape[3] != want[3])
    return invalid("lse_partial must be float32 " + py_tuple(want, 4) + "; got " + dtype_name(lp.dtype) + " " +
                   py_shape(lp));
  if (!given(a.o) || !given(a.lse)) return invalid("CombineArgs.o and .lse are required: the loader allocates no outputs");
  return Status::Ok();
}

class CombinePlan;
inline Status prepare_combine(const Bundle& bundle, const std::string& bundle_dir, const CombineArgs& a,
                              CombinePlan* out);

class CombinePlan : public PreparedPlan {
 private:
  friend Status prepare_combine(const Bundle&, const std::string&, const CombineArgs&, CombinePlan*);
};

// Checks, selects the attn_combine variant (the device's arch, o's dtype, d), loads it and
// packs the launch (the contract checks o and lse). A context must be current.
inline Status prepare_combine(const Bundle& bundle, const std::string& bundle_dir, const CombineArgs& a,
                              CombinePlan* out) {
  CUBINFORGE_TRY(check_combine(a));
  std::string arch;
  CUBINFORGE_TRY(current_arch(&arch));
  Query q("attn_combine");
  q.set("arch", arch).set("dtype", dtype_name(a.o.dtype)).set("head_dim", static_cast<int>(a.out_partial.shape[4]));
  const Variant* v = nullptr;
  CUBINFORGE_TRY(select(bundle, q, &v));
  CombinePlan p;
  const Kernel* k = nullptr;
  CUBINFORGE_TRY(p.load(*v, bundle_dir, &k));
  CUBINFORGE_TRY(p.add(*k, {{"o_partial", a.out_partial}, {"lse_partial", a.lse_partial}, {"o", a.o}, {"lse", a.lse}},
                       {}));
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace cubinforge
