// Unit tests of the loader's pure parts: expressions, binding and validation, parameter
// packing, tensor-map requests, launch configuration, selection. No driver call is made, so it
// runs against a stub libcuda on a machine with no GPU. Built by tests/test_cpp_loader.py
// against a bundle rendered from runtime/cpp/tests/sample_manifests.py.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cubinforge/cubinforge.h"
#include "cubinforge_bundle.h"

namespace cf = cubinforge;

static int g_failures = 0, g_checks = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    ++g_checks;                                                              \
    if (!(cond)) {                                                           \
      ++g_failures;                                                          \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
    }                                                                        \
  } while (0)

#define CHECK_OK(status)                                                     \
  do {                                                                       \
    const cf::Status s_ = (status);                                          \
    ++g_checks;                                                              \
    if (!s_.ok()) {                                                          \
      ++g_failures;                                                          \
      std::printf("FAIL %s:%d: %s -> %s\n", __FILE__, __LINE__, #status,     \
                  s_.to_string().c_str());                                   \
    }                                                                        \
  } while (0)

// The call fails and its message contains `needle`.
#define CHECK_ERR(status, needle)                                            \
  do {                                                                       \
    const cf::Status s_ = (status);                                          \
    ++g_checks;                                                              \
    if (s_.ok() || s_.to_string().find(needle) == std::string::npos) {       \
      ++g_failures;                                                          \
      std::printf("FAIL %s:%d: %s\n  wanted an error with \"%s\", got: %s\n", \
                  __FILE__, __LINE__, #status, needle, s_.to_string().c_str()); \
    }                                                                        \
  } while (0)

// ---- expressions ---------------------------------------------------------------------------

static cf::Token num(int64_t v) { return {cf::Op::Int, v, 0.0, -1, -1, "n"}; }
static cf::Token real(double v) { return {cf::Op::Real, 0, v, -1, -1, "r"}; }
static cf::Token op(cf::Op o) { return {o, 0, 0.0, -1, -1, "op"}; }
static cf::Token sym(int i) { return {cf::Op::Symbol, 0, 0.0, static_cast<int16_t>(i), -1, "sym"}; }

static cf::Value eval(std::vector<cf::Token> tokens, const cf::Env& env = cf::Env(), cf::Status* st = nullptr) {
  cf::Expr e{tokens.data(), static_cast<int>(tokens.size()), "test"};
  cf::Value v;
  cf::Status s = cf::evaluate(e, env, &v);
  if (st) *st = s;
  else CHECK_OK(s);
  return v;
}

static cf::Status eval_status(std::vector<cf::Token> tokens, const cf::Env& env = cf::Env()) {
  cf::Status st;
  eval(std::move(tokens), env, &st);
  return st;
}

static void test_expressions() {
  using cf::Op;
  CHECK(eval({num(300), num(128), op(Op::CeilDiv)}).i == 3);
  CHECK(eval({num(256), num(128), op(Op::CeilDiv)}).i == 2);
  CHECK(eval({num(-7), num(2), op(Op::FloorDiv)}).i == -4);  // floor, as Python's //
  CHECK(eval({num(-7), num(2), op(Op::Mod)}).i == 1);        // sign of the divisor
  CHECK(eval({num(7), num(-2), op(Op::Mod)}).i == -1);
  CHECK(eval({num(-7), num(2), op(Op::CeilDiv)}).i == -3);
  cf::Value v = eval({num(7), num(2), op(Op::Div)});          // '/' is real division
  CHECK(v.real && v.f == 3.5);
  v = eval({num(3), real(0.5), op(Op::Mul)});                 // real as soon as one operand is
  CHECK(v.real && v.f == 1.5);
  v = eval({num(3), num(4), op(Op::Mul), num(5), op(Op::Add)});
  CHECK(!v.real && v.i == 17);
  CHECK(eval({num(3), num(9), op(Op::Min)}).i == 3);
  CHECK(eval({num(3), num(9), op(Op::Max)}).i == 9);
  CHECK(eval({num(3), num(3), op(Op::Eq)}).i == 1);
  CHECK(eval({num(3), num(4), op(Op::Ne)}).i == 1);
  CHECK(eval({num(4), num(3), op(Op::Lt)}).i == 0);
  CHECK(eval({num(3), num(3), op(Op::Le)}).i == 1);
  v = eval({num(128), op(Op::Rsqrt)});
  CHECK(v.real && v.f == 1.0 / std::sqrt(128.0));
  v = eval({num(128), op(Op::Rsqrt), op(Op::Log2eMul)});
  CHECK(v.real && v.f == (1.0 / std::sqrt(128.0)) * 1.4426950408889634);
  // Exact 64-bit integers: no rounding through double.
  CHECK(eval({num(INT64_C(9007199254740993)), num(1), op(Op::Add)}).i == INT64_C(9007199254740994));

  CHECK_ERR(eval_status({num(INT64_MAX), num(1), op(Op::Add)}), "overflow");
  CHECK_ERR(eval_status({num(1), num(0), op(Op::FloorDiv)}), "division by zero");
  CHECK_ERR(eval_status({num(1), num(0), op(Op::Div)}), "division by zero");
  CHECK_ERR(eval_status({num(1), op(Op::Add)}), "needs two operands");
  CHECK_ERR(eval_status({num(1), num(2)}), "leaves 2 values");
  CHECK_ERR(eval_status({num(0), op(Op::Rsqrt)}), "rsqrt");

  int64_t symbols[2] = {10, 20};
  bool bound[2] = {true, false};
  cf::Env env;
  env.symbols = symbols;
  env.symbol_bound = bound;
  env.num_symbols = 2;
  CHECK(eval({sym(0), num(3), op(Op::Mul)}, env).i == 30);
  CHECK_ERR(eval_status({sym(1)}, env), "not bound");
  CHECK_ERR(eval_status({sym(5)}, env), "unknown symbol");

  // sm_count: the persistent grid min(tiles, SMs); the launcher fills it from the device.
  const cf::Token sms{cf::Op::SmCount, 0, 0.0, 0, -1, "sm_count"};
  CHECK_ERR(eval_status({num(528), sms, op(Op::Min)}), "sm_count needs the launching device");
  env.sm_count = 132;
  CHECK(eval({num(528), sms, op(Op::Min)}, env).i == 132);
  CHECK(eval({num(100), sms, op(Op::Min)}, env).i == 100);
}

// ---- a problem for the sample bundle ---------------------------------------------------------

struct Problem {
  int64_t b = 2, sq = 300, sk = 500, hq = 8, hkv = 2, d = 128;
  cf::DType dtype = cf::DType::bf16;
  std::vector<cf::NamedTensor> tensors;

  // Dense (b, s, h, d) tensors and a dense (b, hq, sq) LSE at made-up, well aligned addresses.
  std::vector<cf::NamedTensor>& make() {
    tensors = {
        {"q", cf::make_contiguous(0x10000000, dtype, {b, sq, hq, d})},
        {"k", cf::make_contiguous(0x20000000, dtype, {b, sk, hkv, d})},
        {"v", cf::make_contiguous(0x30000000, dtype, {b, sk, hkv, d})},
        {"o", cf::make_contiguous(0x40000000, dtype, {b, sq, hq, d})},
        {"lse", cf::make_contiguous(0x50000000, cf::DType::f32, {b, hq, sq})},
    };
    return tensors;
  }
  cf::Tensor& get(const char* name) {
    for (auto& t : tensors)
      if (std::strcmp(t.name, name) == 0) return t.tensor;
    return tensors[0].tensor;
  }
};

static const cf::Contract& contract_of(const char* name) {
  const cf::Variant* v = nullptr;
  cf::Status st = cf::find_variant(cubinforge_bundle::kBundle, name, &v);
  if (!st.ok()) {
    std::printf("FATAL: %s\n", st.to_string().c_str());
    std::exit(2);
  }
  return *v->contract;
}

static cf::Status bind(const cf::Contract& c, std::vector<cf::NamedTensor>& t, cf::Bound* b,
                       std::vector<cf::NamedScalar> scalars = {}) {
  return cf::bind(c, t.data(), static_cast<int>(t.size()), scalars.data(), static_cast<int>(scalars.size()), b);
}

static void test_bind() {
  const cf::Contract& c = contract_of("fa3_fwd-sm_90a-bf16-hd128-causal");
  CHECK_OK(cf::validate_contract(c));
  Problem p;
  cf::Bound b;
  CHECK_OK(bind(c, p.make(), &b));
  CHECK(b.symbol("batch") == 2 && b.symbol("seqlen_q") == 300 && b.symbol("seqlen_k") == 500);
  CHECK(b.symbol("heads_q") == 8 && b.symbol("heads_kv") == 2 && b.symbol("head_dim") == 128);
  CHECK(b.grid[0] == 3 && b.grid[1] == 8 && b.grid[2] == 2);
  const int s = cf::find_scalar(c, "softmax_scale");
  CHECK(s >= 0 && b.scalars[s].real && b.scalars[s].f == 1.0 / std::sqrt(128.0));  // the default
  CHECK_OK(bind(c, p.make(), &b, {{"softmax_scale", 0.5}}));
  CHECK(b.scalars[s].f == 0.5);

  // A persistent grid, min(tiles, sm_count): given by the caller, or read off the current
  // device (the stub driver has none, so that path must fail with the driver's word).
  {
    const int16_t sq = static_cast<int16_t>(cf::find_symbol(c, "seqlen_q"));
    const int16_t hq = static_cast<int16_t>(cf::find_symbol(c, "heads_q"));
    const int16_t bt = static_cast<int16_t>(cf::find_symbol(c, "batch"));
    const cf::Token persistent[] = {
        {cf::Op::Symbol, 0, 0.0, sq, -1, "seqlen_q"}, {cf::Op::Int, 128, 0.0, -1, -1, "128"},
        {cf::Op::CeilDiv, 0, 0.0, -1, -1, "ceil_div"}, {cf::Op::Symbol, 0, 0.0, hq, -1, "heads_q"},
        {cf::Op::Mul, 0, 0.0, -1, -1, "*"}, {cf::Op::Symbol, 0, 0.0, bt, -1, "batch"},
        {cf::Op::Mul, 0, 0.0, -1, -1, "*"}, {cf::Op::SmCount, 0, 0.0, 0, -1, "sm_count"},
        {cf::Op::Min, 0, 0.0, -1, -1, "min"}};
    const cf::Token one_tok[] = {{cf::Op::Int, 1, 0.0, -1, -1, "1"}};
    cf::Contract pc = c;
    pc.grid[0] = cf::Expr{persistent, 9, "persistent grid"};
    pc.grid[1] = pc.grid[2] = cf::Expr{one_tok, 1, "1"};
    Problem pp;
    std::vector<cf::NamedTensor> args = pp.make();
    CHECK_OK(cf::bind(pc, args.data(), static_cast<int>(args.size()), nullptr, 0, &b, 132));
    CHECK(b.grid[0] == 3 * 8 * 2 && b.grid[1] == 1 && b.grid[2] == 1);  // 48 tiles < 132 SMs
    CHECK_OK(cf::bind(pc, args.data(), static_cast<int>(args.size()), nullptr, 0, &b, 20));
    CHECK(b.grid[0] == 20);
    CHECK_ERR(cf::bind(pc, args.data(), static_cast<int>(args.size()), nullptr, 0, &b), "cuCtxGetDevice");
  }

  // A size-1 contiguous dimension may have any stride (as in the Python runtime).
  Problem one;
  one.sq = 1;
  one.make();
  one.get("lse").strides[2] = 7;
  CHECK_OK(bind(c, one.tensors, &b));
}

static void test_validation_errors() {
  const cf::Contract& c = contract_of("fa3_fwd-sm_90a-bf16-hd128-causal");
  cf::Bound b;
  {
    Problem p;
    p.dtype = cf::DType::fp16;
    p.make();
    CHECK_ERR(bind(c, p.tensors, &b), "tensor 'q' has dtype fp16; variant fa3_fwd-sm_90a-bf16-hd128-causal takes bf16");
  }
  {
    Problem p;
    p.d = 96;
    p.make();
    CHECK_ERR(bind(c, p.tensors, &b), "head_dim is 96");
    CHECK_ERR(bind(c, p.tensors, &b), "accepts only head_dim = 128");
  }
  {
    Problem p;
    p.make();
    p.get("v").shape[2] = 4;  // v disagrees with k on heads_kv
    CHECK_ERR(bind(c, p.tensors, &b), "tensor 'v' dimension 2 (heads_kv) is 4, but heads_kv = 2 from tensor 'k' dimension 2");
  }
  {
    Problem p;
    p.hq = 6;
    p.hkv = 4;
    p.make();
    CHECK_ERR(bind(c, p.tensors, &b), "heads_q must be a multiple of heads_kv (MHA, GQA or MQA) (heads_q=6, heads_kv=4)");
  }
  {
    Problem p;
    p.make();
    p.get("q").ptr += 2;  // bf16-aligned, not 16-byte aligned
    CHECK_ERR(bind(c, p.tensors, &b), "tensor 'q' pointer 0x10000002 is not 16-byte aligned");
  }
  {
    Problem p;
    p.make();
    p.get("k").strides[3] = 2;
    CHECK_ERR(bind(c, p.tensors, &b), "tensor 'k' dimension 3 (head_dim) must be contiguous (stride 1)");
  }
  {
    Problem p;
    p.make();
    p.get("q").strides[1] = 8 * 128 + 4;  // 2056 B: not a multiple of 16
    CHECK_ERR(bind(c, p.tensors, &b), "tensor 'q' dimension 1 (seqlen_q) has stride 1028 elements (2056 bytes), not a multiple of 16 bytes");
  }
  {
    Problem p;
    p.make();
    p.get("lse") = cf::make_contiguous(0x50000000, cf::DType::f32, {2, 300});
    CHECK_ERR(bind(c, p.tensors, &b), "tensor 'lse' has rank 2; expected 3 (batch, heads_q, seqlen_q)");
  }
  {
    Problem p;
    p.make();
    p.tensors.pop_back();
    CHECK_ERR(bind(c, p.tensors, &b), "missing tensor 'lse' (batch, heads_q, seqlen_q)");
    p.tensors.push_back({"lse_out", cf::make_contiguous(0x50000000, cf::DType::f32, {2, 8, 300})});
    CHECK_ERR(bind(c, p.tensors, &b), "unknown tensor 'lse_out'; variant fa3_fwd-sm_90a-bf16-hd128-causal takes q, k, v, o, lse");
  }
  {
    Problem p;
    p.sk = 0;
    p.make();
    CHECK_ERR(bind(c, p.tensors, &b), "seqlen_k is 0 (tensor 'k' dimension 1); it must be at least 1");
  }
  {
    Problem p;
    p.make();
    p.get("q").ptr = 0;
    CHECK_ERR(bind(c, p.tensors, &b), "tensor 'q' has a null pointer");
    p.make();
    CHECK_ERR(bind(c, p.tensors, &b, {{"scale", 1.0}}), "unknown scalar 'scale'");
    CHECK_ERR(bind(c, p.tensors, &b, {{"softmax_scale", NAN}}), "must be a finite number");
  }
  {
    Problem p;
    p.b = 70000;  // grid z
    p.sq = p.sk = 1;
    p.make();
    CHECK_ERR(bind(c, p.tensors, &b), "batch must be at most 65535 (grid z) (batch=70000)");
  }
  // Errors carry the driver's name for the code, without asking the driver.
  const cf::Status st = cf::invalid("x");
  CHECK(st.code() == CUDA_ERROR_INVALID_VALUE && st.code_name() == "CUDA_ERROR_INVALID_VALUE");
  CHECK(st.to_string() == "CUDA_ERROR_INVALID_VALUE: x");
}

// ---- parameters ------------------------------------------------------------------------------

static std::vector<cf::TensorMapRequest> g_requests;

static cf::Status fake_encoder(const cf::TensorMapRequest& r, void* out) {
  g_requests.push_back(r);
  std::memset(out, 0xA0 + static_cast<int>(g_requests.size()), 128);  // marks where it landed
  return cf::Status::Ok();
}

template <typename T>
static T read_at(const cf::PackedParams& p, int offset) {
  T v;
  std::memcpy(&v, p.bytes + offset, sizeof v);
  return v;
}

static void test_pack_params() {
  const cf::Contract& c = contract_of("fa3_fwd-sm_90a-bf16-hd128-causal");
  Problem p;
  cf::Bound b;
  CHECK_OK(bind(c, p.make(), &b));
  static cf::PackedParams params;
  g_requests.clear();
  CHECK_OK(cf::pack_params(b, &params, fake_encoder));
  CHECK(params.num_params == 12 && params.size == 646);
  for (int i = 0; i < c.num_params; ++i) CHECK(params.pointers[i] == params.bytes + c.params[i].offset);
  CHECK(reinterpret_cast<uintptr_t>(params.bytes) % 128 == 0);

  // Coordinate structs: i32 shapes.
  CHECK(read_at<int32_t>(params, 0) == 300 && read_at<int32_t>(params, 4) == 8 && read_at<int32_t>(params, 8) == 2);
  CHECK(read_at<int32_t>(params, 12) == 500 && read_at<int32_t>(params, 16) == 2 && read_at<int32_t>(params, 20) == 2);
  CHECK(read_at<int32_t>(params, 36) == 300 && read_at<int32_t>(params, 40) == 8);
  // LSE {ptr, i32 (seqlen_q, heads_q, batch), pad, i64 strides (heads, batch)}.
  CHECK(read_at<uint64_t>(params, 48) == 0x50000000u);
  CHECK(read_at<int32_t>(params, 56) == 300 && read_at<int32_t>(params, 60) == 8 && read_at<int32_t>(params, 64) == 2);
  CHECK(read_at<int32_t>(params, 68) == 0);  // padding stays zero
  CHECK(read_at<int64_t>(params, 72) == 300 && read_at<int64_t>(params, 80) == 8 * 300);
  // Tensor maps at 128, 256, 384, 512, each the encoder's 128 bytes.
  CHECK(params.bytes[128] == 0xA1 && params.bytes[255] == 0xA1 && params.bytes[256] == 0xA2);
  CHECK(params.bytes[512] == 0xA4 && params.bytes[639] == 0xA4);
  // softmax_scale * log2(e), computed in double, rounded once to f32.
  CHECK(read_at<float>(params, 640) == static_cast<float>(1.0 / std::sqrt(128.0) * 1.4426950408889634));
  CHECK(params.bytes[644] == 0 && params.bytes[645] == 0);  // the 1-byte compile-time arguments

  // The tensor-map requests: dims innermost first, byte strides of dims 1.., the recipe.
  CHECK(g_requests.size() == 4);
  if (g_requests.size() == 4) {
    const cf::TensorMapRequest& q = g_requests[0];
    CHECK(q.dtype == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 && q.rank == 4);
    CHECK(reinterpret_cast<uintptr_t>(q.address) == 0x10000000u);
    CHECK(q.global_dim[0] == 128 && q.global_dim[1] == 300 && q.global_dim[2] == 8 && q.global_dim[3] == 2);
    CHECK(q.global_strides[0] == 8 * 128 * 2 && q.global_strides[1] == 128 * 2 &&
          q.global_strides[2] == 300 * 8 * 128 * 2);
    CHECK(q.box[0] == 64 && q.box[1] == 128 && q.box[2] == 1 && q.box[3] == 1);
    CHECK(q.element_strides[0] == 1 && q.element_strides[3] == 1);
    CHECK(q.swizzle == CU_TENSOR_MAP_SWIZZLE_128B && q.l2_promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
    CHECK(q.oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE && q.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE);
    const cf::TensorMapRequest& k = g_requests[1];
    CHECK(k.global_dim[1] == 500 && k.global_dim[2] == 2 && k.global_strides[0] == 2 * 128 * 2);
  }

  // An i32 field that cannot hold its value is an error, not a wrap.
  Problem big;
  big.b = 1;
  big.hq = big.hkv = 1;
  big.sq = big.sk = INT64_C(3000000000);
  big.make();
  cf::Bound bb;
  CHECK_OK(bind(c, big.tensors, &bb));
  static cf::PackedParams params2;
  CHECK_ERR(cf::pack_params(bb, &params2, fake_encoder), "does not fit in a 32-bit integer");

  // The encoder's failure names the parameter.
  struct Failing {
    static cf::Status encode(const cf::TensorMapRequest&, void*) {
      return cf::Status(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled failed");
    }
  };
  CHECK_ERR(cf::pack_params(b, &params2, Failing::encode), "parameter 5 (tma_q): cuTensorMapEncodeTiled failed");
}

static void test_launch_config() {
  const cf::Contract& c90 = contract_of("fa3_fwd-sm_90a-bf16-hd128-causal");
  Problem p;
  cf::Bound b;
  CHECK_OK(bind(c90, p.make(), &b));
  CUlaunchAttribute attr;
  CUlaunchConfig cfg = cf::launch_config(c90, b, reinterpret_cast<CUstream>(0x1234), &attr);
  CHECK(cfg.gridDimX == 3 && cfg.gridDimY == 8 && cfg.gridDimZ == 2);
  CHECK(cfg.blockDimX == 384 && cfg.blockDimY == 1 && cfg.sharedMemBytes == 164864);
  CHECK(cfg.hStream == reinterpret_cast<CUstream>(0x1234));
  CHECK(cfg.numAttrs == 0 && cfg.attrs == nullptr);  // cluster 1x1x1: no attribute

  const cf::Contract& c100 = contract_of("fa3_fwd-sm_100a-bf16-hd128-causal");
  CHECK_OK(bind(c100, p.make(), &b));
  cfg = cf::launch_config(c100, b, nullptr, &attr);
  CHECK(cfg.numAttrs == 1 && cfg.attrs == &attr);
  CHECK(attr.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  CHECK(attr.value.clusterDim.x == 2 && attr.value.clusterDim.y == 1 && attr.value.clusterDim.z == 1);
}

// ---- selection -------------------------------------------------------------------------------

static void test_select() {
  const cf::Bundle& bundle = cubinforge_bundle::kBundle;
  CHECK(bundle.count == 7);
  for (int i = 0; i < bundle.count; ++i) CHECK_OK(cf::validate_contract(*bundle.variants[i].contract));

  const cf::Variant* v = nullptr;
  CHECK_OK(cf::select(bundle, cf::attention_query("sm_90a", "bf16", 128, true), &v));
  CHECK(v && std::string(v->name) == "fa3_fwd-sm_90a-bf16-hd128-causal");
  CHECK_OK(cf::select(bundle, cf::attention_query("sm_90a", "bf16", 64, false), &v));
  CHECK(v && std::string(v->name) == "fa3_fwd-sm_90a-bf16-hd64");
  CHECK_OK(cf::select(bundle, cf::attention_query("sm_100a", "bf16", 128, true), &v));
  CHECK(v && std::string(v->contract->arch) == "sm_100a");

  // Missing head_dim: what is missing, what exists, the nearest.
  cf::Status st = cf::select(bundle, cf::attention_query("sm_90a", "bf16", 96, true), &v);
  CHECK(st.code() == CUDA_ERROR_NOT_FOUND && v == nullptr);
  CHECK_ERR(st, "CUDA_ERROR_NOT_FOUND: no fa3_fwd variant with varlen=false, paged_kv=false, pack_gqa=false, split_kv=false, v_layout=rowmajor, descale_block=head, softcap=false, local=false, learnable_sink=false, arch=sm_90a, dtype=bf16, head_dim=96, causal=true in this bundle.");
  CHECK_ERR(st, "No fa3_fwd variant has head_dim=96 (available: 128, 64).");
  CHECK_ERR(st, "Nearest: fa3_fwd-sm_90a-bf16-hd128-causal (differs in head_dim=128); fa3_fwd-sm_90a-bf16-hd64-causal (differs in head_dim=64)");

  // A combination that does not exist although each value does: no "No ... has", nearest only.
  st = cf::select(bundle, cf::attention_query("sm_90a", "fp16", 64, true), &v);
  CHECK_ERR(st, "Nearest: fa3_fwd-sm_90a-bf16-hd64-causal (differs in dtype=bf16); fa3_fwd-sm_90a-fp16-hd128-causal (differs in head_dim=128)");
  CHECK(st.message().find("No fa3_fwd variant has") == std::string::npos);

  // A wrong arch (an Ampere device) lists the archs the bundle has.
  CHECK(cf::arch_for_compute_capability(9, 0) == "sm_90a");
  CHECK(cf::arch_for_compute_capability(10, 0) == "sm_100a");
  CHECK(cf::arch_for_compute_capability(8, 6) == "sm_86");
  st = cf::select(bundle, cf::attention_query(cf::arch_for_compute_capability(8, 6), "bf16", 128, true), &v);
  CHECK_ERR(st, "No fa3_fwd variant has arch=sm_86 (available: sm_100a, sm_90a).");

  // Another family, and a default axis asked otherwise.
  st = cf::select(bundle, cf::Query("fa3_bwd").set("arch", "sm_90a"), &v);
  CHECK_ERR(st, "The bundle holds no fa3_bwd variants at all");
  st = cf::select(bundle, cf::attention_query("sm_90a", "bf16", 128, true).set("varlen", true), &v);
  CHECK_ERR(st, "No fa3_fwd variant has varlen=true (available: false).");

  CHECK_ERR(cf::find_variant(bundle, "nope", &v), "no variant named nope");
}

// The generated preferences rank fitting variants by the problem's sizes, as dispatch.py does
// (tests/test_dispatch.py has the Python side of the same cases).
static void test_preferences() {
  const cf::Bundle& sample = cubinforge_bundle::kBundle;
  CHECK(sample.num_preferences >= 4 && sample.preferences != nullptr);
  const cf::Contract* c = sample.variants[0].contract;
  static const cf::Axis lpt[] = {{"arch", "sm_90a"}, {"dtype", "bf16"}, {"head_dim", "128"}, {"causal", "true"},
                                 {"varlen", "false"}, {"paged_kv", "false"}, {"pack_gqa", "false"},
                                 {"split_kv", "false"}, {"scheduler", "lpt"}};
  static const cf::Axis per[] = {{"arch", "sm_90a"}, {"dtype", "bf16"}, {"head_dim", "128"}, {"causal", "true"},
                                 {"varlen", "false"}, {"paged_kv", "false"}, {"pack_gqa", "false"},
                                 {"split_kv", "false"}, {"scheduler", "persistent"}};
  const cf::Variant vs[] = {{"fa3_fwd-hd128-causal-lpt", "fa3_fwd", lpt, 9, "", 0, nullptr, c},
                            {"fa3_fwd-hd128-causal-persistent", "fa3_fwd", per, 9, "", 0, nullptr, c}};
  const cf::Bundle b{vs, 2, sample.preferences, sample.num_preferences};
  const cf::Query q = cf::attention_query("sm_90a", "bf16", 128, true);
  const cf::Variant* v = nullptr;
  cf::ProblemSizes sizes;
  std::vector<std::string> reasons;
  sizes.seqlen_q = 512;
  CHECK_OK(cf::select(b, q, sizes, &v, &reasons));
  CHECK(v && std::string(v->name) == "fa3_fwd-hd128-causal-persistent");
  bool named = false;
  for (const auto& r : reasons) named = named || r.rfind("hd128-causal-short: ", 0) == 0;
  CHECK(named);
  sizes.seqlen_q = 3072;  // the rule's bound (runtime/dispatch.py hd128-causal-short)
  CHECK_OK(cf::select(b, q, sizes, &v));
  CHECK(v && std::string(v->name) == "fa3_fwd-hd128-causal-persistent");
  sizes.seqlen_q = 3073;
  CHECK_OK(cf::select(b, q, sizes, &v));
  CHECK(v && std::string(v->name) == "fa3_fwd-hd128-causal-lpt");
  // No sizes: no range holds, the first by name.
  CHECK_OK(cf::select(b, q, &v));
  CHECK(v && std::string(v->name) == "fa3_fwd-hd128-causal-lpt");
  // Another head dim: the hd128 rules do not apply, and nothing is substituted.
  CHECK(cf::select(b, cf::attention_query("sm_90a", "bf16", 64, true), sizes, &v).code() == CUDA_ERROR_NOT_FOUND);
}

static void test_bundle_cubins() {
  const cf::Bundle& bundle = cubinforge_bundle::kBundle;
  for (int i = 0; i < bundle.count; ++i) {
    const cf::Variant& v = bundle.variants[i];
    CHECK(std::strlen(v.cubin_sha256) == 64 && v.cubin_size > 0);
    if (cubinforge_bundle::kEmbedded) {
      CHECK(v.cubin_data != nullptr && std::memcmp(v.cubin_data, "\x7f" "ELF", 4) == 0);
      CHECK(reinterpret_cast<uintptr_t>(v.cubin_data) % 64 == 0);
    } else {
      CHECK(v.cubin_data == nullptr);
    }
  }
}

int main() {
  test_expressions();
  test_bind();
  test_validation_errors();
  test_pack_params();
  test_launch_config();
  test_select();
  test_preferences();
  test_bundle_cubins();
  std::printf("%d checks, %d failures (%s cubins)\n", g_checks, g_failures,
              cubinforge_bundle::kEmbedded ? "embedded" : "file");
  return g_failures == 0 ? 0 : 1;
}
