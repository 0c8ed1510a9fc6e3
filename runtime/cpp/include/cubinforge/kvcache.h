// flash_attn_with_kvcache for a C++ host: attention of q against a dense or paged KV cache
// through the bundle's inference forms (split-KV + the attn_combine family, pack-GQA, paged
// KV), as runtime/kvcache.py `prepare_kvcache` does it. The forms are tried in kvcache._pick's
// order (the asked causal first, for one query token either; auto pack-GQA first, then the
// other), each chosen by select() with the bundle's dispatcher preferences; the split count
// is the decode plan's (decode.h) with the chosen form's tiles. The Python runtime makes the
// same choice for the same problem and device, so both launch the same kernels with the same
// parameters (tests/test_cpp_kvcache.py on the CPU; the kvcache example's --compare on a GPU).
//
// Not here yet: appending new k/v (kv_append), cache_batch_idx, and pages that are not a
// multiple of 16 rows (Python gathers those into a dense cache first).
#pragma once

#include <cuda.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cubinforge/bind.h"
#include "cubinforge/decode.h"
#include "cubinforge/device.h"
#include "cubinforge/launch.h"
#include "cubinforge/module.h"
#include "cubinforge/select.h"
#include "cubinforge/status.h"
#include "cubinforge/tensor.h"

namespace cubinforge {

struct KVCacheArgs {
  Tensor q;                  // (batch, seqlen_q, heads_q, d)
  Tensor k_cache, v_cache;   // dense (batch, seqlen_cache, heads_kv, d) or paged (num_pages, page_size, heads_kv, d)
  Tensor cache_seqlens;      // int32 (batch,): keys per sequence, on the device
  bool paged = false;
  Tensor page_table;         // int32 (batch, max_pages) when paged
  Tensor o;                  // like q
  Tensor lse;                // float32 (batch, heads_q, seqlen_q)
  bool causal = true;
  int num_splits = 0;        // 0: auto (the decode plan), 1: never split, n: n splits
  int pack_gqa = -1;         // -1: auto, 0 / 1
  bool has_softmax_scale = false;
  double softmax_scale = 0;  // default 1/sqrt(d)
};

// What prepare_kvcache chose, without the driver (tests compare it with Python's choice).
struct KVCacheChoice {
  const Variant* forward = nullptr;
  const Variant* combine = nullptr;  // nullptr when not split
  DecodePlan plan{};
};

namespace detail {

inline int axis_int(const Variant& v, const char* key) {
  const char* s = axis_value(v, key);
  return s ? std::atoi(s) : 0;
}

}  // namespace detail

// The forms and split count for a problem (sizes as flash_attn_with_kvcache's: capacity is
// the cache's keys per sequence), on `arch` with `sm_count` SMs.
inline Status choose_kvcache(const Bundle& bundle, const std::string& arch, const char* dtype, int head_dim,
                             bool causal, bool paged, int64_t batch, int64_t seqlen_q, int64_t heads_q,
                             int64_t heads_kv, int64_t capacity, int64_t sm_count, int num_splits, int pack_gqa,
                             KVCacheChoice* out) {
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
        q.set("arch", arch).set("dtype", dtype).set("head_dim", head_dim).set("causal", c);
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
  return Status(CUDA_ERROR_NOT_FOUND,
                "no fa3_fwd inference variant for " + arch + " " + dtype + " hd" + std::to_string(head_dim) +
                    " causal=" + (causal ? "true" : "false") + " paged_kv=" + (paged ? "true" : "false") +
                    " in this bundle; build them with `make kernels ARCH=sm90 SET=inference`");
}

// Device memory of our own (the split partials), freed with the plan.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept : ptr_(std::exchange(o.ptr_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) { reset(); ptr_ = std::exchange(o.ptr_, 0); }
    return *this;
  }
  ~DeviceMemory() { reset(); }
  Status allocate(size_t bytes) {
    reset();
    return check_cu(cuMemAlloc(&ptr_, bytes ? bytes : 1), "cuMemAlloc (split partials)");
  }
  CUdeviceptr get() const { return ptr_; }

 private:
  void reset() {
    if (ptr_) cuMemFree(ptr_);
    ptr_ = 0;
  }
  CUdeviceptr ptr_ = 0;
};

class KVCachePlan;
inline Status prepare_kvcache(const Bundle& bundle, const std::string& bundle_dir, const KVCacheArgs& a,
                              KVCachePlan* out);

// A prepared kvcache call: its kernels loaded, its partial buffers allocated. run() launches
// the forward form (and the combine) on a stream; each run binds and packs again, so the
// caller's buffers may change between runs as long as their shapes do not.
class KVCachePlan {
 public:
  const KVCacheChoice& choice() const { return choice_; }

  Status run(const KVCacheArgs& a, CUstream stream) const {
    const bool split = choice_.combine != nullptr;
    std::vector<NamedTensor> t = {{"q", a.q}, {"k", a.k_cache}, {"v", a.v_cache}, {"seqused_k", a.cache_seqlens}};
    if (a.paged) t.push_back({"page_table", a.page_table});
    if (split) {
      t.push_back({"o_partial", o_partial_});
      t.push_back({"lse_partial", lse_partial_});
    } else {
      t.push_back({"o", a.o});
      t.push_back({"lse", a.lse});
    }
    std::vector<NamedScalar> s;
    if (a.has_softmax_scale) s.push_back({"softmax_scale", a.softmax_scale});
    CUBINFORGE_TRY(launch(forward_, t.data(), static_cast<int>(t.size()), s.data(), static_cast<int>(s.size()), stream));
    if (!split) return Status::Ok();
    const NamedTensor parts[] = {{"o_partial", o_partial_}, {"lse_partial", lse_partial_}, {"o", a.o}, {"lse", a.lse}};
    return launch(combine_, parts, 4, nullptr, 0, stream);
  }

 private:
  friend Status prepare_kvcache(const Bundle&, const std::string&, const KVCacheArgs&, KVCachePlan*);
  KVCacheChoice choice_;
  Kernel forward_, combine_;
  DeviceMemory o_memory_, lse_memory_;
  Tensor o_partial_, lse_partial_;
};

// Checks the call's shapes, chooses the forms (current device), loads them and allocates
// the split partials. A context must be current.
inline Status prepare_kvcache(const Bundle& bundle, const std::string& bundle_dir, const KVCacheArgs& a,
                              KVCachePlan* out) {
  if (a.q.rank != 4 || a.k_cache.rank != 4 || a.v_cache.rank != 4)
    return invalid("q, k_cache and v_cache must have 4 dimensions");
  if (a.q.dtype != a.k_cache.dtype || a.q.dtype != a.v_cache.dtype)
    return invalid("q, k_cache, v_cache must share one dtype");
  const int64_t b = a.q.shape[0], sq = a.q.shape[1], hq = a.q.shape[2], d = a.q.shape[3];
  const int64_t hkv = a.k_cache.shape[2];
  if (a.k_cache.shape[3] != d) return invalid("head_dim differs between q and k_cache");
  if (a.cache_seqlens.dtype != DType::i32 || a.cache_seqlens.rank != 1 || a.cache_seqlens.shape[0] != b)
    return invalid("cache_seqlens must be int32 (batch=" + std::to_string(b) + ",)");
  int64_t capacity = a.k_cache.shape[1];
  if (a.paged) {
    if (a.page_table.dtype != DType::i32 || a.page_table.rank != 2 || a.page_table.shape[0] != b)
      return invalid("page_table must be int32 (batch=" + std::to_string(b) + ", max_pages)");
    if (a.k_cache.shape[1] % 16)
      return invalid("page_size " + std::to_string(a.k_cache.shape[1]) +
                     " is not a multiple of 16: the paged forms load 16-row boxes (the Python runtime "
                     "gathers such caches first; this loader does not yet)");
    capacity = a.page_table.shape[1] * a.k_cache.shape[1];
  } else if (a.k_cache.shape[0] != b) {
    return invalid("a dense cache has one row per batch: k_cache.shape[0] = " + std::to_string(a.k_cache.shape[0]) +
                   ", batch = " + std::to_string(b));
  }
  std::string arch;
  CUBINFORGE_TRY(current_arch(&arch));
  int sms = 0;
  CUBINFORGE_TRY(current_sm_count(&sms));
  KVCachePlan p;
  CUBINFORGE_TRY(choose_kvcache(bundle, arch, dtype_name(a.q.dtype), static_cast<int>(d), a.causal, a.paged, b, sq, hq,
                                hkv, capacity, sms, a.num_splits, a.pack_gqa, &p.choice_));
  CUBINFORGE_TRY(Kernel::load(*p.choice_.forward, bundle_dir, &p.forward_));
  if (p.choice_.combine != nullptr) {
    CUBINFORGE_TRY(Kernel::load(*p.choice_.combine, bundle_dir, &p.combine_));
    const int64_t s = p.choice_.plan.num_splits;
    CUBINFORGE_TRY(p.o_memory_.allocate(static_cast<size_t>(s * b * sq * hq * d * 4)));
    CUBINFORGE_TRY(p.lse_memory_.allocate(static_cast<size_t>(s * b * hq * sq * 4)));
    p.o_partial_ = make_contiguous(p.o_memory_.get(), DType::f32, {s, b, sq, hq, d});
    p.lse_partial_ = make_contiguous(p.lse_memory_.get(), DType::f32, {s, b, hq, sq});
  }
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace cubinforge
