// Prints, for each case on stdin, what check_kvcache / check_varlen say about it: "ok" or
// the error message. tests/test_cpp_inference.py builds the same tensors for the Python
// runtime's prepare_kvcache / prepare_varlen and compares the words.
// Input: "kvcache NUM_SPLITS PACK_GQA SEQLENS_VALUE PAGED" or "varlen NUM_SPLITS PACK_GQA MAX_Q MAX_K",
// then "t NAME DTYPE PTR RANK SHAPE... STRIDES..." lines, then "end".
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "tensor_input.h"

namespace cf = cubinforge;

int main(int argc, char** argv) {
  const int max_splits = argc > 1 ? std::atoi(argv[1]) : 128;  // runtime/decode_plan.py MAX_SPLITS
  std::string kind;
  while (std::cin >> kind) {
    if (kind == "values") {  // values PAGED TOTAL_Q TOTAL_K MAX_PAGES PAGE_SIZE NUM_PAGES, then 5 lists "N v..." (N -1: none)
      long long paged, tq, tk, mp, ps, np;
      std::cin >> paged >> tq >> tk >> mp >> ps >> np;
      std::vector<int32_t> lists[5];
      bool known[5];
      for (int i = 0; i < 5; ++i) {
        long long n;
        std::cin >> n;
        known[i] = n >= 0;
        for (long long j = 0; j < n; ++j) { long long x; std::cin >> x; lists[i].push_back(static_cast<int32_t>(x)); }
      }
      const cf::Status st = cf::check_varlen_values(lists[0], known[1] ? &lists[1] : nullptr, known[2] ? &lists[2] : nullptr,
                                                    known[3] ? &lists[3] : nullptr, tq, tk, paged != 0,
                                                    known[4] ? &lists[4] : nullptr, mp, ps, np);
      std::printf("%s\n", st.ok() ? "ok" : st.message().c_str());
      continue;
    }
    long long a1, a2, a3, a4;
    std::cin >> a1 >> a2 >> a3 >> a4;
    std::map<std::string, cf::Tensor> t;
    std::string tok;
    while (std::cin >> tok && tok != "end") {
      std::string name;
      std::cin >> name;
      t[name] = cubinforge_test::read_tensor(std::cin);
    }
    cf::Status st;
    if (kind == "kvcache") {
      cf::KVCacheArgs a;
      a.num_splits = static_cast<int>(a1), a.pack_gqa = static_cast<int>(a2), a.cache_seqlens_value = a3;
      a.paged = a4 != 0;
      a.q = t["q"], a.k_cache = t["k_cache"], a.v_cache = t["v_cache"], a.k = t["k"], a.v = t["v"];
      a.cache_seqlens = t["cache_seqlens"], a.cache_batch_idx = t["cache_batch_idx"], a.page_table = t["page_table"];
      a.o = t["out"], a.lse = t["lse"];
      cf::KVCacheShape s;
      st = cf::check_kvcache(a, max_splits, &s);
    } else {
      cf::VarlenArgs a;
      a.num_splits = static_cast<int>(a1), a.pack_gqa = static_cast<int>(a2), a.max_seqlen_q = a3, a.max_seqlen_k = a4;
      a.q = t["q"], a.k = t["k"], a.v = t["v"], a.cu_seqlens_q = t["cu_seqlens_q"], a.cu_seqlens_k = t["cu_seqlens_k"];
      a.seqused_q = t["seqused_q"], a.seqused_k = t["seqused_k"], a.page_table = t["page_table"];
      a.o = t["out"], a.lse = t["lse"];
      cf::VarlenShape s;
      st = cf::check_varlen(a, &s);
    }
    std::printf("%s\n", st.ok() ? "ok" : st.message().c_str());
  }
  return 0;
}
