// flash_attn_varlen_func for a C++ host, as runtime/varlen.py `prepare_varlen` does it: q
// (total_q, heads_q, d) with the sequences packed one after another (cu_seqlens_q); k and v
// packed the same way (cu_seqlens_k), or with a page_table a paged cache (num_pages,
// page_size, heads_kv, d) whose sequence b has seqused_k[b] keys (or cu_seqlens_k[b + 1] -
// cu_seqlens_k[b]). seqused_q / seqused_k shorten a sequence within its slot. o like q, lse
// float32 (heads_q, total_q). Packed v may have a head dim of its own (head_dim_v, e.g. (192,
// 128)): o is then (total_q, heads_q, head_dim_v). Causal is bottom-right per sequence, and so is a window
// (VarlenArgs.model: window_size, softcap, learnable_sink, variants.h). max_seqlen_q / _k are hints.
// Page sizes not a multiple of 16 go through kv_gather into a packed copy (needs seqused_k).
//
// What is checked where (as in Python): shapes, dtypes, lengths and alignment always, before
// any launch (check_varlen, in Python's order and words); the values of cu_seqlens / seqused /
// page_table by check_varlen_values, which a host that holds them calls itself, or which
// prepare_varlen runs with `check = true` (a copy to the host: a sync). Unchecked, the kernel
// assumes what runtime/varlen.py's docstring lists.
//
// The plan is pre-packed like the kvcache one (prepared.h): what must not change between
// runs is every buffer's address and shape and the scalars; cu_seqlens / seqused /
// page_table values may change within what the shapes allow (the grid is bounded by total_q
// and the batch, not by the lengths).
#pragma once

#include <cuda.h>

#include <algorithm>
#include <string>
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

// The optional tensors are absent while their rank is 0 (a default Tensor).
struct VarlenArgs {
  Tensor q;                           // (total_q, heads_q, d)
  Tensor k, v;                        // (total_k, heads_kv, d), or paged (num_pages, page_size, heads_kv, d)
  Tensor cu_seqlens_q, cu_seqlens_k;  // int32 (batch + 1,); cu_seqlens_k optional when paged with seqused_k
  Tensor seqused_q, seqused_k;        // optional int32 (batch,)
  Tensor page_table;                  // optional int32 (batch, max_pages): k and v are a paged cache
  Tensor o;                           // like q, v's head dim (head_dim_v) wide
  Tensor lse;                         // float32 (heads_q, total_q)
  int64_t max_seqlen_q = -1, max_seqlen_k = -1;  // hints (-1: none)
  bool causal = false;
  int num_splits = 0;                 // 0 or 1: varlen is built without split-KV so far
  int pack_gqa = -1;                  // -1 / 0: varlen is built without pack-GQA so far
  bool has_softmax_scale = false;
  double softmax_scale = 0;           // default 1/sqrt(d)
  ModelArgs model;                    // window_size, softcap, learnable_sink (variants.h)
  bool check = false;                 // also check the device values on the host (a sync)
};

struct VarlenShape {
  int64_t batch = 0, total_q = 0, heads_q = 0, heads_kv = 0, head_dim = 0, head_dim_v = 0;
  bool paged = false;
  int64_t num_pages = 0, page_size = 0, max_pages = 0;
  ModelVariant variant;               // causal and the model axes, resolved (variants.h)
};

namespace detail {

inline Status i32_vector(const Tensor& a, const char* name, int64_t n, const char* what_n) {
  if (a.dtype != DType::i32 || a.rank != 1 || a.shape[0] != n)
    return invalid(std::string(name) + " must be int32 (" + what_n + "=" + std::to_string(n) + ",); got " +
                   dtype_name(a.dtype) + " " + py_shape(a));
  if (a.strides[0] != 1 && n > 1)
    return invalid(std::string(name) + " must be contiguous (stride 1); its stride is " + std::to_string(a.strides[0]));
  return Status::Ok();
}

}  // namespace detail

// runtime/varlen.py prepare_varlen's checks of shapes, dtypes, lengths and alignment, in its
// order and words, on the host (no driver).
inline Status check_varlen(const VarlenArgs& a, VarlenShape* out) {
  *out = VarlenShape();
  ModelVariant variant;
  CUBINFORGE_TRY(resolve_variant(a.causal, a.model, &variant));
  const std::pair<const char*, int64_t> hints[] = {{"max_seqlen_q", a.max_seqlen_q}, {"max_seqlen_k", a.max_seqlen_k}};
  for (const auto& [name, hint] : hints)
    if (hint < -1)
      return invalid(std::string(name) + " is a hint: a non-negative int or None, got " + std::to_string(hint));
  if (a.num_splits < 0)
    return invalid("num_splits must be 0 (auto) or a positive int, got " + std::to_string(a.num_splits));
  if (a.num_splits > 1)
    return invalid("num_splits=" + std::to_string(a.num_splits) +
                   ": varlen is built without split-KV so far; pass 0 (auto) or 1");
  if (a.pack_gqa > 0)
    return invalid("pack_gqa=True: varlen is built without pack-GQA so far (GQA itself works: "
                   "heads_q a multiple of heads_kv); pass None or False");
  const bool paged = given(a.page_table);
  if (a.q.rank != 3) return invalid("q must be packed (total_q, heads_q, head_dim); got shape " + py_shape(a.q));
  const int kv_rank = paged ? 4 : 3;
  const std::pair<const char*, const Tensor*> kv[] = {{"k", &a.k}, {"v", &a.v}};
  for (const auto& [n, t] : kv)
    if (t->rank != kv_rank)
      return invalid(std::string(n) + " must be " +
                     (paged ? "the paged cache (num_pages, page_size, heads_kv, head_dim) (page_table was given)"
                            : "packed (total_k, heads_kv, head_dim)") +
                     "; got shape " + py_shape(*t));
  const std::pair<const char*, const Tensor*> qkv[] = {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}};
  for (const auto& [n, t] : qkv) CUBINFORGE_TRY(detail::check_inner(n, *t));
  if (a.q.dtype != a.k.dtype || a.q.dtype != a.v.dtype)
    return invalid(std::string("q, k, v must share one dtype; got ") + dtype_name(a.q.dtype) + ", " +
                   dtype_name(a.k.dtype) + ", " + dtype_name(a.v.dtype));
  for (int i = 0; i + 1 < kv_rank; ++i)
    if (a.k.shape[i] != a.v.shape[i])
      return invalid("k and v must have one shape but for v's head dim (head_dim_v); got " + py_shape(a.k) +
                     " and " + py_shape(a.v));
  const int64_t total_q = a.q.shape[0], hq = a.q.shape[1], d = a.q.shape[2];
  const int64_t hkv = a.k.shape[kv_rank - 2], dv = a.v.shape[kv_rank - 1];
  if (a.k.shape[kv_rank - 1] != d)
    return invalid("head_dim differs: q has " + std::to_string(d) + ", k " + std::to_string(a.k.shape[kv_rank - 1]));
  if (dv != d && (paged || a.q.dtype == DType::e4m3))
    return invalid("v's head dim " + std::to_string(dv) + " != head_dim " + std::to_string(d) +
                   " (head_dim_v) is built for packed bf16/fp16 k and v only; " +
                   (paged ? "a paged cache (page_table)" : "e4m3 inputs") + " read V as wide as K");
  if (hkv == 0 || hq % hkv)
    return invalid("heads_q (" + std::to_string(hq) + ") must be a multiple of heads_kv (" + std::to_string(hkv) + ")");
  CUBINFORGE_TRY(check_sink(a.model.learnable_sink, hq));
  if (!given(a.cu_seqlens_q))
    return invalid("cu_seqlens_q is required: int32 (batch + 1,) offsets of the sequences in q");
  if (!given(a.cu_seqlens_k) && !(paged && given(a.seqused_k)))
    return invalid("cu_seqlens_k is required (int32 (batch + 1,)); with page_table, seqused_k may give "
                   "the key counts instead");
  const int64_t batch = (a.cu_seqlens_q.rank == 1 ? a.cu_seqlens_q.shape[0] : -1) - 1;
  if (batch < 0 || a.cu_seqlens_q.rank != 1)
    return invalid("cu_seqlens_q must be int32 (batch + 1,) with at least one entry (0)");
  CUBINFORGE_TRY(detail::i32_vector(a.cu_seqlens_q, "cu_seqlens_q", batch + 1, "batch + 1"));
  if (given(a.cu_seqlens_k)) CUBINFORGE_TRY(detail::i32_vector(a.cu_seqlens_k, "cu_seqlens_k", batch + 1, "batch + 1"));
  if (given(a.seqused_q)) CUBINFORGE_TRY(detail::i32_vector(a.seqused_q, "seqused_q", batch, "batch"));
  if (given(a.seqused_k)) CUBINFORGE_TRY(detail::i32_vector(a.seqused_k, "seqused_k", batch, "batch"));
  if (paged) {
    const Tensor& pt = a.page_table;
    if (pt.dtype != DType::i32 || pt.rank != 2 || pt.shape[0] != batch)
      return invalid("page_table must be int32 (batch=" + std::to_string(batch) + ", max_pages); got " +
                     dtype_name(pt.dtype) + " " + py_shape(pt));
    out->num_pages = a.k.shape[0], out->page_size = a.k.shape[1], out->max_pages = pt.shape[1];
    if (out->page_size % kPageChunk && !given(a.seqused_k))
      return invalid("page_size " + std::to_string(out->page_size) + " (not a multiple of " +
                     std::to_string(kPageChunk) +
                     ") goes through a gather that needs seqused_k: pass the key counts as seqused_k");
  }
  if (!given(a.o) || !given(a.lse)) return invalid("VarlenArgs.o and .lse are required: the loader allocates no outputs");
  const int64_t o_shape[3] = {total_q, hq, dv};
  if (a.o.rank != 3 || a.o.shape[0] != total_q || a.o.shape[1] != hq || a.o.shape[2] != dv || a.o.dtype != a.q.dtype)
    return invalid("out must be " + py_tuple(o_shape, 3) + " " + dtype_name(a.q.dtype) +
                   (dv == d ? " like q" : " (q's rows, v's head dim)") +
                   "; got " + py_shape(a.o) + " " + dtype_name(a.o.dtype));
  CUBINFORGE_TRY(detail::check_inner("out", a.o));
  const int64_t lse_shape[2] = {hq, total_q};
  if (a.lse.rank != 2 || a.lse.shape[0] != hq || a.lse.shape[1] != total_q || a.lse.dtype != DType::f32)
    return invalid("lse must be float32 (heads_q, total_q) = " + py_tuple(lse_shape, 2) + "; got " +
                   dtype_name(a.lse.dtype) + " " + py_shape(a.lse));
  out->batch = batch, out->total_q = total_q, out->heads_q = hq, out->heads_kv = hkv, out->head_dim = d;
  out->head_dim_v = dv;
  out->paged = paged, out->variant = variant;
  return Status::Ok();
}

// runtime/varlen.py check_seqlens: the values the kernel trusts, on the host; nullptr: not
// known (not checked). Paged: seqused_k is bounded by the page table, not by cu_seqlens_k.
inline Status check_varlen_values(const std::vector<int32_t>& cu_q, const std::vector<int32_t>* cu_k,
                                  const std::vector<int32_t>* used_q, const std::vector<int32_t>* used_k,
                                  int64_t total_q, int64_t total_k /* -1: not bounded */, bool paged = false,
                                  const std::vector<int32_t>* table = nullptr, int64_t max_pages = 0,
                                  int64_t page_size = 0, int64_t num_pages = 0) {
  const int64_t batch = static_cast<int64_t>(cu_q.size()) - 1;
  auto cu = [&](const char* name, const std::vector<int32_t>& c, int64_t total, const char* rows) -> Status {
    const std::string n = name;
    if (c[0] < 0)
      return invalid(n + "[0] = " + std::to_string(c[0]) + " is negative; cu_seqlens start at 0 (offsets into " +
                     rows + ")");
    for (int64_t i = 0; i < batch; ++i)
      if (c[i + 1] < c[i])
        return invalid(n + " must be non-decreasing: " + n + "[" + std::to_string(i + 1) + "] = " +
                       std::to_string(c[i + 1]) + " < " + n + "[" + std::to_string(i) + "] = " + std::to_string(c[i]) +
                       " (sequence " + std::to_string(i) + " would have a negative length)");
    if (total >= 0 && c.back() > total)
      return invalid(n + "[-1] = " + std::to_string(c.back()) + " is past the " + std::to_string(total) + " rows of " +
                     rows + ": the packed tokens must fit (cu_seqlens[-1] <= " + rows + ".shape[0])");
    return Status::Ok();
  };
  CUBINFORGE_TRY(cu("cu_seqlens_q", cu_q, total_q, "q"));
  if (cu_k) CUBINFORGE_TRY(cu("cu_seqlens_k", *cu_k, total_k, "k"));
  const std::pair<const char*, std::pair<const std::vector<int32_t>*, const std::vector<int32_t>*>> useds[] = {
      {"seqused_q", {used_q, &cu_q}}, {"seqused_k", {used_k, cu_k}}};
  for (const auto& [name, uc] : useds) {
    const auto* used = uc.first;
    const auto* c = uc.second;
    if (used == nullptr) continue;
    const std::string n = name;
    for (size_t i = 0; i < used->size(); ++i) {
      const int32_t x = (*used)[i];
      if (x < 0) return invalid(n + "[" + std::to_string(i) + "] = " + std::to_string(x) + " is negative");
      if (c != nullptr && !(n == "seqused_k" && paged) && x > (*c)[i + 1] - (*c)[i])
        return invalid(n + "[" + std::to_string(i) + "] = " + std::to_string(x) + " is longer than sequence " +
                       std::to_string(i) + "'s slot of " + std::to_string((*c)[i + 1] - (*c)[i]) +
                       " rows (cu_seqlens[" + std::to_string(i + 1) + "] - cu_seqlens[" + std::to_string(i) +
                       "]); seqused may only shorten it");
    }
  }
  if (table == nullptr || (used_k == nullptr && cu_k == nullptr)) return Status::Ok();
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t len = used_k ? (*used_k)[i] : (*cu_k)[i + 1] - (*cu_k)[i];
    const int64_t pages = (len + page_size - 1) / page_size;
    if (pages > max_pages)
      return invalid("sequence " + std::to_string(i) + " has " + std::to_string(len) + " keys: " +
                     std::to_string(pages) + " pages of " + std::to_string(page_size) + ", but page_table has " +
                     std::to_string(max_pages) + " columns");
    for (int64_t j = 0; j < pages; ++j) {
      const int32_t p = (*table)[i * max_pages + j];
      if (p < 0 || p >= num_pages)
        return invalid("page_table[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(p) +
                       " is not a page of the cache (0.." + std::to_string(num_pages - 1) + "); sequence " +
                       std::to_string(i) + " has " + std::to_string(len) + " keys");
    }
  }
  return Status::Ok();
}

// The varlen forward variant (varlen=true, unsplit, unpacked; paged_kv for a paged cache);
// `variant`: the model axes (resolve_variant), matched exactly, or nullptr for none.
// `head_dim_v` -1: as head_dim.
inline Status choose_varlen(const Bundle& bundle, const std::string& arch, const char* dtype, int head_dim, bool causal,
                            bool paged, const Variant** out, const ModelVariant* variant = nullptr,
                            int head_dim_v = -1) {
  Query q;
  q.set("arch", arch).set("dtype", dtype).set("head_dim", head_dim);
  if (head_dim_v >= 0) q.set("head_dim_v", head_dim_v);
  (variant ? *variant : ModelVariant()).apply(q).set("causal", causal);
  q.set("varlen", true).set("paged_kv", paged).set("split_kv", false).set("pack_gqa", false);
  const Status st = select(bundle, q, out);
  if (st.ok()) return st;
  return Status(st.code(), st.message() +
                               "; build them with `make kernels ARCH=sm90 SET=inference` (the default set has "
                               "bf16/fp16 hd64/128 and (192, 128) packed, bf16 hd128 paged and a bf16 hd128 window)");
}

namespace detail {

inline Status to_host_i32(const Tensor& t, std::vector<int32_t>* out) {
  out->assign(static_cast<size_t>(numel(t)), 0);
  if (out->empty()) return Status::Ok();
  if (t.rank == 2 && t.strides[0] != t.shape[1] && t.shape[0] > 1)
    return invalid("check=true needs compact (row-major contiguous) cache_seqlens / page_table");
  CUBINFORGE_TRY(check_cu(cuCtxSynchronize(), "cuCtxSynchronize (check=true)"));
  return check_cu(cuMemcpyDtoH(out->data(), t.ptr, out->size() * 4), "cuMemcpyDtoH (check=true)");
}

}  // namespace detail

class VarlenPlan;
inline Status prepare_varlen(const Bundle& bundle, const std::string& bundle_dir, const VarlenArgs& a, VarlenPlan* out,
                             CUstream stream = nullptr);

// A prepared varlen call (gather, forward; those that apply), every launch packed: run()
// launches them and nothing else. An empty batch (or no query rows) launches nothing.
class VarlenPlan : public PreparedPlan {
 public:
  const Variant* forward() const { return forward_; }
  const VarlenShape& shape() const { return shape_; }

 private:
  friend Status prepare_varlen(const Bundle&, const std::string&, const VarlenArgs&, VarlenPlan*, CUstream);
  const Variant* forward_ = nullptr;
  VarlenShape shape_;
  std::vector<int32_t> host_offsets_;  // the gathered cu_seqlens_k, kept until the copy is done
};

// Checks the call (check_varlen; with a.check also the values), chooses the variant for the
// current device, loads it and packs the launches. A context must be current.
inline Status prepare_varlen(const Bundle& bundle, const std::string& bundle_dir, const VarlenArgs& a, VarlenPlan* out,
                             CUstream stream) {
  VarlenPlan p;
  CUBINFORGE_TRY(check_varlen(a, &p.shape_));
  const VarlenShape& s = p.shape_;
  const int64_t batch = s.batch, hkv = s.heads_kv, d = s.head_dim;
  if (a.check) {
    std::vector<int32_t> cu_q, cu_k, used_q, used_k, table;
    CUBINFORGE_TRY(detail::to_host_i32(a.cu_seqlens_q, &cu_q));
    if (given(a.cu_seqlens_k)) CUBINFORGE_TRY(detail::to_host_i32(a.cu_seqlens_k, &cu_k));
    if (given(a.seqused_q)) CUBINFORGE_TRY(detail::to_host_i32(a.seqused_q, &used_q));
    if (given(a.seqused_k)) CUBINFORGE_TRY(detail::to_host_i32(a.seqused_k, &used_k));
    if (s.paged) CUBINFORGE_TRY(detail::to_host_i32(a.page_table, &table));
    CUBINFORGE_TRY(check_varlen_values(cu_q, given(a.cu_seqlens_k) ? &cu_k : nullptr,
                                       given(a.seqused_q) ? &used_q : nullptr, given(a.seqused_k) ? &used_k : nullptr,
                                       s.total_q, s.paged ? -1 : a.k.shape[0], s.paged, s.paged ? &table : nullptr,
                                       s.max_pages, s.page_size, s.num_pages));
  }
  if (batch == 0 || s.total_q == 0) {
    *out = std::move(p);
    return Status::Ok();
  }
  std::string arch;
  CUBINFORGE_TRY(current_arch(&arch));
  const char* dtype = dtype_name(a.q.dtype);
  bool paged = s.paged;
  const bool gather = paged && s.page_size % kPageChunk != 0;
  const Variant* gather_v = nullptr;
  if (gather) {
    Query q("kv_gather");
    q.set("arch", arch).set("dtype", dtype).set("head_dim", static_cast<int>(d));
    CUBINFORGE_TRY(select(bundle, q, &gather_v));
  }
  std::vector<NamedTensor> pool = {{"q", a.q}, {"k", a.k}, {"v", a.v}, {"cu_seqlens_q", a.cu_seqlens_q},
                                   {"o", a.o}, {"lse", a.lse}};
  if (given(a.cu_seqlens_k)) pool.push_back({"cu_seqlens_k", a.cu_seqlens_k});
  if (given(a.seqused_q)) pool.push_back({"seqused_q", a.seqused_q});
  if (given(a.seqused_k)) pool.push_back({"seqused_k", a.seqused_k});
  if (paged) pool.push_back({"page_table", a.page_table});
  std::vector<NamedScalar> scalars = {{"has_seqused_q", given(a.seqused_q) ? 1.0 : 0.0},
                                      {"has_seqused_k", given(a.seqused_k) ? 1.0 : 0.0}};
  for (const NamedScalar& m : s.variant.scalars()) scalars.push_back(m);
  if (given(a.model.learnable_sink)) pool.push_back({"learnable_sink", a.model.learnable_sink});
  if (a.has_softmax_scale) scalars.push_back({"softmax_scale", a.softmax_scale});
  if (gather) {
    // Gather the used keys into (batch, capacity) rows, packed: sequence b at b * capacity.
    const int64_t capacity = s.max_pages * s.page_size;
    const Kernel* gat = nullptr;
    CUBINFORGE_TRY(p.load(*gather_v, bundle_dir, &gat));
    const size_t bytes = static_cast<size_t>(batch * capacity * hkv * d * dtype_bytes(a.q.dtype));
    CUdeviceptr kd = 0, vd = 0, offsets = 0;
    CUBINFORGE_TRY(p.buffer(bytes, "gathered k", &kd));
    CUBINFORGE_TRY(p.buffer(bytes, "gathered v", &vd));
    CUBINFORGE_TRY(p.add(*gat, {{"k_cache", a.k}, {"v_cache", a.v}, {"page_table", a.page_table},
                                {"seqused_k", a.seqused_k},
                                {"k", make_contiguous(kd, a.q.dtype, {batch, capacity, hkv, d})},
                                {"v", make_contiguous(vd, a.q.dtype, {batch, capacity, hkv, d})}}, {}));
    p.host_offsets_.resize(static_cast<size_t>(batch + 1));
    for (int64_t i = 0; i <= batch; ++i) p.host_offsets_[i] = static_cast<int32_t>(i * capacity);
    CUBINFORGE_TRY(p.buffer(p.host_offsets_.size() * 4, "gathered cu_seqlens_k", &offsets));
    CUBINFORGE_TRY(check_cu(cuMemcpyHtoDAsync(offsets, p.host_offsets_.data(), p.host_offsets_.size() * 4, stream),
                            "cuMemcpyHtoDAsync (gathered cu_seqlens_k)"));
    detail::put(&pool, "k", make_contiguous(kd, a.q.dtype, {batch * capacity, hkv, d}));
    detail::put(&pool, "v", make_contiguous(vd, a.q.dtype, {batch * capacity, hkv, d}));
    detail::put(&pool, "cu_seqlens_k", make_contiguous(offsets, DType::i32, {batch + 1}));
    pool.erase(std::remove_if(pool.begin(), pool.end(),
                              [](const NamedTensor& n) { return names_equal(n.name, "page_table"); }),
               pool.end());
    paged = false;
  }
  // Stand-ins the kernel never reads (has_seqused_* = 0, or paged with seqused_k).
  auto get = [&](const char* name) -> const Tensor* {
    for (const NamedTensor& n : pool)
      if (names_equal(n.name, name)) return &n.tensor;
    return nullptr;
  };
  if (get("cu_seqlens_k") == nullptr) pool.push_back({"cu_seqlens_k", a.cu_seqlens_q});
  auto prefix = [&](const char* of) {
    Tensor t = *get(of);
    t.shape[0] = batch;
    return t;
  };
  if (get("seqused_q") == nullptr) pool.push_back({"seqused_q", prefix("cu_seqlens_q")});
  if (get("seqused_k") == nullptr) pool.push_back({"seqused_k", prefix("cu_seqlens_k")});
  CUBINFORGE_TRY(choose_varlen(bundle, arch, dtype, static_cast<int>(d), s.variant.causal, paged, &p.forward_,
                               &s.variant, static_cast<int>(s.head_dim_v)));
  const Kernel* fwd = nullptr;
  CUBINFORGE_TRY(p.load(*p.forward_, bundle_dir, &fwd));
  const Contract& c = fwd->contract();
  if (find_tensor(c, "tile_counter") >= 0) {
    // The walk's tile counter (a variant that hands tiles out by atomicAdd): zero now, and every
    // launch leaves it zero, so the plan's stream-ordered runs and graph replays share it.
    CUdeviceptr counter = 0;
    CUBINFORGE_TRY(p.buffer(8, "tile counter", &counter));
    CUBINFORGE_TRY(check_cu(cuMemsetD32Async(counter, 0, 2, stream), "cuMemsetD32Async (tile counter)"));
    pool.push_back({"tile_counter", make_contiguous(counter, DType::i32, {2})});
  }
  CUBINFORGE_TRY(p.add(*fwd, detail::for_contract(c, pool), scalars));
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace cubinforge
