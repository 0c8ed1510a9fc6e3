// Choosing a variant on the same axes, with the same rules, as the Python runtime
// (runtime/dispatch.py `rank`): the family, then every requested axis equal, with
// varlen/paged_kv/pack_gqa/split_kv false unless asked; among several matches the bundle's
// preferences (generated from dispatch.PREFERENCES) for the problem's sizes rank them, then
// the name (the bundle is sorted by name). As there, an active preference may choose a form
// axis (Bundle::form_axes: split_kv, pack_gqa) the query left out, and hands out launch
// parameters (num_splits) from a value derived from the sizes (decode_splits, decode.h); a
// derived axis left out (head_dim_v) means its source's value (Bundle::derived_axes). A miss
// says which requested value no variant has and which variants are nearest, so a caller sees
// at once what to build.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cubinforge/contract.h"
#include "cubinforge/decode.h"
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
// (set head_dim_v, softcap, local, learnable_sink on it for the model variants).
inline Query attention_query(const std::string& arch, const std::string& dtype, int head_dim, bool causal) {
  Query q;
  q.set("arch", arch).set("dtype", dtype).set("head_dim", head_dim).set("causal", causal);
  return q;
}

namespace detail {

inline bool asks(const Query& q, const std::string& key) {
  for (const auto& kv : q.items())
    if (kv.first == key) return true;
  return false;
}

inline bool axis_matches(const Variant& v, const std::string& key, const std::string& value) {
  const char* have = axis_value(v, key.c_str());
  return have != nullptr && value == have;
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

// A value derived from the sizes (dispatch.DERIVED), or false if `key` is none.
inline bool derived_value(const Bundle& b, const std::string& key, const ProblemSizes& s, int64_t* value) {
  if (key == "decode_splits" && b.decode_plan != nullptr) {
    *value = decode_splits(s.batch, s.seqlen_q, s.heads_q, s.heads_kv, s.seqlen_k, s.sm_count, *b.decode_plan);
    return true;
  }
  if (key == "gqa_group") {
    *value = gqa_group(s.heads_q, s.heads_kv);
    return true;
  }
  return false;
}

inline bool condition_holds(const Bundle& b, const PrefCondition& c, const Query& q, const ProblemSizes& sizes) {
  int64_t size = -1;
  const bool is_size = sizes.get(c.key, &size) || derived_value(b, c.key, sizes, &size);
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
// A derived axis (head_dim_v) left out takes its source's value (head_dim), as axes.with_defaults.
inline Query with_defaults(const Bundle& bundle, const Query& asked) {
  Query q(asked.family());
  for (int i = 0; i < bundle.num_default_axes; ++i) q.set(bundle.default_axes[i].key, bundle.default_axes[i].value);
  for (const auto& kv : asked.items()) q.set(kv.first, kv.second);
  for (int i = 0; i < bundle.num_derived_axes; ++i) {
    const DerivedAxis& d = bundle.derived_axes[i];
    if (detail::asks(asked, d.key)) continue;
    for (const auto& kv : asked.items())
      if (kv.first == d.source) q.set(d.key, kv.second);
  }
  return q;
}

// Launch parameters the choice hands out (num_splits for a split-KV form), by name.
using SelectedParams = std::vector<std::pair<std::string, int64_t>>;

inline Status select(const Bundle& bundle, const Query& asked, const ProblemSizes& sizes, const Variant** out,
                     std::vector<std::string>* reasons = nullptr, SelectedParams* params = nullptr) {
  *out = nullptr;
  if (params != nullptr) params->clear();
  const Query q = with_defaults(bundle, asked);
  std::vector<const Variant*> family;
  for (int i = 0; i < bundle.count; ++i)
    if (q.family().empty() || q.family() == bundle.variants[i].family) family.push_back(&bundle.variants[i]);
  std::vector<const Preference*> active;
  for (int i = 0; i < bundle.num_preferences; ++i) {
    const Preference& p = bundle.preferences[i];
    bool all = true;
    for (int j = 0; j < p.num_when && all; ++j) all = detail::condition_holds(bundle, p.when[j], q, sizes);
    if (all) active.push_back(&p);
  }
  // Form axes the query left out that an active preference prefers: either value fits.
  std::vector<std::pair<std::string, std::string>> freed;
  for (const Preference* p : active)
    for (int i = 0; i < p->num_prefer; ++i)
      for (int f = 0; f < bundle.num_form_axes; ++f)
        if (p->prefer[i].key == std::string(bundle.form_axes[f]) && !detail::asks(asked, p->prefer[i].key))
          freed.emplace_back(p->prefer[i].key, p->prefer[i].value);
  auto is_freed = [&](const std::string& key) {
    for (const auto& f : freed)
      if (f.first == key) return true;
    return false;
  };
  auto fits_query = [&](const Variant& v) {
    for (const auto& kv : q.items()) {
      if (detail::axis_matches(v, kv.first, kv.second)) continue;
      bool ok = false;
      for (const auto& f : freed) ok = ok || (f.first == kv.first && detail::axis_matches(v, f.first, f.second));
      if (!ok) return false;
    }
    return true;
  };
  // Lexicographic on the active preferences in order: a met earlier one outweighs any later.
  auto misses = [&](const Variant& v) {
    std::vector<bool> m;
    for (const Preference* p : active) m.push_back(!detail::meets(v, *p));
    return m;
  };
  int fits = 0;
  std::vector<const Variant*> fitting;
  for (const Variant* v : family) {
    if (!fits_query(*v)) continue;
    ++fits;
    fitting.push_back(v);
    if (*out == nullptr || misses(*v) < misses(**out)) *out = v;
  }
  if (*out != nullptr) {
    if (reasons != nullptr) {
      std::string matched;
      for (const auto& kv : q.items())
        if (!is_freed(kv.first)) matched += (matched.empty() ? "" : ", ") + kv.first + "=" + kv.second;
      reasons->push_back("matches " + matched);
      if (fits > 1) reasons->push_back(std::to_string(fits) + " variants fit");
      for (const Preference* p : active) {
        const char* note = "";
        if (!detail::meets(**out, *p)) {
          note = " - no fitting variant has it";
          for (const Variant* v : fitting)
            if (detail::meets(*v, *p)) note = " - outweighed by an earlier rule";
        }
        reasons->push_back(std::string(p->name) + ": " + p->why + note);
      }
      if (active.empty() && fits > 1) reasons->push_back("no preference applies to this problem; the first by name is taken");
      if (!freed.empty()) reasons->push_back("form axes not asked for: the rules above choose them");
    }
    for (const Preference* p : active) {
      if (!detail::meets(**out, *p)) continue;
      for (int i = 0; i < p->num_params; ++i) {
        int64_t value = -1;
        detail::derived_value(bundle, p->params[i].value, sizes, &value);
        if (params != nullptr) params->emplace_back(p->params[i].key, value);
        if (reasons != nullptr)
          reasons->push_back(std::string(p->name) + ": launch with " + p->params[i].key + "=" + std::to_string(value) +
                             " (" + p->params[i].value + ")");
      }
    }
    return Status::Ok();
  }

  std::string msg;
  // A derived axis nobody asked for (head_dim_v) is said once, beside its source (head_dim),
  // unless a variant's own value departs from its source's (as registry_source.choose).
  auto unasked_derived = [&](const std::string& key, const char** source) {
    for (int i = 0; i < bundle.num_derived_axes; ++i)
      if (key == bundle.derived_axes[i].key && !detail::asks(asked, key)) {
        *source = bundle.derived_axes[i].source;
        return true;
      }
    return false;
  };
  auto differs = [&](const Variant& v, const std::string& key, const std::string& value) {
    if (detail::axis_matches(v, key, value)) return false;
    const char* source = nullptr;
    if (unasked_derived(key, &source)) {
      const char* own = axis_value(v, key.c_str());
      const char* src = axis_value(v, source);
      return !(own && src && std::string(own) == src);
    }
    return true;
  };
  auto num_differences = [&](const Variant& v) {
    int n = 0;
    for (const auto& kv : q.items()) n += differs(v, kv.first, kv.second);
    return n;
  };
  std::string wanted;
  for (const auto& kv : q.items()) {
    const char* source = nullptr;
    if (!unasked_derived(kv.first, &source)) wanted += (wanted.empty() ? "" : ", ") + kv.first + "=" + kv.second;
  }
  msg = "no " + q.family() + " variant with " + wanted + " in this bundle.";
  if (family.empty()) {
    msg += " The bundle holds no " + q.family() + " variants at all (" + std::to_string(bundle.count) +
           " variants of other families).";
    return Status(CUDA_ERROR_NOT_FOUND, msg);
  }
  // What is missing: a requested value that no variant has, with the values there are.
  for (const auto& kv : q.items()) {
    const char* source = nullptr;
    if (unasked_derived(kv.first, &source)) continue;
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
    return num_differences(*a) < num_differences(*b);
  });
  const int best = num_differences(*family.front());
  msg += " Nearest:";
  for (size_t n = 0; n < family.size() && n < static_cast<size_t>(kNearestShown); ++n) {
    const Variant& v = *family[n];
    if (num_differences(v) != best) break;
    std::string diff;
    for (const auto& kv : q.items()) {
      if (!differs(v, kv.first, kv.second)) continue;
      const char* have = axis_value(v, kv.first.c_str());
      diff += (diff.empty() ? "" : ", ") + kv.first + "=" + (have ? have : "(none)");
    }
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
