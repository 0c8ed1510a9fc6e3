// The C++ side of examples/cpp/compare_inference_with_python.py, as a shared library the
// Python process loads (ctypes): every entry point of the loader (dense attention,
// flash_attn_with_kvcache, flash_attn_varlen_func, flash_attn_combine) run on device
// tensors the caller already holds, so one process and one build compare a whole matrix
// with no host copies and no files.
//
//   int cubinforge_check_run(const char* request, int launch, char* reply, int reply_bytes)
//
// request: a header line, then "t NAME DTYPE PTR RANK SHAPE... STRIDES..." lines (strides in
// elements), then "end":
//   dense CAUSAL MODEL                       (tensors q k v o lse; routed as flash_attn_func: a
//                                             decode-shaped call runs split-KV + combine)
//   kvcache NUM_SPLITS PACK_GQA CAUSAL MODEL (q k_cache v_cache o lse, optional k v cache_seqlens
//                                             cache_batch_idx page_table: a page_table makes it paged)
//   varlen NUM_SPLITS PACK_GQA CAUSAL MODEL  (q k v cu_seqlens_q o lse, optional cu_seqlens_k
//                                             seqused_q seqused_k page_table)
//   combine                                  (out_partial lse_partial o lse)
// MODEL is "WINDOW_LEFT WINDOW_RIGHT SOFTCAP_BITS": window_size and softcap, the softcap as its
// IEEE-754 bits (an integer: exact, and no locale in the parse); dense, kvcache and varlen
// also take an optional learnable_sink tensor.
// launch 0 only runs the host checks (no driver: the CPU tests validate the matrix with
// it); 1 also prepares, runs on the legacy stream and synchronises. reply: "ok KERNELS
// SPLITS" (kernels comma-separated, "-" for none) or "error MESSAGE". Returns 0 for ok.
#include <cuda.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"

#ifndef CUBINFORGE_BUNDLE_DIR
#define CUBINFORGE_BUNDLE_DIR "."
#endif

namespace cf = cubinforge;

namespace {

bool parse_dtype(const std::string& s, cf::DType* out) {
  for (cf::DType d : {cf::DType::bf16, cf::DType::fp16, cf::DType::e4m3, cf::DType::f32, cf::DType::i32})
    if (s == cf::dtype_name(d)) { *out = d; return true; }
  return false;
}

// The request's words, split on whitespace, with numbers read by strtoll/strtoull: plain C,
// so the parse needs no iostream locale facets from the host process (the H200 run's
// parse failed under the C++ streams, check6/).
struct Words {
  std::vector<std::string> w;
  size_t at = 0;
  bool ok = true;
  explicit Words(const char* text) {
    for (const char* p = text; *p;) {
      while (*p && std::isspace(static_cast<unsigned char>(*p))) ++p;
      const char* b = p;
      while (*p && !std::isspace(static_cast<unsigned char>(*p))) ++p;
      if (p > b) w.emplace_back(b, p);
    }
  }
  bool more() const { return at < w.size(); }
  std::string word() {
    if (at < w.size()) return w[at++];
    ok = false;
    return std::string();
  }
  long long integer() {
    const std::string s = word();
    char* end = nullptr;
    const long long v = s.empty() ? 0 : std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0') ok = false;
    return v;
  }
  // A double sent as its IEEE-754 bits.
  double bits() {
    const unsigned long long b = address();
    double v = 0;
    std::memcpy(&v, &b, sizeof v);
    return v;
  }
  unsigned long long address() {
    const std::string s = word();
    char* end = nullptr;
    const unsigned long long v = s.empty() ? 0 : std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0') ok = false;
    return v;
  }
};

cf::Status parse_tensors(Words& in, std::map<std::string, cf::Tensor>* out) {
  std::string tok;
  while (in.more() && (tok = in.word()) != "end") {
    if (tok != "t") return cf::invalid("request: expected a 't NAME ...' line or 'end', got '" + tok + "'");
    const std::string name = in.word(), dtype = in.word();
    const unsigned long long ptr = in.address();
    const long long rank = in.integer();
    cf::Tensor x;
    if (!in.ok || rank < 0 || rank > cf::kMaxRank || !parse_dtype(dtype, &x.dtype))
      return cf::invalid("request: bad tensor line for '" + name + "' (dtype '" + dtype + "')");
    x.ptr = ptr, x.rank = static_cast<int>(rank);
    for (int i = 0; i < x.rank; ++i) x.shape[i] = in.integer();
    for (int i = 0; i < x.rank; ++i) x.strides[i] = in.integer();
    if (!in.ok) return cf::invalid("request: tensor '" + name + "' is missing shape or strides");
    (*out)[name] = x;
  }
  if (tok != "end") return cf::invalid("request: no 'end' line");
  return cf::Status::Ok();
}

cf::Tensor get(std::map<std::string, cf::Tensor>& t, const char* name) {
  auto it = t.find(name);
  return it == t.end() ? cf::Tensor() : it->second;
}

std::string names(const cf::PreparedPlan& p) {
  std::string s;
  for (const std::string& n : p.kernels()) s += (s.empty() ? "" : ",") + n;
  return s.empty() ? "-" : s;
}

cf::Status context() {
  static CUcontext ctx = nullptr;  // the primary context, retained once for the process
  if (ctx == nullptr) CUBINFORGE_TRY(cf::init_primary_context(0, &ctx));
  return cf::check_cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

cf::Status run_plan(const cf::PreparedPlan& p) {
  CUBINFORGE_TRY(p.run(nullptr));
  return cf::check_cu(cuCtxSynchronize(), "cuCtxSynchronize (the kernels)");
}

cf::Status dense(std::map<std::string, cf::Tensor>& t, bool causal, const cf::ModelArgs& model, bool launch,
                 std::string* reply) {
  cf::AttentionArgs a;
  a.q = get(t, "q"), a.k = get(t, "k"), a.v = get(t, "v"), a.o = get(t, "o"), a.lse = get(t, "lse");
  a.causal = causal, a.model = model, a.model.learnable_sink = get(t, "learnable_sink");
  if (!launch) {
    cf::ModelVariant mv;
    return cf::check_attention(a, &mv);
  }
  CUBINFORGE_TRY(context());
  // The dispatcher's choice with the device's SM count, as flash_attn_func: a decode-shaped
  // call runs the split-KV form and the combine.
  cf::AttentionPlan p;
  CUBINFORGE_TRY(cf::prepare_attention(cubinforge_bundle::kBundle, CUBINFORGE_BUNDLE_DIR, a, &p));
  CUBINFORGE_TRY(run_plan(p));
  *reply = names(p) + " " + std::to_string(p.num_splits());
  return cf::Status::Ok();
}

cf::Status kvcache(std::map<std::string, cf::Tensor>& t, int splits, int pack, bool causal, const cf::ModelArgs& model,
                   bool launch, std::string* reply) {
  cf::KVCacheArgs a;
  a.q = get(t, "q"), a.k_cache = get(t, "k_cache"), a.v_cache = get(t, "v_cache"), a.k = get(t, "k");
  a.v = get(t, "v"), a.cache_seqlens = get(t, "cache_seqlens"), a.cache_batch_idx = get(t, "cache_batch_idx");
  a.page_table = get(t, "page_table"), a.paged = cf::given(a.page_table), a.o = get(t, "o"), a.lse = get(t, "lse");
  a.causal = causal, a.num_splits = splits, a.pack_gqa = pack;
  a.model = model, a.model.learnable_sink = get(t, "learnable_sink");
  if (!launch) {
    cf::KVCacheShape s;
    const cf::Bundle& bundle = cubinforge_bundle::kBundle;  // a bundle rendered without one: none to check against
    const cf::DecodePlanConstants* dp = bundle.decode_plan;
    return cf::check_kvcache(a, dp != nullptr ? dp->max_splits : 128, &s);
  }
  CUBINFORGE_TRY(context());
  cf::KVCachePlan p;
  CUBINFORGE_TRY(cf::prepare_kvcache(cubinforge_bundle::kBundle, CUBINFORGE_BUNDLE_DIR, a, &p));
  CUBINFORGE_TRY(run_plan(p));
  *reply = names(p) + " " + std::to_string(p.choice().plan.num_splits);
  return cf::Status::Ok();
}

cf::Status varlen(std::map<std::string, cf::Tensor>& t, int splits, int pack, bool causal, const cf::ModelArgs& model,
                  bool launch, std::string* reply) {
  cf::VarlenArgs a;
  a.q = get(t, "q"), a.k = get(t, "k"), a.v = get(t, "v"), a.cu_seqlens_q = get(t, "cu_seqlens_q");
  a.cu_seqlens_k = get(t, "cu_seqlens_k"), a.seqused_q = get(t, "seqused_q"), a.seqused_k = get(t, "seqused_k");
  a.page_table = get(t, "page_table"), a.o = get(t, "o"), a.lse = get(t, "lse");
  a.causal = causal, a.num_splits = splits, a.pack_gqa = pack;
  a.model = model, a.model.learnable_sink = get(t, "learnable_sink");
  if (!launch) {
    cf::VarlenShape s;
    return cf::check_varlen(a, &s);
  }
  CUBINFORGE_TRY(context());
  cf::VarlenPlan p;
  CUBINFORGE_TRY(cf::prepare_varlen(cubinforge_bundle::kBundle, CUBINFORGE_BUNDLE_DIR, a, &p));
  CUBINFORGE_TRY(run_plan(p));
  *reply = names(p) + " 1";
  return cf::Status::Ok();
}

cf::Status combine(std::map<std::string, cf::Tensor>& t, bool launch, std::string* reply) {
  cf::CombineArgs a;
  a.out_partial = get(t, "out_partial"), a.lse_partial = get(t, "lse_partial"), a.o = get(t, "o");
  a.lse = get(t, "lse");
  if (!launch) return cf::check_combine(a);
  CUBINFORGE_TRY(context());
  cf::CombinePlan p;
  CUBINFORGE_TRY(cf::prepare_combine(cubinforge_bundle::kBundle, CUBINFORGE_BUNDLE_DIR, a, &p));
  CUBINFORGE_TRY(run_plan(p));
  *reply = names(p) + " " + std::to_string(a.out_partial.shape[0]);
  return cf::Status::Ok();
}

}  // namespace

extern "C" int cubinforge_check_run(const char* request, int launch, char* reply, int reply_bytes) {
  Words in(request ? request : "");
  std::string out = "- 0";
  const std::string kind = in.word();
  int splits = 0, pack = -1, causal = 0;
  cf::ModelArgs model;
  if (kind == "kvcache" || kind == "varlen") {
    splits = static_cast<int>(in.integer()), pack = static_cast<int>(in.integer());
  }
  if (kind == "kvcache" || kind == "varlen" || kind == "dense") {
    causal = static_cast<int>(in.integer());
    model.window_left = in.integer(), model.window_right = in.integer(), model.softcap = in.bits();
  }
  std::map<std::string, cf::Tensor> t;
  cf::Status st = in.ok ? parse_tensors(in, &t) : cf::invalid("request: bad header line for '" + kind + "'");
  if (st.ok()) {
    if (kind == "dense") st = dense(t, causal != 0, model, launch != 0, &out);
    else if (kind == "kvcache") st = kvcache(t, splits, pack, causal != 0, model, launch != 0, &out);
    else if (kind == "varlen") st = varlen(t, splits, pack, causal != 0, model, launch != 0, &out);
    else if (kind == "combine") st = combine(t, launch != 0, &out);
    else st = cf::invalid("request: unknown entry point '" + kind + "' (dense, kvcache, varlen, combine)");
  }
  const std::string text = st.ok() ? "ok " + out : "error " + st.to_string();
  if (reply && reply_bytes > 0) std::snprintf(reply, static_cast<size_t>(reply_bytes), "%s", text.c_str());
  return st.ok() ? 0 : 1;
}
