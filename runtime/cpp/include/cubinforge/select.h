// Choosing a variant on the same axes, with the same rules, as the Python runtime
// (runtime/dispatch.py `rank`): the family, then every requested axis equal, with
// varlen/paged_kv/pack_gqa/split_kv false unless asked; among several matches the bundle's
// preferences (generated from dispatch.PREFERENCES) for the problem's sizes rank them, then
// the name (the bundle is sorted by name). A miss says which requested value no variant has
// and which variants are nearest, so a caller sees at once what to build.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cubinforge/contract.h"
#include "cubinforge/status.h"

namespace cubinforge {

// Requested axis values, in canonical form ("128", "true", "bf16"); axes not set match any.
class Query {
 public:
  // The family; the bundle supplies the default axes (Bundle::default_axes) at select().
  explicit Query(std::string family = "fa3_fwd") : family_(std::move(family)) {}

  Query& set(const std::string& key, const std::string& value) {
    for (auto& kv : items_)
      if (kv.first == key) { kv.second = value; return *this; }
    items_.emplace_back(key, value);
    return *this;
  }
  Query& set(const std::string& key, const char* value) { return set(key, std::string(value)); }
  Query& set(const std::string& key, bool value) { return set(key, std::string(value ? "true" : "false")); }
  Query& set(const std::string& key, int value) { return set(key, std::to_string(value)); }
  Query& set(const std::string& key, long long value) { return set(key, std::to_string(value)); }

  const std::string& family() const { return family_; }
  const std::vector<std::pair<std::string, std::string>>& items() const { return items_; }

  std::string to_string() const {
    std::string s;
    for (const auto& kv : items_) s += (s.empty() ? "" : ", ") + kv.first + "=" + kv.second;
    return s;
  }

 private:
  std::string family_;
  std::vector<std::pair<std::string, std::string>> items_;
};

// The usual attention query: the device's arch, dtype, head_dim, causal, V as wide as Q and K
// (set "head_dim_v", "softcap", "local", "learnable_sink" on it for the model variants).
inline Query attention_query(const std::string& arch, const std::string& dtype, int head_dim, bool causal) {
  Query q;
  q.set("arch", arch).set("dtype", dtype).set("head_dim", head_dim).set("causal", causal);
  return q;
}

namespace detail {

inline bool axis_matches(const Variant& v, const std::string& key, const std::string& value) {
  const char* have = axis_value(v, key.c_str());
  return have != nullptr && value == have;
}

// A query that leaves head_dim_v out asks for V as wide as Q and K (runtime/registry_source.py
// does the same): a variant whose head_dim_v differs from its head_dim differs from it.
inline const char* own_value_head_dim(const Variant& v, const Query& q) {
  for (const auto& kv : q.items())
    if (kv.first == "head_dim_v") return nullptr;
  const char* dv = axis_value(v, "head_dim_v");
  const char* d = axis_value(v, "head_dim");
  return dv && d && std::string(dv) != d ? dv : nullptr;
}

inline int count_differences(const Variant& v, const Query& q) {
  int n = 0;
  for (const auto& kv : q.items()) n += !axis_matches(v, kv.first, kv.second);
  return n + (own_value_head_dim(v, q) != nullptr);
}

}  // namespace detail

// The problem's sizes a preference may test; -1 means not given (no range on it holds).
struct ProblemSizes {
  int64_t batch = -1, seqlen_q = -1, seqlen_k = -1, heads_q = -1, heads_kv = -1, sm_count = -1;

  // The size named `key`, or false if `key` is not a size.
  bool get(const std::string& key, int64_t* value) const {
    const std::pair<const char*, int64_t> all[] = {{"batch", batch}, {"seqlen_q", seqlen_q}, {"seqlen_k", seqlen_k},
                                                   {"heads_q", heads_q}, {"heads_kv", heads_kv}, {"sm_count", sm_count}};
    for (const auto& kv : all)
      if (key == kv.first) { *value = kv.second; return true; }
    return false;
  }
};

namespace detail {

inline bool condition_holds(const PrefCondition& c, const Query& q, const ProblemSizes& sizes) {
  int64_t size = -1;
  const bool is_size = sizes.get(c.key, &size);
  if (c.equals == nullptr)
    return is_size && size >= 0 && (!c.has_low || size >= c.low) && (!c.has_high || size <= c.high);
  if (is_size) return size >= 0 && std::to_string(size) == c.equals;
  if (std::string(c.key) == "family") return q.family() == c.equals;
  for (const auto& kv : q.items())
    if (kv.first == c.key) return kv.second == c.equals;
  return false;
}

inline bool meets(const Variant& v, const Preference& p) {
  for (int i = 0; i < p.num_prefer; ++i)
    if (!axis_matches(v, p.prefer[i].key, p.prefer[i].value)) return false;
  return true;
}

}  // namespace detail

constexpr int kNearestShown = 8;

// The best variant for `q` and `sizes`; `reasons`, when given, receives why (as Python's).
// The query as select() matches it: the bundle's default axes first, then what was asked.
inline Query with_defaults(const Bundle& bundle, const Query& asked) {
  Query q(asked.family());
  for (int i = 0; i < bundle.num_default_axes; ++i) q.set(bundle.default_axes[i].key, bundle.default_axes[i].value);
  for (const auto& kv : asked.items()) q.set(kv.first, kv.second);
  return q;
}

inline Status select(const Bundle& bundle, const Query& asked, const ProblemSizes& sizes, const Variant** out,
                     std::vector<std::string>* reasons = nullptr) {
  *out = nullptr;
  const Query q = with_defaults(bundle, asked);
  std::vector<const Variant*> family;
  for (int i = 0; i < bundle.count; ++i)
    if (q.family().empty() || q.family() == bundle.variants[i].family) family.push_back(&bundle.variants[i]);
  std::vector<const Preference*> active;
  for (int i = 0; i < bundle.num_preferences; ++i) {
    const Preference& p = bundle.preferences[i];
    bool all = true;
    for (int j = 0; j < p.num_when && all; ++j) all = detail::condition_holds(p.when[j], q, sizes);
    if (all) active.push_back(&p);
  }
  // Lexicographic on the active preferences in order: a met earlier one outweighs any later.
  auto misses = [&](const Variant& v) {
    std::vector<bool> m;
    for (const Preference* p : active) m.push_back(!detail::meets(v, *p));
    return m;
  };
  int fits = 0;
  for (const Variant* v : family) {
    if (detail::count_differences(*v, q) != 0) continue;
    ++fits;
    if (*out == nullptr || misses(*v) < misses(**out)) *out = v;
  }
  if (*out != nullptr) {
    if (reasons != nullptr) {
      reasons->push_back("matches " + q.to_string());
      if (fits > 1) reasons->push_back(std::to_string(fits) + " variants fit");
      for (const Preference* p : active)
        reasons->push_back(std::string(p->name) + ": " + p->why +
                           (detail::meets(**out, *p) ? "" : " - no fitting variant has it"));
      if (active.empty() && fits > 1) reasons->push_back("no preference applies to this problem; the first by name is taken");
    }
    return Status::Ok();
  }

  std::string msg = "no " + q.family() + " variant with " + q.to_string() + " in this bundle.";
  if (family.empty()) {
    msg += " The bundle holds no " + q.family() + " variants at all (" + std::to_string(bundle.count) +
           " variants of other families).";
    return Status(CUDA_ERROR_NOT_FOUND, msg);
  }
  // What is missing: a requested value that no variant has, with the values there are.
  for (const auto& kv : q.items()) {
    std::vector<std::string> have;
    bool found = false;
    for (const Variant* v : family) {
      const char* value = axis_value(*v, kv.first.c_str());
      const std::string s = value ? value : "(none)";
      found = found || s == kv.second;
      if (std::find(have.begin(), have.end(), s) == have.end()) have.push_back(s);
    }
    if (found) continue;
    std::sort(have.begin(), have.end());
    std::string list;
    for (const auto& s : have) list += (list.empty() ? "" : ", ") + s;
    msg += " No " + q.family() + " variant has " + kv.first + "=" + kv.second + " (available: " + list + ").";
  }
  // The nearest: the variants with the fewest differing axes, each with what differs.
  std::stable_sort(family.begin(), family.end(), [&](const Variant* a, const Variant* b) {
    return detail::count_differences(*a, q) < detail::count_differences(*b, q);
  });
  const int best = detail::count_differences(*family.front(), q);
  msg += " Nearest:";
  for (size_t n = 0; n < family.size() && n < static_cast<size_t>(kNearestShown); ++n) {
    const Variant& v = *family[n];
    if (detail::count_differences(v, q) != best) break;
    std::string diff;
    for (const auto& kv : q.items()) {
      if (detail::axis_matches(v, kv.first, kv.second)) continue;
      const char* have = axis_value(v, kv.first.c_str());
      diff += (diff.empty() ? "" : ", ") + kv.first + "=" + (have ? have : "(none)");
    }
    if (const char* dv = detail::own_value_head_dim(v, q)) diff += (diff.empty() ? "" : ", ") + std::string("head_dim_v=") + dv;
    msg += std::string(n ? ";" : "") + " " + v.name + " (differs in " + diff + ")";
  }
  return Status(CUDA_ERROR_NOT_FOUND, msg);
}

// Without sizes: only preferences on exact axes can apply.
inline Status select(const Bundle& bundle, const Query& q, const Variant** out) {
  return select(bundle, q, ProblemSizes(), out);
}

// A variant by its canonical name.
inline Status find_variant(const Bundle& bundle, const char* name, const Variant** out) {
  for (int i = 0; i < bundle.count; ++i)
    if (names_equal(bundle.variants[i].name, name)) { *out = &bundle.variants[i]; return Status::Ok(); }
  *out = nullptr;
  return Status(CUDA_ERROR_NOT_FOUND, "no variant named " + std::string(name) + " in the bundle");
}

}  // namespace cubinforge
