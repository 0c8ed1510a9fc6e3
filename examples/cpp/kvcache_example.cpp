// flash_attn_with_kvcache from C++ (runtime/cpp/include/cubinforge/kvcache.h): seeded bf16
// q and a dense or paged KV cache with ragged key counts (and a shuffled page table, or with
// --batch-idx 1 a shuffled cache_batch_idx over a dense cache with spare rows), optionally
// --seqlen-new tokens of k/v appended, one prepare_kvcache + run, and everything written to
// --out (*.bin, meta.json: the inputs as they were before the run, O, LSE and the caches
// after it) so that examples/cpp/compare_kvcache_with_python.py can run the same call
// through the Python runtime and compare O, LSE and the caches bit for bit.
//
//   kvcache_example --batch 8 --seqlen-q 1 --capacity 32768 --heads-q 32 --heads-kv 8
//                   --causal 1 --page-size 256 --num-splits 0 --seqlen-new 0 --batch-idx 0 --out /tmp/kv
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"
#include "example_util.h"

#ifndef CUBINFORGE_BUNDLE_DIR
#define CUBINFORGE_BUNDLE_DIR "."
#endif

namespace cf = cubinforge;
using namespace cf_example;  // NOLINT: the examples' shared helpers

namespace {

struct Options {
  int64_t batch = 4, seqlen_q = 1, capacity = 4096, heads_q = 32, heads_kv = 8, head_dim = 128, page_size = 0;
  int64_t seqlen_new = 0;
  bool batch_idx = false;
  bool causal = true;
  int num_splits = 0, pack_gqa = -1;
  uint64_t seed = 0;
  std::string out = "cubinforge_kv", bundle_dir = CUBINFORGE_BUNDLE_DIR;
};

bool parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    const long long n = std::atoll(v.c_str());
    if (a == "--batch") o->batch = n;
    else if (a == "--seqlen-q") o->seqlen_q = n;
    else if (a == "--capacity") o->capacity = n;
    else if (a == "--heads-q") o->heads_q = n;
    else if (a == "--heads-kv") o->heads_kv = n;
    else if (a == "--head-dim") o->head_dim = n;
    else if (a == "--page-size") o->page_size = n;
    else if (a == "--seqlen-new") o->seqlen_new = n;
    else if (a == "--batch-idx") o->batch_idx = n != 0;
    else if (a == "--causal") o->causal = n != 0;
    else if (a == "--num-splits") o->num_splits = static_cast<int>(n);
    else if (a == "--pack-gqa") o->pack_gqa = static_cast<int>(n);
    else if (a == "--seed") o->seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--out") o->out = v;
    else if (a == "--bundle-dir") o->bundle_dir = v;
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return false; }
  }
  return argc % 2 == 1;
}

int fail(const cf::Status& st) {
  std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
  return 1;
}

struct Array {
  std::string name;
  cf::Tensor tensor;
  DeviceBuffer memory;
};

cf::Status upload(Array* a, const void* host, size_t bytes) {
  CUBINFORGE_TRY(a->memory.allocate(bytes));
  a->tensor.ptr = a->memory.get();
  return bytes ? cf::check_cu(cuMemcpyHtoD(a->tensor.ptr, host, bytes), "cuMemcpyHtoD") : cf::Status::Ok();
}

cf::Status normal_bf16(Array* a, SplitMix64* rng) {
  std::vector<uint16_t> host(static_cast<size_t>(cf::numel(a->tensor)));
  for (auto& x : host) x = float_to_bf16(static_cast<float>(rng->normal()));
  return upload(a, host.data(), host.size() * 2);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_args(argc, argv, &opt)) {
    std::fprintf(stderr, "usage: %s [--batch B] [--seqlen-q SQ] [--capacity KEYS] [--heads-q HQ] [--heads-kv HKV]\n"
                         "          [--head-dim D] [--causal 0|1] [--page-size P (0: dense)] [--num-splits N]\n"
                         "          [--pack-gqa -1|0|1] [--seqlen-new N] [--batch-idx 0|1] [--seed N]\n"
                         "          [--bundle-dir DIR] [--out DIR]\n", argv[0]);
    return 2;
  }
  CUcontext ctx = nullptr;
  cf::Status st = cf::init_primary_context(0, &ctx);
  if (!st.ok()) return fail(st);
  const int64_t b = opt.batch, sq = opt.seqlen_q, hq = opt.heads_q, hkv = opt.heads_kv, d = opt.head_dim;
  const bool paged = opt.page_size > 0;
  const int64_t pages = paged ? (opt.capacity + opt.page_size - 1) / opt.page_size : 0;
  const int64_t pool = b * pages + 3;  // spare pages: the table is a shuffled subset
  const int64_t rows = opt.batch_idx ? b + 2 : b;  // spare cache rows: cache_batch_idx is a shuffled subset
  SplitMix64 rng{opt.seed};
  std::vector<Array> arrays(10);
  Array &q = arrays[0], &k = arrays[1], &v = arrays[2], &lens = arrays[3], &table = arrays[4], &o = arrays[5],
        &lse = arrays[6], &k_new = arrays[7], &v_new = arrays[8], &bidx = arrays[9];
  q.name = "q", q.tensor = cf::make_contiguous(0, cf::DType::bf16, {b, sq, hq, d});
  const cf::Tensor cache = paged ? cf::make_contiguous(0, cf::DType::bf16, {pool, opt.page_size, hkv, d})
                                 : cf::make_contiguous(0, cf::DType::bf16, {rows, opt.capacity, hkv, d});
  k.name = "k_cache", k.tensor = cache;
  v.name = "v_cache", v.tensor = cache;
  if (!(st = normal_bf16(&q, &rng)).ok() || !(st = normal_bf16(&k, &rng)).ok() || !(st = normal_bf16(&v, &rng)).ok())
    return fail(st);
  if (opt.seqlen_new > 0) {
    k_new.name = "k", k_new.tensor = cf::make_contiguous(0, cf::DType::bf16, {b, opt.seqlen_new, hkv, d});
    v_new.name = "v", v_new.tensor = k_new.tensor;
    if (!(st = normal_bf16(&k_new, &rng)).ok() || !(st = normal_bf16(&v_new, &rng)).ok()) return fail(st);
  }
  // Ragged key counts in [room / 2, room] (room: the capacity less the appended tokens), the last full.
  const int64_t room = opt.capacity - opt.seqlen_new;
  std::vector<int32_t> n(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i)
    n[i] = static_cast<int32_t>(i + 1 == b ? room : room / 2 + rng.next() % (room / 2 + 1));
  lens.name = "cache_seqlens", lens.tensor = cf::make_contiguous(0, cf::DType::i32, {b});
  if (!(st = upload(&lens, n.data(), n.size() * 4)).ok()) return fail(st);
  if (paged) {
    std::vector<int32_t> perm(static_cast<size_t>(pool));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = pool - 1; i > 0; --i) std::swap(perm[i], perm[rng.next() % (i + 1)]);
    perm.resize(static_cast<size_t>(b * pages));
    table.name = "page_table", table.tensor = cf::make_contiguous(0, cf::DType::i32, {b, pages});
    if (!(st = upload(&table, perm.data(), perm.size() * 4)).ok()) return fail(st);
  }
  if (opt.batch_idx) {
    std::vector<int32_t> perm(static_cast<size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = rows - 1; i > 0; --i) std::swap(perm[i], perm[rng.next() % (i + 1)]);
    perm.resize(static_cast<size_t>(b));
    bidx.name = "cache_batch_idx", bidx.tensor = cf::make_contiguous(0, cf::DType::i32, {b});
    if (!(st = upload(&bidx, perm.data(), perm.size() * 4)).ok()) return fail(st);
  }
  o.name = "o", o.tensor = cf::make_contiguous(0, cf::DType::bf16, {b, sq, hq, d});
  lse.name = "lse", lse.tensor = cf::make_contiguous(0, cf::DType::f32, {b, hq, sq});
  if (!(st = o.memory.allocate(span_bytes(o.tensor))).ok() || !(st = lse.memory.allocate(span_bytes(lse.tensor))).ok())
    return fail(st);
  o.tensor.ptr = o.memory.get(), lse.tensor.ptr = lse.memory.get();

  cf::KVCacheArgs args;
  args.q = q.tensor, args.k_cache = k.tensor, args.v_cache = v.tensor, args.cache_seqlens = lens.tensor;
  args.paged = paged, args.page_table = table.tensor, args.o = o.tensor, args.lse = lse.tensor;
  if (opt.seqlen_new > 0) args.k = k_new.tensor, args.v = v_new.tensor;
  if (opt.batch_idx) args.cache_batch_idx = bidx.tensor;
  args.causal = opt.causal, args.num_splits = opt.num_splits, args.pack_gqa = opt.pack_gqa;
  std::string tensors;
  auto save = [&](const std::string& name, const cf::Tensor& t) -> cf::Status {
    std::vector<unsigned char> dense;
    CUBINFORGE_TRY(download_dense(t, &dense));
    if (!write_file(opt.out + "/" + name + ".bin", dense.data(), dense.size()))
      return cf::invalid("cannot write into " + opt.out + " (does it exist?)");
    std::string shape;
    for (int i = 0; i < t.rank; ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
    tensors += std::string(tensors.empty() ? "" : ",\n") + "    " + json_string(name) + ": {\"file\": " +
               json_string(name + ".bin") + ", \"dtype\": " + json_string(cf::dtype_name(t.dtype)) +
               ", \"shape\": [" + shape + "]}";
    return cf::Status::Ok();
  };
  for (const Array& a : arrays)  // the inputs, as the run finds them
    if (!a.name.empty() && a.name != "o" && a.name != "lse" && !(st = save(a.name, a.tensor)).ok()) return fail(st);

  cf::KVCachePlan plan;
  if (!(st = cf::prepare_kvcache(cubinforge_bundle::kBundle, opt.bundle_dir, args, &plan)).ok()) return fail(st);
  if (!(st = plan.run(nullptr)).ok()) return fail(st);
  if (!(st = cf::check_cu(cuCtxSynchronize(), "cuCtxSynchronize (the kernels)")).ok()) return fail(st);
  if (!(st = save("o", o.tensor)).ok() || !(st = save("lse", lse.tensor)).ok() ||
      !(st = save("k_cache_after", k.tensor)).ok() || !(st = save("v_cache_after", v.tensor)).ok())
    return fail(st);
  const cf::KVCacheChoice& c = plan.choice();
  std::string kernels;
  for (const std::string& name : plan.kernels()) kernels += (kernels.empty() ? "" : ", ") + json_string(name);
  const std::string meta = "{\n  \"kernels\": [" + kernels + "],\n  \"forward\": " + json_string(c.forward->name) +
                           ",\n  \"combine\": " +
                           (c.combine ? json_string(c.combine->name) : std::string("null")) +
                           ",\n  \"num_splits\": " + std::to_string(c.plan.num_splits) +
                           ",\n  \"causal\": " + (opt.causal ? "true" : "false") +
                           ",\n  \"tensors\": {\n" + tensors + "\n  }\n}\n";
  if (!write_file(opt.out + "/meta.json", meta.data(), meta.size())) return 1;
  std::printf("%s%s%s, %d split(s); wrote %s/meta.json\n", c.forward->name, c.combine ? " + " : "",
              c.combine ? c.combine->name : "", c.plan.num_splits, opt.out.c_str());
  return 0;
}
