// A host program that runs cubinforge attention through the C++ loader, with nothing but the
// bundle header, the loader headers and libcuda.
//
//   flash_attn_example --batch 2 --seqlen-q 512 --seqlen-k 512 --heads-q 16 --heads-kv 16
//                      --head-dim 128 --causal 1 --dtype bf16 --out /tmp/run
//
// It fills Q, K, V (b, s, h, d) with deterministic normal values (from --seed), runs the
// variant the bundle has for (device arch, dtype, head_dim, causal), and writes q.bin, k.bin,
// v.bin, o.bin, lse.bin (dense, row-major, raw element bits) and meta.json (shapes, dtype,
// variant, softmax_scale) into --out. check.py compares them with a float64 reference.
#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"
#include "example_util.h"

#ifndef CUBINFORGE_BUNDLE_DIR
#define CUBINFORGE_BUNDLE_DIR "."
#endif

namespace cf = cubinforge;

namespace {
using namespace cf_example;  // NOLINT: the examples' shared helpers

struct Options {
  int64_t batch = 2, seqlen_q = 512, seqlen_k = 512, heads_q = 8, heads_kv = 8, head_dim = 128;
  bool causal = false;
  std::string dtype = "bf16";
  std::string out = "cubinforge_out";
  std::string variant;                 // optional: run this variant instead of selecting
  std::string bundle_dir = CUBINFORGE_BUNDLE_DIR;
  uint64_t seed = 0;
  bool has_scale = false;
  double softmax_scale = 0.0;
};

bool parse_bool(const std::string& s) { return s == "1" || s == "true" || s == "True" || s == "yes"; }

bool parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return false;
    if (i + 1 >= argc) { std::fprintf(stderr, "missing value for %s\n", a.c_str()); return false; }
    const std::string v = argv[++i];
    if (a == "--batch") o->batch = std::atoll(v.c_str());
    else if (a == "--seqlen-q") o->seqlen_q = std::atoll(v.c_str());
    else if (a == "--seqlen-k") o->seqlen_k = std::atoll(v.c_str());
    else if (a == "--heads-q") o->heads_q = std::atoll(v.c_str());
    else if (a == "--heads-kv") o->heads_kv = std::atoll(v.c_str());
    else if (a == "--head-dim") o->head_dim = std::atoll(v.c_str());
    else if (a == "--causal") o->causal = parse_bool(v);
    else if (a == "--dtype") o->dtype = v;
    else if (a == "--out") o->out = v;
    else if (a == "--seed") o->seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--variant") o->variant = v;
    else if (a == "--bundle-dir") o->bundle_dir = v;
    else if (a == "--softmax-scale") { o->has_scale = true; o->softmax_scale = std::atof(v.c_str()); }
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return false; }
  }
  return true;
}

int fail(const cf::Status& st) {
  std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_args(argc, argv, &opt)) {
    std::fprintf(stderr,
                 "usage: %s [--batch B] [--seqlen-q SQ] [--seqlen-k SK] [--heads-q HQ] [--heads-kv HKV]\n"
                 "          [--head-dim D] [--causal 0|1] [--dtype bf16|fp16] [--seed N] [--softmax-scale S]\n"
                 "          [--variant NAME] [--bundle-dir DIR] [--out DIR]\n",
                 argv[0]);
    return 2;
  }
  const cf::DType dtype = opt.dtype == "fp16" ? cf::DType::fp16 : cf::DType::bf16;
  if (opt.dtype != "bf16" && opt.dtype != "fp16") {
    std::fprintf(stderr, "error: --dtype must be bf16 or fp16 (got %s)\n", opt.dtype.c_str());
    return 2;
  }

  // 1. A context, the device's arch, and the variant for this problem.
  CUcontext ctx = nullptr;
  cf::Status st = cf::init_primary_context(0, &ctx);
  if (!st.ok()) return fail(st);
  std::string arch;
  if (!(st = cf::current_arch(&arch)).ok()) return fail(st);
  const cf::Variant* variant = nullptr;
  // The problem's sizes let the bundle's dispatcher preferences choose as the Python runtime does.
  cf::ProblemSizes problem;
  problem.batch = opt.batch, problem.seqlen_q = opt.seqlen_q, problem.seqlen_k = opt.seqlen_k;
  problem.heads_q = opt.heads_q, problem.heads_kv = opt.heads_kv;
  st = opt.variant.empty()
           ? cf::select(cubinforge_bundle::kBundle,
                        cf::attention_query(arch, opt.dtype, static_cast<int>(opt.head_dim), opt.causal), problem,
                        &variant)
           : cf::find_variant(cubinforge_bundle::kBundle, opt.variant.c_str(), &variant);
  if (!st.ok()) return fail(st);
  cf::Kernel kernel;
  if (!(st = cf::Kernel::load(*variant, opt.bundle_dir, &kernel)).ok()) return fail(st);
  const cf::Contract& contract = kernel.contract();

  // 2. Inputs: (batch, seqlen, heads, head_dim), contiguous, deterministic normal values.
  SplitMix64 rng{opt.seed};
  std::map<std::string, int64_t> sizes = {{"batch", opt.batch},       {"seqlen_q", opt.seqlen_q},
                                          {"seqlen_k", opt.seqlen_k}, {"heads_q", opt.heads_q},
                                          {"heads_kv", opt.heads_kv}, {"head_dim", opt.head_dim}};
  struct Buffer { std::string name; cf::Tensor tensor; DeviceBuffer memory; };
  std::vector<Buffer> buffers(contract.num_tensors);
  for (int i = 0; i < contract.num_tensors; ++i) {
    // Every tensor's shape comes from the contract's dims, so an LSE layout change in the
    // generator needs no change here.
    const cf::TensorSpec& spec = contract.tensors[i];
    Buffer& b = buffers[i];
    b.name = spec.name;
    b.tensor.dtype = spec.dtype;
    b.tensor.rank = spec.rank;
    for (int d = 0; d < spec.rank; ++d) {
      if (spec.dims[d].symbol < 0) { b.tensor.shape[d] = spec.dims[d].size; continue; }
      const auto it = sizes.find(contract.symbols[spec.dims[d].symbol].name);
      if (it == sizes.end()) {
        std::fprintf(stderr, "error: %s dimension %d is symbol '%s', which this example does not set\n",
                     spec.name, d, contract.symbols[spec.dims[d].symbol].name);
        return 1;
      }
      b.tensor.shape[d] = it->second;
    }
    if (spec.role == cf::Role::input && spec.dtype != dtype) {
      std::fprintf(stderr, "error: %s is %s in the contract of %s\n", spec.name, cf::dtype_name(spec.dtype),
                   variant->name);
      return 1;
    }
    // Inputs dense; outputs laid out as the Python runtime allocates them.
    const int elem = cf::dtype_bytes(spec.dtype);
    padded_strides(&b.tensor, spec.role == cf::Role::input ? 1 : std::max(1, spec.align_bytes / elem));
    if (!(st = b.memory.allocate(span_bytes(b.tensor))).ok()) return fail(st);
    b.tensor.ptr = b.memory.get();
    if (spec.role == cf::Role::input) {
      std::vector<uint16_t> host(static_cast<size_t>(cf::numel(b.tensor)));
      for (auto& x : host) {
        const float f = static_cast<float>(rng.normal());
        x = dtype == cf::DType::bf16 ? float_to_bf16(f) : float_to_fp16(f);
      }
      if (!(st = cf::check_cu(cuMemcpyHtoD(b.tensor.ptr, host.data(), host.size() * 2), "cuMemcpyHtoD")).ok())
        return fail(st);
    }
  }

  // 3. Bind (validates every tensor, computes softmax_scale's default and the grid), launch.
  std::vector<cf::NamedTensor> args;
  for (const Buffer& b : buffers) args.push_back({b.name.c_str(), b.tensor});
  std::vector<cf::NamedScalar> scalars;
  if (opt.has_scale) scalars.push_back({"softmax_scale", opt.softmax_scale});
  cf::Bound bound;
  st = cf::bind(contract, args.data(), static_cast<int>(args.size()), scalars.data(),
                static_cast<int>(scalars.size()), &bound);
  if (!st.ok()) return fail(st);
  CUstream stream = nullptr;
  if (!(st = cf::check_cu(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")).ok()) return fail(st);
  if (!(st = cf::launch_bound(kernel, bound, stream)).ok()) return fail(st);
  if (!(st = cf::check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize (the kernel)")).ok()) return fail(st);
  cuStreamDestroy(stream);

  // 4. Everything to --out: raw dense arrays and a small JSON header.
  const int scale_index = cf::find_scalar(contract, "softmax_scale");
  const double scale = scale_index >= 0 ? bound.scalars[scale_index].as_double() : 0.0;
  std::string tensors_json;
  for (const Buffer& b : buffers) {
    std::vector<unsigned char> dense;
    if (!(st = download_dense(b.tensor, &dense)).ok()) return fail(st);
    const std::string file = b.name + ".bin";
    if (!write_file(opt.out + "/" + file, dense.data(), dense.size())) {
      std::fprintf(stderr, "error: cannot write %s/%s (does the directory exist?)\n", opt.out.c_str(), file.c_str());
      return 1;
    }
    const cf::TensorSpec& spec = contract.tensors[cf::find_tensor(contract, b.name.c_str())];
    std::string dims, shape;
    for (int d = 0; d < spec.rank; ++d) {
      dims += std::string(d ? ", " : "") +
              json_string(spec.dims[d].symbol >= 0 ? contract.symbols[spec.dims[d].symbol].name
                                                   : std::to_string(spec.dims[d].size));
      shape += std::string(d ? ", " : "") + std::to_string(b.tensor.shape[d]);
    }
    tensors_json += std::string(tensors_json.empty() ? "" : ",\n") + "    " + json_string(b.name) +
                    ": {\"file\": " + json_string(file) + ", \"dtype\": " + json_string(cf::dtype_name(b.tensor.dtype)) +
                    ", \"dims\": [" + dims + "], \"shape\": [" + shape + "]}";
  }
  char scale_text[64];
  std::snprintf(scale_text, sizeof scale_text, "%.17g", scale);
  const std::string meta = std::string("{\n") +
      "  \"variant\": " + json_string(variant->name) + ",\n" +
      "  \"arch\": " + json_string(arch) + ",\n" +
      "  \"dtype\": " + json_string(opt.dtype) + ",\n" +
      "  \"causal\": " + (opt.causal ? "true" : "false") + ",\n" +
      "  \"seed\": " + std::to_string(opt.seed) + ",\n" +
      "  \"softmax_scale\": " + scale_text + ",\n" +
      "  \"grid\": [" + std::to_string(bound.grid[0]) + ", " + std::to_string(bound.grid[1]) + ", " +
      std::to_string(bound.grid[2]) + "],\n" +
      "  \"tensors\": {\n" + tensors_json + "\n  }\n}\n";
  if (!write_file(opt.out + "/meta.json", meta.data(), meta.size())) return 1;
  std::printf("%s: grid %ux%ux%u, block %u, %u B dynamic smem; wrote %s/meta.json\n", variant->name,
              bound.grid[0], bound.grid[1], bound.grid[2], contract.block[0], contract.dynamic_smem_bytes,
              opt.out.c_str());
  return 0;  // buffers and the module are freed on scope exit; the primary context stays retained

}
