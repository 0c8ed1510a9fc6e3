// Prints, for each problem on stdin, what the C++ loader chooses: the kvcache forms and split
// count (choose_kvcache), and the dispatcher's choice for flash_attn (select with sizes and
// its num_splits parameter). tests/test_cpp_kvcache.py compares every line with Python's.
// Input lines: batch seqlen_q seqlen_k heads_q heads_kv head_dim causal paged sm_count num_splits pack_gqa dtype,
// or "varlen dtype head_dim causal paged [head_dim_v]": the varlen forward choose_varlen picks, or
// "model causal window_left window_right softcap sink batch seqlen_q seqlen_k heads_q heads_kv
// head_dim paged sm_count num_splits dtype": the model variant resolve_variant makes of the
// arguments, and what choose_kvcache, select (dense) and choose_varlen pick for it; a miss
// prints "error" and, on its own line, the message. "resolve causal window_left window_right
// softcap sink": what resolve_variant makes of the arguments (axes, then scalars), or the error.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"

namespace cf = cubinforge;

int main() {
  const cf::Bundle& bundle = cubinforge_bundle::kBundle;
  long long b, sq, sk, hq, hkv, d, sms;
  int causal, paged, splits, pack;
  std::string dtype;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    if (line.rfind("resolve", 0) == 0) {
      std::string word;
      int c = 0, sink = 0;
      long long wl = 0, wr = 0;
      std::string cap_text;
      in >> word >> c >> wl >> wr >> cap_text >> sink;
      cf::ModelVariant mv;
      const cf::Status st = cf::resolve_variant(c != 0, wl, wr, std::strtod(cap_text.c_str(), nullptr), sink != 0, &mv);
      if (!st.ok()) {
        std::printf("error %s\n", st.message().c_str());
        continue;
      }
      std::string scalars;
      for (const cf::NamedScalar& x : mv.scalars())
        scalars += std::string(" ") + x.name + "=" +
                   (cf::names_equal(x.name, "softcap") ? cf::py_float(x.value) : std::to_string(static_cast<long long>(x.value)));
      std::printf("%d %d %d %d%s\n", mv.causal, mv.local, mv.softcap, mv.learnable_sink, scalars.c_str());
      continue;
    }
    if (line.rfind("model", 0) == 0) {
      std::string word;
      int sink = 0;
      long long wl, wr;
      double cap;
      in >> word >> causal >> wl >> wr >> cap >> sink >> b >> sq >> sk >> hq >> hkv >> d >> paged >> sms >> splits >>
          dtype;
      cf::ModelVariant mv;
      if (!cf::resolve_variant(causal != 0, wl, wr, cap, sink != 0, &mv).ok()) {
        std::printf("bad\n");
        continue;
      }
      cf::KVCacheChoice c;
      const cf::Status kst = cf::choose_kvcache(bundle, "sm_90a", dtype.c_str(), static_cast<int>(d), mv.causal,
                                                paged != 0, b, sq, hq, hkv, sk, sms, splits, -1, &c, &mv);
      cf::ProblemSizes sizes;
      sizes.batch = b, sizes.seqlen_q = sq, sizes.seqlen_k = sk, sizes.heads_q = hq, sizes.heads_kv = hkv;
      sizes.sm_count = sms;
      const cf::Variant* v = nullptr;
      const cf::Status dst = cf::select(bundle, cf::attention_query("sm_90a", dtype, static_cast<int>(d), mv), sizes, &v);
      const cf::Variant* vl = nullptr;
      const cf::Status vst = cf::choose_varlen(bundle, "sm_90a", dtype.c_str(), static_cast<int>(d), mv.causal,
                                               paged != 0, &vl, &mv);
      std::string kv = kst.ok() ? std::string(c.forward->name) + " " + (c.combine ? c.combine->name : "-") + " " +
                                      std::to_string(c.plan.num_splits)
                                : std::string("error");
      std::printf("%s | %s | %s\n", kv.c_str(), dst.ok() ? v->name : "error", vst.ok() ? vl->name : "error");
      std::printf("%s\n", kst.ok() ? "-" : kst.message().c_str());
      continue;
    }
    if (line.rfind("varlen", 0) == 0) {
      std::string word;
      long long dv = -1;  // optional: v's head dim (head_dim_v), -1 as head_dim
      in >> word >> dtype >> d >> causal >> paged;
      if (!(in >> dv)) dv = -1;
      const cf::Variant* v = nullptr;
      const cf::Status st = cf::choose_varlen(bundle, "sm_90a", dtype.c_str(), static_cast<int>(d), causal != 0,
                                              paged != 0, &v, nullptr, static_cast<int>(dv));
      std::printf("%s\n", st.ok() ? v->name : "error");
      continue;
    }
    if (!(in >> b >> sq >> sk >> hq >> hkv >> d >> causal >> paged >> sms >> splits >> pack >> dtype)) continue;
    cf::KVCacheChoice c;
    cf::Status st = cf::choose_kvcache(bundle, "sm_90a", dtype.c_str(), static_cast<int>(d), causal != 0, paged != 0,
                                       b, sq, hq, hkv, sk, sms, splits, pack, &c);
    std::string kv = st.ok() ? std::string(c.forward->name) + " " + (c.combine ? c.combine->name : "-") + " " +
                                   std::to_string(c.plan.num_splits) + " " + (c.plan.pack_gqa ? "1" : "0")
                             : std::string("error");
    cf::ProblemSizes sizes;
    sizes.batch = b, sizes.seqlen_q = sq, sizes.seqlen_k = sk, sizes.heads_q = hq, sizes.heads_kv = hkv;
    sizes.sm_count = sms;
    const cf::Variant* v = nullptr;
    cf::SelectedParams params;
    std::vector<std::string> reasons;
    st = cf::select(bundle, cf::attention_query("sm_90a", dtype, static_cast<int>(d), causal != 0), sizes, &v,
                    &reasons, &params);
    long long ns = 0;
    for (const auto& p : params)
      if (p.first == "num_splits") ns = p.second;
    const long long ds = cf::decode_splits(b, sq, hq, hkv, sk, sms, *bundle.decode_plan);
    std::printf("%s | %s %lld | %lld\n", kv.c_str(), st.ok() ? v->name : "error", ns, ds);
  }
  return 0;
}
