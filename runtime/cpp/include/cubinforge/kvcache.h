// flash_attn_with_kvcache for a C++ host: attention of q against a dense or paged KV cache
// through the bundle's inference forms (split-KV + the attn_combine family, pack-GQA, paged
// KV), as runtime/kvcache.py `prepare_kvcache` does it, with the same checks in the same
// order and the same words (check_kvcache; tests/test_cpp_inference.py compares them):
//  - new k/v are first written into the cache at cache_seqlens by the kv_append family, and
//    attention then sees cache_seqlens + seqlen_new keys;
//  - cache_batch_idx (row b of q reads cache row cache_batch_idx[b] of a dense cache) runs
//    on the paged forms: the dense cache is pages of seqlen_cache rows, cache_batch_idx the
//    page table viewed as (batch, 1);
//  - pages that are not a multiple of 16 rows are gathered into a dense cache (kv_gather)
//    first: correct, not fast;
//  - window_size, softcap and learnable_sink (KVCacheArgs.model) resolve as in Python
//    (variants.h) and choose forms with exactly those model axes.
// The forms are tried in kvcache._pick's order (the asked causal first, for one query token
// either; auto pack-GQA first, then the other), each chosen by select() with the bundle's
// dispatcher preferences; the split count is the decode plan's (decode.h) with the chosen
// form's tiles. The Python runtime makes the same choice for the same problem and device, so
// both launch the same kernels with the same parameters (tests/test_cpp_kvcache.py on the
// CPU; examples/cpp/compare_kvcache_with_python.py on a GPU).
//
// The plan is pre-packed (prepared.h): prepare_kvcache binds every launch and packs its
// parameters once; KVCachePlan::run only launches, so a CUDA graph can capture it. What must
// not change between runs: every buffer's address and shape (q, k_cache, v_cache, k, v,
// cache_seqlens, cache_batch_idx, page_table, o, lse, learnable_sink), the scalars
// (softmax_scale, causal, num_splits, pack_gqa, window, softcap) and the current device. What may change: the contents (new q and k/v
// values, cache_seqlens values within the capacity, page_table / cache_batch_idx entries).
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cubinforge/bind.h"
#include "cubinforge/decode.h"
#include "cubinforge/device.h"
#include "cubinforge/module.h"
#include "cubinforge/prepared.h"
#include "cubinforge/select.h"
#include "cubinforge/status.h"
#include "cubinforge/tensor.h"
#include "cubinforge/text.h"
#include "cubinforge/variants.h"

namespace cubinforge {

constexpr int64_t kPageChunk = 16;  // paged forms load pages in boxes of this many rows (kvcache.PAGE_CHUNK)

// The optional tensors are absent while their rank is 0 (a default Tensor).
struct KVCacheArgs {
  Tensor q;                  // (batch, seqlen_q, heads_q, d)
  Tensor k_cache, v_cache;   // dense (batch_cache, seqlen_cache, heads_kv, d) or paged (num_pages, page_size, heads_kv, d)
  Tensor k, v;               // optional: new tokens (batch, seqlen_new, heads_kv, d), appended at cache_seqlens first
  Tensor cache_seqlens;      // int32 (batch,): keys per sequence, on the device; optional:
  int64_t cache_seqlens_value = -1;  // without the tensor: this many keys in every sequence (-1: the capacity)
  Tensor cache_batch_idx;    // optional int32 (batch,): the dense cache row of each sequence
  bool paged = false;
  Tensor page_table;         // int32 (batch, max_pages) when paged
  Tensor o;                  // like q
  Tensor lse;                // float32 (batch, heads_q, seqlen_q)
  bool causal = true;
  int num_splits = 0;        // 0: auto (the decode plan), 1: never split, n: n splits
  int pack_gqa = -1;         // -1: auto, 0 / 1
  bool has_softmax_scale = false;
  double softmax_scale = 0;  // default 1/sqrt(d)
  ModelArgs model;           // window_size, softcap, learnable_sink (variants.h); causal=true sets right = 0
};

// The problem check_kvcache read from the arguments.
struct KVCacheShape {
  int64_t batch = 0, seqlen_q = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t capacity = 0;      // keys a sequence can hold
  int64_t seqlen_new = 0;    // tokens appended (0: none)
  bool paged = false;        // the paged forms run (a page_table, or cache_batch_idx)
  Tensor page_table;         // what they read as the page table
  bool fixed_seqlens = false;  // no cache_seqlens tensor: seqlens_value keys everywhere
  int64_t seqlens_value = 0;
  ModelVariant variant;      // causal and the model axes, resolved (variants.h)
};

namespace detail {

// kvcache._check_inner: a contiguous last dimension, 16-byte aligned base and strides.
inline Status check_inner(const char* name, const Tensor& a, int align = 16) {
  if (a.strides[a.rank - 1] != 1 && a.shape[a.rank - 1] != 1)
    return invalid(std::string(name) + ": the last dimension must be contiguous (stride 1); strides are " +
                   py_strides(a));
  bool bad = a.ptr % align != 0;
  for (int i = 0; i + 1 < a.rank; ++i) bad = bad || (a.strides[i] * dtype_bytes(a.dtype)) % align != 0;
  if (bad)
    return invalid(std::string(name) + ": base pointer and strides must be " + std::to_string(align) +
                   "-byte aligned (ptr " + py_hex(a.ptr) + ", strides " + py_strides(a) + " elements)");
  return Status::Ok();
}

inline bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

inline bool is_vector(const Tensor& t, DType dtype, int64_t n) {
  return t.dtype == dtype && t.rank == 1 && t.shape[0] == n;
}

}  // namespace detail

// runtime/kvcache.py prepare_kvcache's checks, in its order and words, on the host (no
// driver): what the call asks, or the first thing wrong with it.
inline Status check_kvcache(const KVCacheArgs& a, int max_splits, KVCacheShape* out) {
  using detail::check_inner;
  *out = KVCacheShape();
  const bool append = given(a.k) || given(a.v);
  if (given(a.k) != given(a.v)) return invalid("k and v are appended together: pass both or neither");
  const bool no_seqlens = !given(a.cache_seqlens) && a.cache_seqlens_value < 0;
  if (append && no_seqlens) return invalid("appending k/v needs cache_seqlens (where each sequence's new tokens go)");
  if (given(a.cache_batch_idx) && a.paged)
    return invalid("cache_batch_idx indexes the rows of a dense cache; with a page_table, "
                   "put that indirection in the page table instead");
  if (a.num_splits < 0)
    return invalid("num_splits must be 0 (auto) or a positive int, got " + std::to_string(a.num_splits));
  if (a.num_splits > max_splits)
    return invalid("num_splits " + std::to_string(a.num_splits) + " is above " + std::to_string(max_splits));
  ModelVariant variant;
  CUBINFORGE_TRY(resolve_variant(a.causal, a.model, &variant));
  const std::pair<const char*, const Tensor*> qkv[] = {{"q", &a.q}, {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}};
  for (const auto& [n, t] : qkv) {
    if (t->rank != 4) return invalid(std::string(n) + " must have 4 dimensions, got " + py_shape(*t));
    CUBINFORGE_TRY(check_inner(n, *t));
  }
  if (a.q.dtype != a.k_cache.dtype || a.q.dtype != a.v_cache.dtype)
    return invalid(std::string("q, k_cache, v_cache must share one dtype; got ") + dtype_name(a.q.dtype) + ", " +
                   dtype_name(a.k_cache.dtype) + ", " + dtype_name(a.v_cache.dtype));
  if (a.q.dtype == DType::e4m3)  // no descale arguments here yet (issue 13)
    return invalid("an e4m3 KV cache (q/k/v descales, bf16 out) is served by the Python runtime's "
                   "flash_attn_with_kvcache only so far; the C++ loader takes bf16/fp16 caches");
  if (!detail::same_shape(a.k_cache, a.v_cache))
    return invalid("k_cache and v_cache must have one shape; got " + py_shape(a.k_cache) + " and " +
                   py_shape(a.v_cache));
  const int64_t b = a.q.shape[0], sq = a.q.shape[1], hq = a.q.shape[2], d = a.q.shape[3];
  const int64_t hkv = a.k_cache.shape[2];
  if (a.k_cache.shape[3] != d)
    return invalid("head_dim differs: q has " + std::to_string(d) + ", k_cache " + std::to_string(a.k_cache.shape[3]));
  if (hkv == 0 || hq % hkv)
    return invalid("heads_q (" + std::to_string(hq) + ") must be a multiple of heads_kv (" + std::to_string(hkv) + ")");
  CUBINFORGE_TRY(check_sink(a.model.learnable_sink, hq));
  Tensor pt = a.page_table;
  bool paged = a.paged;
  if (given(a.cache_batch_idx)) {
    // kvcache.batch_idx_as_page_table: the dense cache as batch_cache pages of seqlen_cache rows.
    const Tensor& bi = a.cache_batch_idx;
    if (!detail::is_vector(bi, DType::i32, b))
      return invalid("cache_batch_idx must be int32 (batch=" + std::to_string(b) + ",); got " + dtype_name(bi.dtype) +
                     " " + py_shape(bi));
    if (a.k_cache.shape[1] % kPageChunk)
      return invalid("cache_batch_idx needs the cache's seqlen (" + std::to_string(a.k_cache.shape[1]) +
                     ") to be a multiple of " + std::to_string(kPageChunk) +
                     ": the cache is read as pages of that many rows; allocate it with a padded seqlen");
    pt = make_tensor(bi.ptr, DType::i32, {b, 1}, {b > 1 ? bi.strides[0] : 1, 1});
    paged = true;
  }
  int64_t capacity = a.k_cache.shape[1];
  if (paged) {
    if (pt.dtype != DType::i32 || pt.rank != 2 || pt.shape[0] != b)
      return invalid("page_table must be int32 (batch=" + std::to_string(b) + ", max_pages); got " +
                     dtype_name(pt.dtype) + " " + py_shape(pt));
    capacity = pt.shape[1] * a.k_cache.shape[1];
  } else if (a.k_cache.shape[0] != b) {
    return invalid("a dense cache has one row per batch: k_cache.shape[0] = " + std::to_string(a.k_cache.shape[0]) +
                   ", batch = " + std::to_string(b));
  }
  int64_t s_new = 0;
  if (append) {
    const Tensor &kn = a.k, &vn = a.v;
    if (kn.rank != 4 || kn.shape[0] != b || kn.shape[2] != hkv || kn.shape[3] != d || !detail::same_shape(kn, vn))
      return invalid("k and v to append must be (batch=" + std::to_string(b) + ", seqlen_new, heads_kv=" +
                     std::to_string(hkv) + ", head_dim=" + std::to_string(d) + ") alike; got k " + py_shape(kn) +
                     ", v " + py_shape(vn));
    if (kn.dtype != a.q.dtype || vn.dtype != a.q.dtype)
      return invalid(std::string("k and v to append must be ") + dtype_name(a.q.dtype) + " like q; got " +
                     dtype_name(kn.dtype) + ", " + dtype_name(vn.dtype));
    const std::pair<const char*, const Tensor*> kv[] = {{"k", &kn}, {"v", &vn}};
    for (const auto& [n, t] : kv)
      if (t->strides[3] != 1 && t->shape[3] != 1)
        return invalid(std::string(n) + ": the last dimension must be contiguous (stride 1); strides are " +
                       py_strides(*t));
    s_new = kn.shape[1];
  }
  if (!given(a.cache_seqlens)) {
    const int64_t n = a.cache_seqlens_value < 0 ? capacity : a.cache_seqlens_value;
    if (n > capacity - s_new)
      return invalid("cache_seqlens = " + std::to_string(n) +
                     (s_new ? " + " + std::to_string(s_new) + " new tokens" : std::string()) +
                     " is outside the cache's capacity 0.." + std::to_string(capacity));
    out->fixed_seqlens = true;
    out->seqlens_value = n;
  } else if (!detail::is_vector(a.cache_seqlens, DType::i32, b)) {
    return invalid("cache_seqlens must be int32 (batch=" + std::to_string(b) + ",); got " +
                   dtype_name(a.cache_seqlens.dtype) + " " + py_shape(a.cache_seqlens));
  }
  // The outputs: the loader allocates none of its own (Python makes them when not given).
  if (!given(a.o) || !given(a.lse)) return invalid("KVCacheArgs.o and .lse are required: the loader allocates no outputs");
  if (!detail::same_shape(a.o, a.q) || a.o.dtype != a.q.dtype)
    return invalid("out must be " + py_shape(a.q) + " " + dtype_name(a.q.dtype) + " like q; got " + py_shape(a.o) +
                   " " + dtype_name(a.o.dtype));
  const int64_t lse_shape[3] = {b, hq, sq};
  if (a.lse.rank != 3 || a.lse.shape[0] != b || a.lse.shape[1] != hq || a.lse.shape[2] != sq ||
      a.lse.dtype != DType::f32)
    return invalid("lse must be float32 (batch, heads_q, seqlen_q) = " + py_tuple(lse_shape, 3) + "; got " +
                   dtype_name(a.lse.dtype) + " " + py_shape(a.lse));
  out->batch = b, out->seqlen_q = sq, out->heads_q = hq, out->heads_kv = hkv, out->head_dim = d;
  out->capacity = capacity, out->seqlen_new = s_new, out->paged = paged, out->page_table = pt;
  out->variant = variant;
  return Status::Ok();
}

// What prepare_kvcache chose, without the driver (tests compare it with Python's choice).
struct KVCacheChoice {
  const Variant* forward = nullptr;
  const Variant* combine = nullptr;  // nullptr when not split
  DecodePlan plan{};
  const Variant* append = nullptr;   // kv_append, when new k/v are appended
  const Variant* gather = nullptr;   // kv_gather, for pages that are not a multiple of 16 rows
};

namespace detail {

inline int axis_int(const Variant& v, const char* key) {
  const char* s = axis_value(v, key);
  return s ? std::atoi(s) : 0;
}

}  // namespace detail

// The forms and split count for a problem (sizes as flash_attn_with_kvcache's: capacity is
// the cache's keys per sequence), on `arch` with `sm_count` SMs. `variant`: the model axes
// (window, softcap, sink; resolve_variant), matched exactly; nullptr: none on. A miss names
// the nearest variants (select's), as kvcache._pick's nearest_error.
inline Status choose_kvcache(const Bundle& bundle, const std::string& arch, const char* dtype, int head_dim,
                             bool causal, bool paged, int64_t batch, int64_t seqlen_q, int64_t heads_q,
                             int64_t heads_kv, int64_t capacity, int64_t sm_count, int num_splits, int pack_gqa,
                             KVCacheChoice* out, const ModelVariant* variant = nullptr) {
  const ModelVariant model = variant ? *variant : ModelVariant();
  *out = KVCacheChoice();
  if (bundle.decode_plan == nullptr) return invalid("the bundle has no decode plan table (render it again)");
  if (heads_kv <= 0 || heads_q % heads_kv)
    return invalid("heads_q (" + std::to_string(heads_q) + ") must be a multiple of heads_kv (" +
                   std::to_string(heads_kv) + ")");
  const bool auto_pack = pack_gqa_heuristic(seqlen_q, heads_q, heads_kv, 128);
  std::vector<bool> packs;
  if (pack_gqa >= 0) packs = {pack_gqa != 0};
  else if (heads_q == heads_kv) packs = {false, true};  // nothing to pack: the plain rows are the same rows
  else packs = {auto_pack, !auto_pack};
  std::vector<bool> causals = {causal};
  if (seqlen_q == 1) causals.push_back(!causal);      // causal is moot for one query token
  ProblemSizes sizes;
  sizes.batch = batch, sizes.seqlen_q = seqlen_q, sizes.seqlen_k = capacity;
  sizes.heads_q = heads_q, sizes.heads_kv = heads_kv, sizes.sm_count = sm_count;
  for (bool c : causals) {
    for (bool pack : packs) {
      // Both queries name every form axis, so no preference moves them; among tiles the
      // preferences rank, then the name.
      auto query = [&](bool split) {
        Query q;
        q.set("arch", arch).set("dtype", dtype).set("head_dim", head_dim);
        model.apply(q).set("causal", c);
        q.set("paged_kv", paged).set("pack_gqa", pack).set("split_kv", split);
        return q;
      };
      const Variant* unsplit = nullptr;
      const Variant* split = nullptr;
      // Unsplit, unpacked and dense is the plain kernel, which reads no key counts: not a form.
      if (pack || paged) select(bundle, query(false), sizes, &unsplit);
      select(bundle, query(true), sizes, &split);
      if (unsplit == nullptr && split == nullptr) continue;
      const Variant* tiles = unsplit ? unsplit : split;
      if (unsplit && split && detail::axis_int(*split, "tile_m") < detail::axis_int(*unsplit, "tile_m")) tiles = split;
      const DecodePlan plan = plan_decode(batch, seqlen_q, heads_q, heads_kv, capacity, sm_count,
                                          detail::axis_int(*tiles, "tile_m"), detail::axis_int(*tiles, "tile_n"),
                                          *bundle.decode_plan, pack ? 1 : 0, num_splits);
      if (plan.num_splits == 1 && unsplit != nullptr) {
        out->forward = unsplit;
        out->plan = plan;
        return Status::Ok();
      }
      if (split != nullptr) {
        Query cq("attn_combine");
        cq.set("arch", arch).set("dtype", dtype).set("head_dim", head_dim);
        CUBINFORGE_TRY(select(bundle, cq, &out->combine));
        out->forward = split;
        out->plan = plan;
        return Status::Ok();
      }
    }
  }
  // What is built for this dtype / head dim (and model axes), and the nearest to what was wanted.
  auto py_bool = [](bool b) { return std::string(b ? "True" : "False"); };
  std::vector<std::string> have;
  for (int i = 0; i < bundle.count; ++i) {
    const Variant& v = bundle.variants[i];
    auto is = [&](const char* key, const std::string& value) {
      const char* x = axis_value(v, key);
      return x != nullptr && value == x;
    };
    const bool form = is("split_kv", "true") || is("pack_gqa", "true") || is("paged_kv", "true");
    if (names_equal(v.family, "fa3_fwd") && form && !is("varlen", "true") && is("arch", arch) && is("dtype", dtype) &&
        is("head_dim", std::to_string(head_dim)) && is("paged_kv", paged ? "true" : "false") &&
        is("local", model.local ? "true" : "false") && is("softcap", model.softcap ? "true" : "false") &&
        is("learnable_sink", model.learnable_sink ? "true" : "false"))
      have.push_back(v.name);
  }
  std::sort(have.begin(), have.end());
  std::string list;
  for (size_t i = 0; i < have.size() && i < 12; ++i) list += (i ? ", " : "") + have[i];
  Query want;
  want.set("arch", arch).set("dtype", dtype).set("head_dim", head_dim);
  model.apply(want).set("causal", causal);
  want.set("paged_kv", paged).set("split_kv", num_splits != 1).set("pack_gqa", pack_gqa >= 0 ? pack_gqa != 0 : auto_pack);
  const Variant* none = nullptr;
  const Status near = select(bundle, want, &none);
  const std::string model_text = model.text();
  return Status(CUDA_ERROR_NOT_FOUND,
                "no fa3_fwd inference variant for " + arch + " " + dtype + " hd" + std::to_string(head_dim) +
                    " causal=" + py_bool(causal) + " paged_kv=" + py_bool(paged) + " pack_gqa=" +
                    (pack_gqa < 0 ? std::string("None") : py_bool(pack_gqa != 0)) + " num_splits=" +
                    std::to_string(num_splits) + model_text + " (built for this dtype/hd" +
                    (model_text.empty() ? "" : " and these model axes") + ": " + (list.empty() ? "none" : list) +
                    "); build them with `make kernels ARCH=sm90 SET=inference`" +
                    (near.ok() ? std::string() : ". " + near.message()));
}

class KVCachePlan;
inline Status prepare_kvcache(const Bundle& bundle, const std::string& bundle_dir, const KVCacheArgs& a,
                              KVCachePlan* out, CUstream stream = nullptr);

// A prepared kvcache call: its kernels loaded, its buffers allocated, every launch bound and
// packed (append, gather, forward, combine; those that apply). run() launches them on a
// stream and nothing else. The buffers of its own were allocated (and a fixed key count
// written) on the stream it was prepared with: run it there, or order that stream first.
class KVCachePlan : public PreparedPlan {
 public:
  const KVCacheChoice& choice() const { return choice_; }
  const KVCacheShape& shape() const { return shape_; }

 private:
  friend Status prepare_kvcache(const Bundle&, const std::string&, const KVCacheArgs&, KVCachePlan*, CUstream);
  KVCacheChoice choice_;
  KVCacheShape shape_;
};

namespace detail {

// The tensors of `pool` that the contract takes (Python: {n: arrays[n] for n in contract.tensors}).
inline std::vector<NamedTensor> for_contract(const Contract& c, const std::vector<NamedTensor>& pool) {
  std::vector<NamedTensor> out;
  for (const NamedTensor& t : pool)
    if (find_tensor(c, t.name) >= 0) out.push_back(t);
  return out;
}

inline void put(std::vector<NamedTensor>* pool, const char* name, const Tensor& t) {
  for (NamedTensor& n : *pool)
    if (names_equal(n.name, name)) { n.tensor = t; return; }
  pool->push_back({name, t});
}

}  // namespace detail

// Checks the call (check_kvcache), chooses the forms (current device), loads them, allocates
// the buffers of its own on `stream` and packs every launch. A context must be current.
inline Status prepare_kvcache(const Bundle& bundle, const std::string& bundle_dir, const KVCacheArgs& a,
                              KVCachePlan* out, CUstream stream) {
  if (bundle.decode_plan == nullptr) return invalid("the bundle has no decode plan table (render it again)");
  KVCachePlan p;
  CUBINFORGE_TRY(check_kvcache(a, bundle.decode_plan->max_splits, &p.shape_));
  const KVCacheShape& s = p.shape_;
  const int64_t b = s.batch, sq = s.seqlen_q, hq = s.heads_q, hkv = s.heads_kv, d = s.head_dim;
  std::string arch;
  CUBINFORGE_TRY(current_arch(&arch));
  int sms = 0;
  CUBINFORGE_TRY(current_sm_count(&sms));
  const char* dtype = dtype_name(a.q.dtype);
  bool paged = s.paged;
  // Pages not a multiple of 16 rows go through the gather into a dense cache.
  const bool gather = paged && a.k_cache.shape[1] % kPageChunk != 0;
  if (s.seqlen_new) {
    Query q("kv_append");
    q.set("arch", arch).set("dtype", dtype).set("head_dim", static_cast<int>(d)).set("paged_kv", paged);
    CUBINFORGE_TRY(select(bundle, q, &p.choice_.append));
  }
  if (gather) {
    Query q("kv_gather");
    q.set("arch", arch).set("dtype", dtype).set("head_dim", static_cast<int>(d));
    CUBINFORGE_TRY(select(bundle, q, &p.choice_.gather));
  }
  KVCacheChoice forms;
  CUBINFORGE_TRY(choose_kvcache(bundle, arch, dtype, static_cast<int>(d), s.variant.causal, paged && !gather, b, sq,
                                hq, hkv, s.capacity, sms, a.num_splits, a.pack_gqa, &forms, &s.variant));
  p.choice_.forward = forms.forward, p.choice_.combine = forms.combine, p.choice_.plan = forms.plan;

  std::vector<NamedTensor> pool = {{"q", a.q}, {"k", a.k_cache}, {"v", a.v_cache}};
  if (paged) pool.push_back({"page_table", s.page_table});
  Tensor lens = a.cache_seqlens;
  if (s.fixed_seqlens) {
    CUdeviceptr ptr = 0;
    CUBINFORGE_TRY(p.buffer(static_cast<size_t>(b) * 4, "fixed cache_seqlens", &ptr));
    CUBINFORGE_TRY(check_cu(cuMemsetD32Async(ptr, static_cast<unsigned>(s.seqlens_value), static_cast<size_t>(b), stream),
                            "cuMemsetD32Async (fixed cache_seqlens)"));
    lens = make_contiguous(ptr, DType::i32, {b});
  }
  pool.push_back({"seqused_k", lens});
  if (p.choice_.append) {
    // The companion kernel writes the new tokens and the key counts attention reads.
    const Kernel* app = nullptr;
    CUBINFORGE_TRY(p.load(*p.choice_.append, bundle_dir, &app));
    CUdeviceptr used = 0;
    CUBINFORGE_TRY(p.buffer(static_cast<size_t>(b) * 4, "appended key counts", &used));
    const Tensor used_t = make_contiguous(used, DType::i32, {b});
    std::vector<NamedTensor> t = {{"k", a.k}, {"v", a.v}, {"k_cache", a.k_cache}, {"v_cache", a.v_cache},
                                  {"cache_seqlens", lens}, {"seqused_k", used_t}};
    if (paged) t.push_back({"page_table", s.page_table});
    CUBINFORGE_TRY(p.add(*app, detail::for_contract(app->contract(), t), {}));
    detail::put(&pool, "cache_seqlens", lens);
    detail::put(&pool, "seqused_k", used_t);
  }
  if (gather) {
    const Kernel* gat = nullptr;
    CUBINFORGE_TRY(p.load(*p.choice_.gather, bundle_dir, &gat));
    const size_t bytes = static_cast<size_t>(b * s.capacity * hkv * d * dtype_bytes(a.q.dtype));
    CUdeviceptr kd = 0, vd = 0;
    CUBINFORGE_TRY(p.buffer(bytes, "gathered k", &kd));
    CUBINFORGE_TRY(p.buffer(bytes, "gathered v", &vd));
    const Tensor kd_t = make_contiguous(kd, a.q.dtype, {b, s.capacity, hkv, d});
    const Tensor vd_t = make_contiguous(vd, a.q.dtype, {b, s.capacity, hkv, d});
    std::vector<NamedTensor> t = {{"k_cache", a.k_cache}, {"v_cache", a.v_cache}, {"page_table", s.page_table},
                                  {"k", kd_t}, {"v", vd_t}};
    for (const NamedTensor& n : pool)
      if (names_equal(n.name, "seqused_k")) t.push_back(n);
    CUBINFORGE_TRY(p.add(*gat, detail::for_contract(gat->contract(), t), {}));
    detail::put(&pool, "k", kd_t);
    detail::put(&pool, "v", vd_t);
    pool.erase(std::remove_if(pool.begin(), pool.end(),
                              [](const NamedTensor& n) { return names_equal(n.name, "page_table"); }),
               pool.end());
  }
  std::vector<NamedScalar> scalars = s.variant.scalars();
  if (a.has_softmax_scale) scalars.push_back({"softmax_scale", a.softmax_scale});
  if (given(a.model.learnable_sink)) pool.push_back({"learnable_sink", a.model.learnable_sink});
  const Kernel* fwd = nullptr;
  CUBINFORGE_TRY(p.load(*p.choice_.forward, bundle_dir, &fwd));
  pool.push_back({"o", a.o});
  pool.push_back({"lse", a.lse});
  if (p.choice_.combine == nullptr) {
    CUBINFORGE_TRY(p.add(*fwd, detail::for_contract(fwd->contract(), pool), scalars));
  } else {
    const Kernel* comb = nullptr;
    CUBINFORGE_TRY(p.load(*p.choice_.combine, bundle_dir, &comb));
    const int64_t n = p.choice_.plan.num_splits;
    CUdeviceptr op = 0, lp = 0;
    CUBINFORGE_TRY(p.buffer(static_cast<size_t>(n * b * sq * hq * d * 4), "split partials (O)", &op));
    CUBINFORGE_TRY(p.buffer(static_cast<size_t>(n * b * hq * sq * 4), "split partials (LSE)", &lp));
    const Tensor o_part = make_contiguous(op, DType::f32, {n, b, sq, hq, d});
    const Tensor l_part = make_contiguous(lp, DType::f32, {n, b, hq, sq});
    pool.push_back({"o_partial", o_part});
    pool.push_back({"lse_partial", l_part});
    CUBINFORGE_TRY(p.add(*fwd, detail::for_contract(fwd->contract(), pool), scalars));
    CUBINFORGE_TRY(p.add(*comb, {{"o_partial", o_part}, {"lse_partial", l_part}, {"o", a.o}, {"lse", a.lse}}, {}));
  }
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace cubinforge
