// Every CUDA op against the CPU reference (kernels/*.h), llama.cpp test-backend-ops style: seeded random
// inputs rounded to bf16, the CPU op on those values, the CUDA op, and a normalised error
// max|a - b| / max|b| (test::rel_err) against a per-op tolerance suited to bf16 activations.
// Shapes: the fixture models' sizes and Qwen3.5-35B-A3B's (GDN 16 k-heads / 32 v-heads, dims 128;
// attention 16 q / 2 kv heads, head dim 256, rotary 64; conv dim 8192; 256 experts, top 8).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/conv1d.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/model_glue.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/moe_grouped_mma.h"
#include "kernels/cuda/moe_small.h"
#include "kernels/cuda/moe_tiled.h"
#include "kernels/cuda/moe_tiled_sm90.h"
#include "kernels/cuda/sm90_host.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/transfer_operator.h"
#include "kernels/delta_rule.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/transfer_operator.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

// Tolerances (normalised max error).
constexpr float kTolBf16Out = 1.2e-2f;  // one bf16 rounding of the output, fp32 math
constexpr float kTolF32Out = 2e-3f;     // fp32 output of bf16 products
constexpr float kTolAttn = 2e-2f;       // P rounded to bf16 before P V
constexpr float kTolGdn = 3e-2f;        // WY products with bf16 operands over many chunks

// ---------------------------------------------------------------------------------------------------
TEST_F(CudaOps, PoolReusesBlocks) {
  void* a = pool.allocate(1000);
  pool.deallocate(a);
  void* b = pool.allocate(900);  // same size class
  EXPECT_EQ(a, b);
  EXPECT_EQ(pool.bytes_in_use(), DevicePool::size_class(900));
  pool.deallocate(b);
  pool.trim();
  EXPECT_EQ(pool.bytes_cached(), 0u);
}

TEST_F(CudaOps, UnsupportedShapeFailsLoudly) {
  AttentionShape s{1, 1, 4, 3, 64};  // Hq not a multiple of Hkv
  EXPECT_THROW(attention_prefill(s, nullptr, nullptr, nullptr, nullptr, nullptr, 1.0f, nullptr, nullptr),
               UnsupportedShape);
  GdnShape g{64, 1, 4, 4, 256, 128, };  // dk > 128
  EXPECT_THROW(gdn_chunked_prefill(g, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 64, nullptr, nullptr,
                                   nullptr, nullptr, nullptr),
               UnsupportedShape);
  // Both CUDA error kinds sit in hypic's one hierarchy, so `catch (const hypic::Error&)` sees them.
  EXPECT_THROW(attention_prefill(s, nullptr, nullptr, nullptr, nullptr, nullptr, 1.0f, nullptr, nullptr),
               hypic::ModelError);
  static_assert(std::is_base_of_v<hypic::DeviceError, CudaError>);
}

// A failed runtime call's error keeps the runtime's code, so a caller can tell running out of device memory from
// other failures (hypic_bench_model ends its batch list on it); no device needed.
TEST(CudaErrors, CarryTheRuntimesCode) {
  try {
    throw_cuda_error(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)", "here.cc", 7);
    FAIL() << "no throw";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_NE(std::string(e.what()).find("here.cc:7: cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation"),
              std::string::npos)
        << e.what();
  }
  try {
    throw_cublas_error(13, "cublasGemmEx(...)", "there.cc", 9);
    FAIL() << "no throw";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.code(), cudaErrorUnknown);
  }
}

// ---------------------------------------------------------------------------------------------------
struct GemmCase {
  int64_t M, K, N;
};

TEST_F(CudaOps, GemmMatchesCpu) {
  Blas blas;
  Stream st;
  for (const GemmCase c : {GemmCase{7, 64, 96}, GemmCase{33, 64, 448}, GemmCase{256, 2048, 1024}}) {
    const auto x = randn_bf16(c.M * c.K, 1), w = randn_bf16(c.N * c.K, 2, 0.05f);
    std::vector<float> ref(c.M * c.N);
    cpu::linear(x.data(), c.M, c.K, w.data(), DType::F32, c.N, ref.data());
    auto dx = to_device_bf16(pool, x), dw = to_device_bf16(pool, w);
    DevArray<float> y32(pool, c.M * c.N);
    DevArray<bf16> y16(pool, c.M * c.N);
    gemm_xwt(blas, dx.get(), c.M, c.K, c.K, dw.get(), c.N, y32.get(), DType::F32, c.N, false, st);
    gemm_xwt(blas, dx.get(), c.M, c.K, c.K, dw.get(), c.N, y16.get(), DType::BF16, c.N, false, st);
    st.synchronize();
    HYPIC_EXPECT_ERR_LT(rel_err(y32.download(), ref), kTolF32Out) << c.M << "x" << c.K << "x" << c.N;
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(y16), ref), kTolBf16Out) << c.M << "x" << c.K << "x" << c.N;
    // Accumulate: y += x W^T.
    gemm_xwt(blas, dx.get(), c.M, c.K, c.K, dw.get(), c.N, y32.get(), DType::F32, c.N, true, st);
    st.synchronize();
    std::vector<float> twice(ref);
    for (auto& v : twice) v *= 2;
    HYPIC_EXPECT_ERR_LT(rel_err(y32.download(), twice), kTolF32Out);
  }
}

// ---------------------------------------------------------------------------------------------------
TEST_F(CudaOps, NormsMatchCpu) {
  Stream st;
  struct Case {
    int64_t rows, dim;
  };
  for (const Case c : {Case{37, 64}, Case{64, 2048}, Case{16 * 300, 256}, Case{32 * 50, 128}, Case{1, 4096},
                       Case{5, 1100}, Case{3, 768}}) {
    const auto x = randn_bf16(c.rows * c.dim, 3, 2.0f);
    const auto z = randn_bf16(c.rows * c.dim, 4);
    const auto w = hypic::test::randn(c.dim, 5, 0.3f);
    DevArray<float> dwt(pool, w), dx32(pool, x);
    auto dx = to_device_bf16(pool, x), dz = to_device_bf16(pool, z);
    DevArray<bf16> dy(pool, c.rows * c.dim);
    for (bool zc : {false, true}) {
      std::vector<float> ref(x.size());
      cpu::rmsnorm(x.data(), ref.data(), c.rows, c.dim, w.data(), 1e-6f, zc);
      rmsnorm(dx.get(), dy.get(), c.rows, c.dim, dwt.get(), 1e-6f, zc, st);
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dy), ref), kTolBf16Out) << "bf16 in, zc " << zc;
      rmsnorm(dx32.get(), dy.get(), c.rows, c.dim, dwt.get(), 1e-6f, zc, st);
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dy), ref), kTolBf16Out) << "f32 in, zc " << zc;
    }
    std::vector<float> ref(x.size());
    cpu::rmsnorm_gated_silu(x.data(), z.data(), ref.data(), c.rows, c.dim, w.data(), 1e-6f);
    rmsnorm_gated_silu(dx.get(), dz.get(), dy.get(), c.rows, c.dim, dwt.get(), 1e-6f, st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dy), ref), kTolBf16Out);
    ref = x;
    cpu::l2norm_rows(ref.data(), c.rows, c.dim, 1e-6f, 0.088f);
    l2norm_rows(dx.get(), c.rows, c.dim, 1e-6f, 0.088f, st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dx), ref), kTolBf16Out);
  }
}

// ---------------------------------------------------------------------------------------------------
TEST_F(CudaOps, RopeMatchesCpu) {
  Stream st;
  struct Case {
    int64_t rows, heads, hd, rot;
    double theta;
  };
  for (const Case c : {Case{19, 4, 32, 8, 1e7}, Case{300, 16, 256, 64, 1e7}, Case{300, 2, 256, 64, 1e7}}) {
    auto x = randn_bf16(c.rows * c.heads * c.hd, 6);
    std::vector<int64_t> pos(c.rows);
    for (int64_t r = 0; r < c.rows; ++r) pos[r] = (r * 977) % 40000;
    std::vector<float> ref = x;
    cpu::rope_apply(ref.data(), c.rows, c.heads, c.hd, c.rot, pos.data(), c.theta);
    auto dx = to_device_bf16(pool, x);
    DevArray<int64_t> dpos(pool, pos);
    rope_apply(dx.get(), c.rows, c.heads, c.hd, c.rot, dpos.get(), c.theta, st);
    auto got = from_device_bf16(dx);
    HYPIC_EXPECT_ERR_LT(rel_err(got, ref), kTolBf16Out) << "apply hd " << c.hd;
    // Shift the (device-rounded) rotated keys by 1234 positions.
    round_bf16(got);
    std::vector<float> ref2 = got;
    cpu::rope_shift(ref2.data(), c.rows, c.heads, c.hd, c.rot, 1234, c.theta);
    auto dk = to_device_bf16(pool, got);
    rope_shift(dk.get(), c.rows, c.heads, c.hd, c.rot, 1234, c.theta, st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dk), ref2), kTolBf16Out) << "shift hd " << c.hd;
  }
  // State re-rotation (fp32 states): [H, dk, dv].
  const int64_t H = 32, dk = 128, dv = 128, rot = 64;
  const auto S = hypic::test::randn(H * dk * dv, 7);
  std::vector<float> ref = S;
  cpu::rope_shift_state(ref.data(), H, dk, dv, rot, -777, 1e7);
  DevArray<float> dS(pool, S);
  rope_shift_state(dS.get(), H, dk, dv, rot, -777, 1e7, st);
  HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), ref), 1e-5f);
}

// ---------------------------------------------------------------------------------------------------
TEST_F(CudaOps, CausalConvMatchesCpuPrefillAndDecode) {
  Stream st;
  // C 96 and 8192: 8 channels per thread; C 100: one.
  for (const int64_t C : {int64_t{96}, int64_t{100}, int64_t{8192}}) {
    const int64_t K = 4;
    const auto w = randn_bf16(C * K, 8, 0.5f);
    auto tail = randn_bf16((K - 1) * C, 9);
    auto dtail = to_device_bf16(pool, tail);
    auto dw = to_device_bf16(pool, w);
    // Prefill of 100 tokens, then decode steps of 1 and a short span of 2 (< K - 1).
    for (const int64_t T : {int64_t{100}, int64_t{1}, int64_t{2}, int64_t{1}}) {
      const auto x = randn_bf16(T * C, 10 + uint32_t(T));
      std::vector<float> ref(T * C);
      cpu::causal_conv1d_silu(x.data(), T, C, w.data(), K, tail.data(), ref.data());
      auto dx = to_device_bf16(pool, x);
      DevArray<bf16> dout(pool, T * C);
      causal_conv1d_silu(dx.get(), T, C, dw.get(), K, dtail.get(), dout.get(), st);
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), ref), kTolBf16Out) << "C " << C << " T " << T;
      EXPECT_EQ(rel_err(from_device_bf16(dtail), tail), 0.0f) << "tail, C " << C << " T " << T;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The conv with the Gated DeltaNet split in the same pass, against the CPU conv then l2 norms, and against
// the two CUDA ops it replaces: v and the tails the same bits, q / k within a bf16 step (another sum order).
// Shapes: 35B-A3B's (16 heads of 128, C 8192), heads of 64 and of 256 (a whole warp a head); one sequence
// over a tail, then packed sequences (lengths below and above the tail's, one empty, one from zero).
TEST_F(CudaOps, CausalConvSplitMatchesConvThenSplit) {
  Stream st;
  struct Shape {
    int64_t Hk, dk, Hv, dv;
  };
  const int64_t K = 4, P = K - 1;
  for (const Shape& c : {Shape{16, 128, 32, 128}, Shape{2, 64, 4, 32}, Shape{1, 256, 2, 64}}) {
    SCOPED_TRACE("dk " + std::to_string(c.dk));
    const int64_t kd = c.Hk * c.dk, vd = c.Hv * c.dv, C = 2 * kd + vd;
    const float qs = 1.0f / std::sqrt(float(c.dk));
    const auto w = randn_bf16(C * K, 40, 0.5f);
    auto dw = to_device_bf16(pool, w);
    const std::vector<int64_t> lens = {100, 2, 0, 37};
    std::vector<int32_t> cu(1, 0);
    for (int64_t n : lens) cu.push_back(cu.back() + static_cast<int32_t>(n));
    const int64_t T = cu.back(), N = static_cast<int64_t>(lens.size());
    const auto x = randn_bf16(T * C, 41);
    auto dx = to_device_bf16(pool, x);
    DevArray<bf16> q(pool, T * kd), k(pool, T * kd), v(pool, T * vd), qa(pool, T * kd), ka(pool, T * kd),
        va(pool, T * vd), conv(pool, T * C);
    ConvSplit sp;
    sp.key_width = kd;
    sp.head = c.dk;
    sp.q_scale = qs;
    sp.q = q.get();
    sp.k = k.get();
    sp.v = v.get();
    ASSERT_TRUE(conv_split_supported(dx.get(), C, sp));
    // One sequence: the first 100 rows over a random tail.
    const int64_t T1 = lens[0];
    auto tail = randn_bf16(P * C, 42);
    auto dtail = to_device_bf16(pool, tail), dtail_a = to_device_bf16(pool, tail);
    causal_conv1d_silu_split(dx.get(), T1, C, dw.get(), K, dtail.get(), sp, st);
    causal_conv1d_silu(dx.get(), T1, C, dw.get(), K, dtail_a.get(), conv.get(), st);
    gdn_split_qkv(conv.get(), T1, c.Hk, c.dk, c.Hv, c.dv, qs, 1e-6f, qa.get(), ka.get(), va.get(), st);
    std::vector<float> ref(T1 * C);
    cpu::causal_conv1d_silu(x.data(), T1, C, w.data(), K, tail.data(), ref.data());
    round_bf16(ref);
    std::vector<float> rq(T1 * kd), rk(T1 * kd), rv(T1 * vd);
    for (int64_t t = 0; t < T1; ++t) {
      std::copy_n(ref.begin() + t * C, kd, rq.begin() + t * kd);
      std::copy_n(ref.begin() + t * C + kd, kd, rk.begin() + t * kd);
      std::copy_n(ref.begin() + t * C + 2 * kd, vd, rv.begin() + t * vd);
    }
    cpu::l2norm_rows(rq.data(), T1 * c.Hk, c.dk, 1e-6f, qs);
    cpu::l2norm_rows(rk.data(), T1 * c.Hk, c.dk, 1e-6f);
    auto head = [](const std::vector<float>& a, int64_t n) { return std::vector<float>(a.begin(), a.begin() + n); };
    HYPIC_EXPECT_ERR_LT(rel_err(head(from_device_bf16(q), T1 * kd), rq), kTolBf16Out);
    HYPIC_EXPECT_ERR_LT(rel_err(head(from_device_bf16(k), T1 * kd), rk), kTolBf16Out);
    HYPIC_EXPECT_ERR_LT(rel_err(head(from_device_bf16(v), T1 * vd), rv), kTolBf16Out);
    HYPIC_EXPECT_ERR_LT(rel_err(head(from_device_bf16(q), T1 * kd), head(from_device_bf16(qa), T1 * kd)), 5e-3f);
    HYPIC_EXPECT_ERR_LT(rel_err(head(from_device_bf16(k), T1 * kd), head(from_device_bf16(ka), T1 * kd)), 5e-3f);
    EXPECT_EQ(head(from_device_bf16(v), T1 * vd), head(from_device_bf16(va), T1 * vd));
    EXPECT_EQ(from_device_bf16(dtail), from_device_bf16(dtail_a)) << "advanced tail";
    // Packed sequences, each from its own tail (sequence 1 from zeros), tails written to other buffers.
    std::vector<DevArray<bf16>> tin, tout, tout_a;
    std::vector<const bf16*> pin;
    std::vector<bf16*> pout, pout_a;
    for (int64_t i = 0; i < N; ++i) {
      tin.push_back(to_device_bf16(pool, randn_bf16(P * C, 50 + uint32_t(i))));
      tout.emplace_back(pool, P * C);
      tout_a.emplace_back(pool, P * C);
      pin.push_back(i == 1 ? nullptr : tin.back().get());
      pout.push_back(tout.back().get());
      pout_a.push_back(tout_a.back().get());
    }
    DevArray<int32_t> dcu(pool, cu);
    DevArray<const bf16*> dpin(pool, pin);
    DevArray<bf16*> dpout(pool, pout), dpout_a(pool, pout_a);
    causal_conv1d_silu_split_varlen(dx.get(), dcu.get(), N, T, C, dw.get(), K, dpin.get(), dpout.get(), sp, st);
    causal_conv1d_silu_varlen(dx.get(), dcu.get(), N, T, C, dw.get(), K, dpin.get(), dpout_a.get(), conv.get(), st);
    gdn_split_qkv(conv.get(), T, c.Hk, c.dk, c.Hv, c.dv, qs, 1e-6f, qa.get(), ka.get(), va.get(), st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(q), from_device_bf16(qa)), 5e-3f);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(k), from_device_bf16(ka)), 5e-3f);
    EXPECT_EQ(from_device_bf16(v), from_device_bf16(va));
    for (int64_t i = 0; i < N; ++i)
      EXPECT_EQ(from_device_bf16(tout[i]), from_device_bf16(tout_a[i])) << "tail of sequence " << i;
  }
  // Shapes it does not take: a head of 96 channels, a misaligned output.
  ConvSplit bad;
  DevArray<bf16> buf(pool, 1024);
  bad.key_width = 96;
  bad.head = 96;
  bad.q = bad.k = bad.v = buf.get();
  EXPECT_FALSE(conv_split_supported(buf.get(), 384, bad));
  bad.key_width = 128;
  bad.head = 64;
  EXPECT_TRUE(conv_split_supported(buf.get(), 384, bad));
  bad.v = buf.get() + 1;
  EXPECT_FALSE(conv_split_supported(buf.get(), 384, bad));
}

// ---------------------------------------------------------------------------------------------------
TEST_F(CudaOps, ActivationsMatchCpu) {
  Stream st;
  const int64_t R = 45, I = 512;
  const auto gu = randn_bf16(R * 2 * I, 11, 2.0f);  // fused [R, 2I]: gate | up
  std::vector<float> gate(R * I), up(R * I);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < I; ++i) {
      gate[r * I + i] = gu[r * 2 * I + i];
      up[r * I + i] = gu[r * 2 * I + I + i];
    }
  std::vector<float> ref = gate;
  cpu::swiglu_inplace(ref.data(), up.data(), R * I);
  auto dgu = to_device_bf16(pool, gu);
  DevArray<bf16> dout(pool, R * I);
  swiglu(dgu.get(), 2 * I, dgu.get() + I, 2 * I, dout.get(), I, R, I, st);
  HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), ref), kTolBf16Out);
  // The 8-column form (above) and the scalar one (a misaligned up pointer) are the same math per element; the
  // in-place form the model uses (out = gate, row stride 2I) too.
  {
    DevArray<bf16> dscalar(pool, R * I);
    std::vector<float> shifted(R * I + 1, 0.0f);
    for (int64_t k = 0; k < R * I; ++k) shifted[k + 1] = up[k];
    auto dsh = to_device_bf16(pool, shifted);
    auto dg = to_device_bf16(pool, gate);
    swiglu(dg.get(), I, dsh.get() + 1, I, dscalar.get(), I, R, I, st);
    EXPECT_EQ(from_device_bf16(dscalar), from_device_bf16(dout)) << "scalar vs 8-column swiglu";
    auto dinplace = to_device_bf16(pool, gu);
    swiglu(dinplace.get(), 2 * I, dinplace.get() + I, 2 * I, dinplace.get(), 2 * I, R, I, st);
    const std::vector<float> ip = from_device_bf16(dinplace), o = from_device_bf16(dout);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < I; ++c) ASSERT_EQ(ip[r * 2 * I + c], o[r * I + c]) << "in place, row " << r;
  }

  ref = gate;
  cpu::silu_inplace(ref.data(), R * I);
  auto dg = to_device_bf16(pool, gate);
  silu_inplace(dg.get(), R * I, st);
  HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dg), ref), kTolBf16Out);

  ref = gate;
  for (size_t i = 0; i < ref.size(); ++i) ref[i] *= cpu::sigmoid(up[i]);
  auto dx = to_device_bf16(pool, gate), du = to_device_bf16(pool, up);
  sigmoid_mul(dx.get(), I, du.get(), I, R, I, st);
  HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dx), ref), kTolBf16Out);
  // The gate read with a row stride (the up half of the fused rows; the 8-column form), then n % 8 != 0 (the
  // scalar form): the columns past n untouched.
  auto dy = to_device_bf16(pool, gate);
  sigmoid_mul(dy.get(), I, dgu.get() + I, 2 * I, R, I, st);
  EXPECT_EQ(from_device_bf16(dy), from_device_bf16(dx)) << "strided gate";
  auto dz = to_device_bf16(pool, gate);
  sigmoid_mul(dz.get(), I, du.get(), I, R, I - 3, st);
  auto d0 = to_device_bf16(pool, gate);
  const std::vector<float> z = from_device_bf16(dz), full = from_device_bf16(dx), g0 = from_device_bf16(d0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < I; ++i)
      ASSERT_EQ(z[r * I + i], i < I - 3 ? full[r * I + i] : g0[r * I + i]) << "row " << r << " col " << i;
}

// ---------------------------------------------------------------------------------------------------
// Gated DeltaNet. The CPU reference takes q/k already expanded to the value heads.
struct GdnInputs {
  GdnShape s;
  std::vector<float> q, k, v, g, beta;  // q, k: [T, Hk, dk] (bf16-rounded, l2-normalised, q scaled)
  std::vector<float> qx, kx;            // expanded to [T, H, dk]
};

GdnInputs make_gdn(int64_t T, int64_t H, int64_t Hk, int64_t dk, int64_t dv, uint32_t seed) {
  GdnInputs in;
  in.s = GdnShape{T, 1, H, Hk, dk, dv};
  in.q = hypic::test::randn(T * Hk * dk, seed);
  in.k = hypic::test::randn(T * Hk * dk, seed + 1);
  hypic::test::l2norm_heads(in.q, dk);
  hypic::test::l2norm_heads(in.k, dk);
  for (auto& x : in.q) x /= std::sqrt(float(dk));
  round_bf16(in.q);
  round_bf16(in.k);
  in.v = randn_bf16(T * H * dv, seed + 2);
  in.g = hypic::test::uniform(T * H, seed + 3, -0.7f, -0.01f);
  in.beta = hypic::test::uniform(T * H, seed + 4, 0.05f, 0.95f);
  in.qx.resize(T * H * dk);
  in.kx.resize(T * H * dk);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / Hk);
      std::copy_n(&in.q[(t * Hk + kh) * dk], dk, &in.qx[(t * H + h) * dk]);
      std::copy_n(&in.k[(t * Hk + kh) * dk], dk, &in.kx[(t * H + h) * dk]);
    }
  return in;
}

std::vector<float> identity_ops(int64_t N, int64_t H, int64_t dk) {
  std::vector<float> T(N * H * dk * dk, 0.0f);
  for (int64_t i = 0; i < N * H; ++i)
    for (int64_t d = 0; d < dk; ++d) T[(i * dk + d) * dk + d] = 1.0f;
  return T;
}

struct GdnCase {
  int64_t T, H, Hk, dk, dv;
};

TEST_F(CudaOps, GdnChunkedMatchesCpuWithTransfer) {
  Stream st;
  for (const GdnCase c : {GdnCase{150, 4, 2, 16, 24}, GdnCase{64, 4, 4, 16, 16}, GdnCase{300, 32, 16, 128, 128},
                          GdnCase{1, 32, 16, 128, 128}}) {
    const GdnInputs in = make_gdn(c.T, c.H, c.Hk, c.dk, c.dv, 21);
    const cpu::DeltaRuleShape cs{c.T, c.H, c.dk, c.dv};
    const auto S0 = hypic::test::randn(c.H * c.dk * c.dv, 22, 0.3f);
    std::vector<float> S_ref = S0, o_ref(c.T * c.H * c.dv);
    cpu::delta_rule_recurrent(cs, in.qx.data(), in.kx.data(), in.v.data(), in.g.data(), in.beta.data(), S_ref.data(),
                              o_ref.data());
    std::vector<float> T_ref = identity_ops(1, c.H, c.dk);
    cpu::delta_rule_transfer(c.T, c.H, c.dk, in.kx.data(), in.g.data(), in.beta.data(), T_ref.data());

    auto dq = to_device_bf16(pool, in.q), dk = to_device_bf16(pool, in.k), dv = to_device_bf16(pool, in.v);
    DevArray<float> dg(pool, in.g), db(pool, in.beta), dS(pool, S0), dT(pool, identity_ops(1, c.H, c.dk));
    DevArray<bf16> dout(pool, c.T * c.H * c.dv);
    DevArray<unsigned char> ws(pool, gdn_chunked_workspace_bytes(in.s));
    gdn_chunked_prefill(in.s, dq.get(), dk.get(), dv.get(), dg.get(), db.get(), nullptr, c.T, dS.get(), dout.get(),
                        dT.get(), ws.get(), st);
    const std::string what = "T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " dk " + std::to_string(c.dk);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), kTolGdn) << "out, " << what;
    HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), kTolGdn) << "state, " << what;
    HYPIC_EXPECT_ERR_LT(rel_err(dT.download(), T_ref), kTolGdn) << "transfer, " << what;

    // Zero-start body state + transfer reproduce the state from S0 (the composition law on device).
    std::vector<float> zero(c.H * c.dk * c.dv, 0.0f);
    DevArray<float> dSb(pool, zero), dT2(pool, identity_ops(1, c.H, c.dk)), dS0(pool, S0), dOut(pool, zero.size());
    gdn_chunked_prefill(in.s, dq.get(), dk.get(), dv.get(), dg.get(), db.get(), nullptr, c.T, dSb.get(), nullptr,
                        dT2.get(), ws.get(), st);
    const TransferShape ts{TransferKind::Dense, c.H, c.dk, c.dv};
    const float* hT[1] = {dT2.get()};
    const float* hS0[1] = {dS0.get()};
    const float* hSb[1] = {dSb.get()};
    float* hO[1] = {dOut.get()};
    DevArray<const float*> pT(pool, std::vector<const float*>(hT, hT + 1)), pS0(pool, std::vector<const float*>(hS0, hS0 + 1)),
        pSb(pool, std::vector<const float*>(hSb, hSb + 1));
    DevArray<float*> pO(pool, std::vector<float*>(hO, hO + 1));
    transfer_apply_batched(ts, 1, pT.get(), pS0.get(), pSb.get(), pO.get(), st);
    HYPIC_EXPECT_ERR_LT(rel_err(dOut.download(), S_ref), kTolGdn) << "T S0 + S_body, " << what;
    // The one-item form with pointers by value (what the engine's composition calls).
    DevArray<float> dOne(pool, zero.size());
    transfer_apply(ts, dT2.get(), dS0.get(), dSb.get(), dOne.get(), st);
    HYPIC_EXPECT_ERR_LT(rel_err(dOne.download(), S_ref), kTolGdn) << "transfer_apply, " << what;
  }
}

TEST_F(CudaOps, GdnChunkedPackedSequences) {
  Stream st;
  const int64_t H = 32, Hk = 16, dk = 128, dv = 128;
  const std::vector<int32_t> cu = {0, 70, 70 + 130, 70 + 130 + 64};
  const int64_t T = cu.back(), N = 3;
  const GdnInputs in = make_gdn(T, H, Hk, dk, dv, 31);
  GdnShape s = in.s;
  s.N = N;
  const auto S0 = hypic::test::randn(N * H * dk * dv, 32, 0.3f);
  std::vector<float> S_ref = S0, o_ref(T * H * dv), T_ref = identity_ops(N, H, dk);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t b = cu[n], L = cu[n + 1] - cu[n];
    cpu::delta_rule_recurrent({L, H, dk, dv}, in.qx.data() + b * H * dk, in.kx.data() + b * H * dk,
                              in.v.data() + b * H * dv, in.g.data() + b * H, in.beta.data() + b * H,
                              S_ref.data() + n * H * dk * dv, o_ref.data() + b * H * dv);
    cpu::delta_rule_transfer(L, H, dk, in.kx.data() + b * H * dk, in.g.data() + b * H, in.beta.data() + b * H,
                             T_ref.data() + n * H * dk * dk);
  }
  auto dq = to_device_bf16(pool, in.q), dk_ = to_device_bf16(pool, in.k), dv_ = to_device_bf16(pool, in.v);
  DevArray<float> dg(pool, in.g), db(pool, in.beta), dS(pool, S0), dT(pool, identity_ops(N, H, dk));
  DevArray<int32_t> dcu(pool, cu);
  DevArray<bf16> dout(pool, T * H * dv);
  DevArray<unsigned char> ws(pool, gdn_chunked_workspace_bytes(s));
  gdn_chunked_prefill(s, dq.get(), dk_.get(), dv_.get(), dg.get(), db.get(), dcu.get(), 130, dS.get(), dout.get(),
                      dT.get(), ws.get(), st);
  HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), kTolGdn);
  HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), kTolGdn);
  HYPIC_EXPECT_ERR_LT(rel_err(dT.download(), T_ref), kTolGdn);
}

TEST_F(CudaOps, GdnRecurrentMatchesCpu) {
  Stream st;
  for (const GdnCase c : {GdnCase{1, 4, 2, 16, 24}, GdnCase{1, 32, 16, 128, 128}, GdnCase{5, 32, 16, 128, 128}}) {
    const int64_t N = 3, T = c.T;
    // N sequences of T tokens each, laid out [N, T, ...]: run the CPU per sequence.
    const GdnInputs in = make_gdn(N * T, c.H, c.Hk, c.dk, c.dv, 41);
    const auto S0 = hypic::test::randn(N * c.H * c.dk * c.dv, 42, 0.3f);
    std::vector<float> S_ref = S0, o_ref(N * T * c.H * c.dv);
    for (int64_t n = 0; n < N; ++n)
      cpu::delta_rule_recurrent({T, c.H, c.dk, c.dv}, in.qx.data() + n * T * c.H * c.dk,
                                in.kx.data() + n * T * c.H * c.dk, in.v.data() + n * T * c.H * c.dv,
                                in.g.data() + n * T * c.H, in.beta.data() + n * T * c.H,
                                S_ref.data() + n * c.H * c.dk * c.dv, o_ref.data() + n * T * c.H * c.dv);
    auto dq = to_device_bf16(pool, in.q), dk = to_device_bf16(pool, in.k), dv = to_device_bf16(pool, in.v);
    DevArray<float> dg(pool, in.g), db(pool, in.beta), dS(pool, S0);
    DevArray<bf16> dout(pool, o_ref.size());
    gdn_recurrent(GdnShape{T, N, c.H, c.Hk, c.dk, c.dv}, dq.get(), dk.get(), dv.get(), dg.get(), db.get(), dS.get(),
                  dout.get(), st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), kTolBf16Out) << "T " << T << " H " << c.H;
    HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), 1e-5f) << "T " << T << " H " << c.H;
    // The same with each sequence's state in its own buffer (continuous batching), in reverse order.
    const int64_t ns = c.H * c.dk * c.dv;
    std::vector<DevArray<float>> own;
    std::vector<float*> ptrs(N);
    for (int64_t n = 0; n < N; ++n) own.emplace_back(pool, std::vector<float>(S0.begin() + n * ns, S0.begin() + (n + 1) * ns));
    for (int64_t n = 0; n < N; ++n) ptrs[n] = own[n].get();
    DevArray<float*> dptrs(pool, ptrs);
    DevArray<bf16> dout2(pool, o_ref.size());
    gdn_recurrent(GdnShape{T, N, c.H, c.Hk, c.dk, c.dv}, dq.get(), dk.get(), dv.get(), dg.get(), db.get(), nullptr,
                  dout2.get(), st, dptrs.get());
    EXPECT_EQ(from_device_bf16(dout2), from_device_bf16(dout)) << "T " << T << " H " << c.H;
    const std::vector<float> packed = dS.download();
    for (int64_t n = 0; n < N; ++n)
      EXPECT_EQ(own[n].download(), std::vector<float>(packed.begin() + n * ns, packed.begin() + (n + 1) * ns))
          << "sequence " << n;
  }
}

// ---------------------------------------------------------------------------------------------------
TEST_F(CudaOps, TransferComposeBatchedMatchesCpu) {
  Stream st;
  for (const TransferKind kind : {TransferKind::Scalar, TransferKind::Diagonal, TransferKind::Dense}) {
    const TransferShape ts{kind, 32, 128, 128};
    const int64_t B = 3, nt = cpu::transfer_numel(ts), ns = cpu::state_numel(ts);
    std::vector<std::vector<float>> T1, T2, S0, Sb;
    std::vector<DevArray<float>> dT1, dT2, dS0, dSb, dOut, dTT;
    std::vector<const float*> pT1, pT2, pS0, pSb;
    std::vector<float*> pOut, pTT;
    for (int64_t b = 0; b < B; ++b) {
      T1.push_back(hypic::test::uniform(nt, 50 + b, -0.2f, 0.2f));
      T2.push_back(hypic::test::uniform(nt, 60 + b, -0.2f, 0.2f));
      S0.push_back(hypic::test::randn(ns, 70 + b));
      Sb.push_back(hypic::test::randn(ns, 80 + b));
      dT1.emplace_back(pool, T1[b]);
      dT2.emplace_back(pool, T2[b]);
      dS0.emplace_back(pool, S0[b]);
      dSb.emplace_back(pool, Sb[b]);
      dOut.emplace_back(pool, ns);
      dTT.emplace_back(pool, nt);
    }
    for (int64_t b = 0; b < B; ++b) {
      pT1.push_back(dT1[b].get());
      pT2.push_back(dT2[b].get());
      pS0.push_back(dS0[b].get());
      pSb.push_back(dSb[b].get());
      pOut.push_back(dOut[b].get());
      pTT.push_back(dTT[b].get());
    }
    DevArray<const float*> aT1(pool, pT1), aT2(pool, pT2), aS0(pool, pS0), aSb(pool, pSb);
    DevArray<float*> aOut(pool, pOut), aTT(pool, pTT);
    transfer_apply_batched(ts, B, aT1.get(), aS0.get(), aSb.get(), aOut.get(), st);
    transfer_compose_batched(ts, B, aT2.get(), aT1.get(), aTT.get(), st);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<float> ref(ns), tref(nt);
      cpu::transfer_apply(ts, T1[b].data(), S0[b].data(), Sb[b].data(), ref.data());
      cpu::transfer_compose(ts, T2[b].data(), T1[b].data(), tref.data());
      HYPIC_EXPECT_ERR_LT(rel_err(dOut[b].download(), ref), 1e-5f) << "apply kind " << int(kind);
      HYPIC_EXPECT_ERR_LT(rel_err(dTT[b].download(), tref), 1e-5f) << "compose kind " << int(kind);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Keys assembled like a stitch: two cached segments (positions 0..a-1 and a..a+b-1, stored out of order)
// plus fresh tokens; queries are the fresh tokens (and, for prefill, part of a segment's seam).
struct AttnCase {
  int64_t Tq, Tk, Hq, Hkv, d;
};

void run_attention(DevicePool& pool, const AttnCase& c, bool decode, uint32_t seed) {
  Stream st;
  const auto q = randn_bf16(c.Tq * c.Hq * c.d, seed), k = randn_bf16(c.Tk * c.Hkv * c.d, seed + 1),
             v = randn_bf16(c.Tk * c.Hkv * c.d, seed + 2);
  std::vector<int64_t> kpos(c.Tk), qpos(c.Tq);
  // Keys: second half of the cached positions first, then the first half (segments in any order).
  const int64_t half = c.Tk / 2;
  for (int64_t j = 0; j < c.Tk; ++j) kpos[j] = j < c.Tk - half ? j + half : j - (c.Tk - half);
  // Queries: the last Tq positions, plus one query before every key (it sees nothing: zero output).
  for (int64_t i = 0; i < c.Tq; ++i) qpos[i] = c.Tk - c.Tq + i;
  if (c.Tq > 2) qpos[1] = -1;
  const float scale = 1.0f / std::sqrt(float(c.d));
  std::vector<float> ref(c.Tq * c.Hq * c.d);
  cpu::attention({c.Tq, c.Tk, c.Hq, c.Hkv, c.d, c.d}, q.data(), k.data(), v.data(), qpos.data(), kpos.data(), scale,
                 ref.data());
  auto dq = to_device_bf16(pool, q), dk = to_device_bf16(pool, k), dv = to_device_bf16(pool, v);
  DevArray<int64_t> dqp(pool, qpos), dkp(pool, kpos);
  DevArray<bf16> dout(pool, ref.size());
  const AttentionShape s{c.Tq, c.Tk, c.Hq, c.Hkv, c.d};
  if (decode) {
    DevArray<unsigned char> ws(pool, attention_decode_workspace_bytes(s));
    attention_decode(s, dq.get(), dk.get(), dv.get(), dqp.get(), dkp.get(), scale, dout.get(), ws.get(), st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), ref), kTolBf16Out) << "decode Tk " << c.Tk << " d " << c.d;
  } else {
    attention_prefill(s, dq.get(), dk.get(), dv.get(), dqp.get(), dkp.get(), scale, dout.get(), st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), ref), kTolAttn) << "prefill Tq " << c.Tq << " Tk " << c.Tk << " d "
                                                              << c.d;
  }
}

TEST_F(CudaOps, AttentionPrefillMatchesCpu) {
  for (const AttnCase c : {AttnCase{40, 40, 4, 2, 32}, AttnCase{100, 333, 16, 2, 64}, AttnCase{130, 500, 16, 2, 128},
                           AttnCase{300, 700, 16, 2, 256}, AttnCase{1, 70, 16, 2, 256}})
    run_attention(pool, c, false, 90);
}

TEST_F(CudaOps, AttentionDecodeMatchesCpu) {
  // Groups of 8, 4 and 2 query heads per kv head at d 128 / 256 take the grouped walk; the rest per head.
  for (const AttnCase c : {AttnCase{1, 40, 4, 2, 32}, AttnCase{1, 3000, 16, 2, 256}, AttnCase{4, 1500, 16, 2, 128},
                           AttnCase{2, 5, 16, 2, 64}, AttnCase{3, 900, 8, 4, 256}, AttnCase{2, 2000, 16, 4, 128},
                           AttnCase{1, 9000, 16, 2, 256}})
    run_attention(pool, c, true, 95);
}

// Graph-replayable decode: the key count comes from the device, the cache holds more (stale) rows.
TEST_F(CudaOps, AttentionDecodeReadsKeyCountFromDevice) {
  Stream st;
  const int64_t cap = 2048, Hq = 16, Hkv = 2, d = 256;
  const auto q = randn_bf16(Hq * d, 300), k = randn_bf16(cap * Hkv * d, 301), v = randn_bf16(cap * Hkv * d, 302);
  std::vector<int64_t> kpos(cap), qpos = {5000};
  std::iota(kpos.begin(), kpos.end(), 0);  // every row would be visible: only the count limits the keys
  auto dq = to_device_bf16(pool, q), dk = to_device_bf16(pool, k), dv = to_device_bf16(pool, v);
  DevArray<int64_t> dqp(pool, qpos), dkp(pool, kpos);
  const AttentionShape s{1, cap, Hq, Hkv, d};
  DevArray<unsigned char> ws(pool, attention_decode_workspace_bytes(s));
  for (const int32_t n : {1, 700, 1500, 2048}) {
    std::vector<float> ref(Hq * d);
    cpu::attention({1, n, Hq, Hkv, d, d}, q.data(), k.data(), v.data(), qpos.data(), kpos.data(),
                   1.0f / std::sqrt(float(d)), ref.data());
    DevArray<int32_t> dn(pool, std::vector<int32_t>{n});
    DevArray<bf16> dout(pool, ref.size());
    attention_decode(s, dq.get(), dk.get(), dv.get(), dqp.get(), dkp.get(), 1.0f / std::sqrt(float(d)), dout.get(),
                     ws.get(), st, dn.get());
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), ref), kTolBf16Out) << n << " keys";
  }
}

TEST_F(CudaOps, KvAppendWritesAtTheDeviceOffset) {
  Stream st;
  for (const int64_t row : {int64_t{512}, int64_t{12}}) {
    const int64_t cap = 40, T = 3;
    const auto k0 = randn_bf16(cap * row, 310), v0 = randn_bf16(cap * row, 311);
    const auto kn = randn_bf16(T * row, 312), vn = randn_bf16(T * row, 313);
    auto dk = to_device_bf16(pool, k0), dv = to_device_bf16(pool, v0), dkn = to_device_bf16(pool, kn),
         dvn = to_device_bf16(pool, vn);
    DevArray<int64_t> dpos(pool, std::vector<int64_t>(cap, -1)), dpn(pool, std::vector<int64_t>{70, 71, 72});
    DevArray<int32_t> end(pool, std::vector<int32_t>{20});
    kv_append(dkn.get(), dvn.get(), dpn.get(), T, row, end.get(), cap, dk.get(), dv.get(), dpos.get(), st);
    auto ek = k0, ev = v0;
    std::copy(kn.begin(), kn.end(), ek.begin() + 17 * row);
    std::copy(vn.begin(), vn.end(), ev.begin() + 17 * row);
    std::vector<int64_t> epos(cap, -1);
    epos[17] = 70, epos[18] = 71, epos[19] = 72;
    EXPECT_EQ(from_device_bf16(dk), ek) << row;
    EXPECT_EQ(from_device_bf16(dv), ev) << row;
    EXPECT_EQ(dpos.download(), epos) << row;
  }
}

// Continuous batching: N sequences, each one query over its own cache (separate buffers, different
// lengths and capacities), in one launch bounded by the longest cache.
TEST_F(CudaOps, AttentionDecodeBatchedMatchesCpuPerSequence) {
  Stream st;
  for (const int64_t d : {int64_t{64}, int64_t{128}, int64_t{256}}) {
    const int64_t Hq = 16, Hkv = 2, row = Hkv * d;
    const std::vector<int64_t> lens = {1, 37, 700, 1500, 2};
    const int64_t N = static_cast<int64_t>(lens.size()), bound = 2048;
    const auto q = randn_bf16(N * Hq * d, 320);
    std::vector<std::vector<float>> ks, vs;
    std::vector<DevArray<bf16>> dks, dvs;
    std::vector<DevArray<int64_t>> dps;
    std::vector<KvSlot> slots;
    std::vector<int64_t> qpos(N);
    std::vector<float> ref(N * Hq * d);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t cap = lens[i] + 5;  // stale rows past the count must not be read
      ks.push_back(randn_bf16(cap * row, 330 + i));
      vs.push_back(randn_bf16(cap * row, 340 + i));
      std::vector<int64_t> pos(cap);
      std::iota(pos.begin(), pos.end(), 0);
      std::reverse(pos.begin(), pos.begin() + lens[i]);  // cached rows in any order
      std::fill(pos.begin() + lens[i], pos.end(), 0);     // stale rows: visible by position, so must not be read
      qpos[i] = lens[i] - 1 - (i == 2 ? 100 : 0);         // sequence 2's query sees only part of its keys
      cpu::attention({1, lens[i], Hq, Hkv, d, d}, q.data() + i * Hq * d, ks[i].data(), vs[i].data(), &qpos[i],
                     pos.data(), 1.0f / std::sqrt(float(d)), ref.data() + i * Hq * d);
      dks.push_back(to_device_bf16(pool, ks[i]));
      dvs.push_back(to_device_bf16(pool, vs[i]));
      dps.emplace_back(pool, pos);
    }
    for (int64_t i = 0; i < N; ++i)
      slots.push_back({dks[i].get(), dvs[i].get(), dps[i].get(), int32_t(lens[i]), int32_t(lens[i] + 5)});
    DevArray<KvSlot> dslots(pool, slots);
    DevArray<int64_t> dqp(pool, qpos);
    auto dq = to_device_bf16(pool, q);
    DevArray<bf16> dout(pool, ref.size());
    const AttentionShape s{N, bound, Hq, Hkv, d};
    DevArray<unsigned char> ws(pool, attention_decode_workspace_bytes(s));
    attention_decode_batched(s, dq.get(), dslots.get(), dqp.get(), 1.0f / std::sqrt(float(d)), dout.get(), ws.get(),
                             st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), ref), kTolBf16Out) << "d " << d;
  }
}

TEST_F(CudaOps, KvAppendBatchedWritesEachSequencesRow) {
  Stream st;
  for (const int64_t row : {int64_t{512}, int64_t{12}}) {
    const std::vector<int32_t> rows = {1, 20, 7};  // counts after the append: the new rows are 0, 19 and 6
    const int64_t N = 3, cap = 24;
    const auto kn = randn_bf16(N * row, 350), vn = randn_bf16(N * row, 351);
    auto dkn = to_device_bf16(pool, kn), dvn = to_device_bf16(pool, vn);
    DevArray<int64_t> dpn(pool, std::vector<int64_t>{90, 91, 92});
    std::vector<std::vector<float>> k0, v0;
    std::vector<DevArray<bf16>> dk, dv;
    std::vector<DevArray<int64_t>> dp;
    std::vector<KvSlot> slots;
    for (int64_t i = 0; i < N; ++i) {
      k0.push_back(randn_bf16(cap * row, 360 + i));
      v0.push_back(randn_bf16(cap * row, 370 + i));
      dk.push_back(to_device_bf16(pool, k0[i]));
      dv.push_back(to_device_bf16(pool, v0[i]));
      dp.emplace_back(pool, std::vector<int64_t>(cap, -1));
    }
    for (int64_t i = 0; i < N; ++i) slots.push_back({dk[i].get(), dv[i].get(), dp[i].get(), rows[i], int32_t(cap)});
    DevArray<KvSlot> dslots(pool, slots);
    kv_append_batched(dkn.get(), dvn.get(), dpn.get(), N, row, dslots.get(), st);
    for (int64_t i = 0; i < N; ++i) {
      auto ek = k0[i], ev = v0[i];
      const int64_t r = rows[i] - 1;
      std::copy(kn.begin() + i * row, kn.begin() + (i + 1) * row, ek.begin() + r * row);
      std::copy(vn.begin() + i * row, vn.begin() + (i + 1) * row, ev.begin() + r * row);
      std::vector<int64_t> epos(cap, -1);
      epos[r] = 90 + i;
      EXPECT_EQ(from_device_bf16(dk[i]), ek) << row << " sequence " << i;
      EXPECT_EQ(from_device_bf16(dv[i]), ev) << row << " sequence " << i;
      EXPECT_EQ(dp[i].download(), epos) << row << " sequence " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// MoE: CPU reference as in the forward pass (softmax, top-k, renormalise, per-expert SwiGLU MLP).
struct MoeCase {
  int64_t T, E, K, D, I;
};

// A MoE layer's inputs (x [T, D], router logits [T, E], per expert gate_up [2I, D] with the gate rows first
// and down [D, I]) and the CPU's routing (softmax, top-k, renormalised) and output (the activation kept
// in bf16, as on the device).
struct MoeReference {
  std::vector<float> x, logits, w, out;
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> wgu, wd;
};
MoeReference moe_reference(const MoeCase& c, float skew = 0.0f) {
  MoeReference m;
  m.x = randn_bf16(c.T * c.D, 100);
  m.logits = hypic::test::randn(c.T * c.E, 101, 2.0f);
  // skew > 0 favours the first experts: some get many tiles' worth of rows, many get none.
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t e = 0; e < std::min<int64_t>(c.E, 3); ++e) m.logits[t * c.E + e] += skew * float(3 - e);
  m.wgu.resize(c.E);
  m.wd.resize(c.E);
  for (int64_t e = 0; e < c.E; ++e) {
    m.wgu[e] = randn_bf16(2 * c.I * c.D, 200 + uint32_t(e), 0.05f);
    m.wd[e] = randn_bf16(c.D * c.I, 900 + uint32_t(e), 0.05f);
  }
  std::vector<float> probs = m.logits;
  m.out.assign(c.T * c.D, 0.0f);
  cpu::softmax_rows(probs.data(), c.T, c.E);
  m.ids.resize(c.T * c.K);
  m.w.resize(c.T * c.K);
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<int> order(c.E);
    std::iota(order.begin(), order.end(), 0);
    const float* p = probs.data() + t * c.E;
    std::partial_sort(order.begin(), order.begin() + c.K, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0;
    for (int64_t j = 0; j < c.K; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < c.K; ++j) {
      const int e = order[j];
      m.ids[t * c.K + j] = e;
      m.w[t * c.K + j] = p[e] / sum;
      std::vector<float> h(2 * c.I), y(c.D);
      cpu::linear(m.x.data() + t * c.D, 1, c.D, m.wgu[e].data(), DType::F32, 2 * c.I, h.data());
      cpu::swiglu_inplace(h.data(), h.data() + c.I, c.I);
      std::vector<float> act(h.begin(), h.begin() + c.I);
      round_bf16(act);  // the device keeps the activation in bf16
      cpu::linear(act.data(), 1, c.I, m.wd[e].data(), DType::F32, c.D, y.data());
      for (int64_t d = 0; d < c.D; ++d) m.out[t * c.D + d] += m.w[t * c.K + j] * y[d];
    }
  }
  return m;
}

TEST_F(CudaOps, MoeMatchesCpu) {
  Blas blas;
  Stream st;
  // The fourth case gives each expert ~100 rows: several 32-row passes of the tensor-core kernels.
  for (const MoeCase c : {MoeCase{13, 8, 2, 64, 32}, MoeCase{96, 256, 8, 512, 128}, MoeCase{24, 256, 8, 2048, 512},
                          MoeCase{200, 4, 2, 64, 96}}) {
    const MoeReference m = moe_reference(c);
    const auto& x = m.x;
    const auto& logits = m.logits;
    const auto& wgu = m.wgu;
    const auto& wd = m.wd;
    const auto& ref_ids = m.ids;
    const auto& ref_w = m.w;
    const auto& ref = m.out;
    // CUDA.
    auto dx = to_device_bf16(pool, x);
    DevArray<float> dlog(pool, logits), dw(pool, c.T * c.K);
    DevArray<int32_t> dids(pool, c.T * c.K);
    moe_route(dlog.get(), c.T, c.E, c.K, true, dids.get(), dw.get(), st);
    EXPECT_EQ(dids.download(), ref_ids) << "routing E " << c.E;
    HYPIC_EXPECT_ERR_LT(rel_err(dw.download(), ref_w), 1e-5f);
    DevArray<unsigned char> ws(pool, moe_plan_workspace_bytes(c.T, c.K, c.E));
    const MoePlan plan = moe_plan_from_workspace(ws.get(), c.T, c.K, c.E);
    std::vector<int32_t> counts(c.E);
    moe_plan(dids.get(), c.T, c.K, c.E, plan, counts.data(), st);
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), c.T * c.K);
    std::vector<DevArray<bf16>> dgu, ddown;
    std::vector<const bf16*> pgu, pdown;
    for (int64_t e = 0; e < c.E; ++e) {
      dgu.push_back(to_device_bf16(pool, wgu[e]));
      ddown.push_back(to_device_bf16(pool, wd[e]));
    }
    for (int64_t e = 0; e < c.E; ++e) {
      pgu.push_back(dgu[e].get());
      pdown.push_back(ddown[e].get());
    }
    const int64_t R = c.T * c.K;
    DevArray<bf16> xs(pool, R * c.D), h(pool, R * 2 * c.I), act(pool, R * c.I), ys(pool, R * c.D),
        out(pool, c.T * c.D);
    moe_gather(dx.get(), c.T, c.K, c.D, plan, xs.get(), st);
    moe_grouped_gemm(blas, xs.get(), c.D, pgu.data(), 2 * c.I, counts.data(), c.E, h.get(), st);
    swiglu(h.get(), 2 * c.I, h.get() + c.I, 2 * c.I, act.get(), c.I, R, c.I, st);
    moe_grouped_gemm(blas, act.get(), c.I, pdown.data(), c.D, counts.data(), c.E, ys.get(), st);
    moe_combine(ys.get(), c.T, c.K, c.D, plan, dw.get(), out.get(), false, st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(out), ref), 2 * kTolBf16Out) << "MoE E " << c.E << " D " << c.D;

    // The few-row path (no host sync) on the experts' contiguous blocks, from the same routing.
    std::vector<float> gu_all, down_all;
    for (int64_t e = 0; e < c.E; ++e) {
      gu_all.insert(gu_all.end(), wgu[e].begin(), wgu[e].end());
      down_all.insert(down_all.end(), wd[e].begin(), wd[e].end());
    }
    auto dgu_all = to_device_bf16(pool, gu_all), ddown_all = to_device_bf16(pool, down_all);
    DevArray<bf16> sact(pool, R * c.I), sout(pool, c.T * c.D);
    moe_small_gate_up(dx.get(), c.T, c.D, c.D, dids.get(), c.K, dgu_all.get(), c.I, sact.get(), st);
    moe_small_down_combine(sact.get(), c.T, c.K, c.I, dids.get(), dw.get(), ddown_all.get(), c.D, sout.get(), st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(sout), ref), 2 * kTolBf16Out) << "small MoE E " << c.E << " D " << c.D;

    // The expert-major path (device-only plan, each expert's weights read once for its rows).
    DevArray<unsigned char> ws2(pool, moe_plan_workspace_bytes(c.T, c.K, c.E));
    const MoePlan dplan = moe_plan_from_workspace(ws2.get(), c.T, c.K, c.E);
    moe_plan(dids.get(), c.T, c.K, c.E, dplan, nullptr, st);
    const int64_t slots = std::min(c.E, R);
    DevArray<int32_t> list(pool, slots);
    moe_expert_list(dplan.offsets, c.E, slots, list.get(), st);
    DevArray<bf16> gxs(pool, R * c.D), gact(pool, R * c.I), gys(pool, R * c.D), gout(pool, c.T * c.D);
    moe_gather(dx.get(), c.T, c.K, c.D, dplan, gxs.get(), st);
    moe_grouped_gate_up(gxs.get(), c.D, dplan.offsets, list.get(), slots, dgu_all.get(), c.I, gact.get(), st);
    moe_grouped_down(gact.get(), c.I, dplan.offsets, list.get(), slots, ddown_all.get(), c.D, gys.get(), st);
    moe_combine(gys.get(), c.T, c.K, c.D, dplan, dw.get(), gout.get(), false, st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(gout), ref), 2 * kTolBf16Out) << "expert-major MoE E " << c.E;
    // The same expert-major path on tensor cores.
    ASSERT_TRUE(moe_grouped_mma_supported(c.D, c.I));
    DevArray<bf16> mact(pool, R * c.I), mys(pool, R * c.D), mout(pool, c.T * c.D);
    moe_grouped_gate_up_mma(gxs.get(), c.D, dplan.offsets, list.get(), slots, dgu_all.get(), c.I, mact.get(), st);
    moe_grouped_down_mma(mact.get(), c.I, dplan.offsets, list.get(), slots, ddown_all.get(), c.D, mys.get(), st);
    moe_combine(mys.get(), c.T, c.K, c.D, dplan, dw.get(), mout.get(), false, st);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(mout), ref), 2 * kTolBf16Out) << "tensor-core MoE E " << c.E;
    // Both grouped paths round the same fp32 products of the same rows: the activations agree to bf16 rounding.
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(mact), from_device_bf16(gact)), kTolBf16Out) << "act E " << c.E;
    const std::vector<int32_t> got_list = list.download();
    int64_t used = 0;
    for (int64_t e = 0; e < c.E; ++e) used += counts[e] > 0;
    for (int64_t j = 0; j < slots; ++j) EXPECT_EQ(got_list[j] >= 0, j < used) << "expert list slot " << j;

    // The gate/up products reading the ungathered rows through the plan: the same bits as after moe_gather.
    DevArray<bf16> uact(pool, R * c.I);
    moe_grouped_gate_up_mma(dx.get(), c.D, dplan.offsets, list.get(), slots, dgu_all.get(), c.I, uact.get(), st,
                            dplan.src_token);
    EXPECT_EQ(from_device_bf16(uact), from_device_bf16(mact)) << "ungathered rows E " << c.E;
    // The weighted sum fused into the residual add: the same bits as moe_combine then residual_add.
    const auto h0 = hypic::test::randn(c.T * c.D, 102, 1.0f);
    const auto shared = randn_bf16(c.T * c.D, 103, 0.5f);
    const auto sgate = hypic::test::randn(c.T, 104, 1.0f);
    auto dshared = to_device_bf16(pool, shared);
    DevArray<float> dsgate(pool, sgate);
    for (const bool with_shared : {true, false}) {
      DevArray<float> h_two(pool, h0), h_one(pool, h0);
      residual_add(h_two.get(), mout.get(), with_shared ? dshared.get() : nullptr, with_shared ? dsgate.get() : nullptr,
                   c.T, c.D, st);
      moe_combine_residual(mys.get(), c.T, c.K, c.D, dplan, dw.get(), h_one.get(),
                           with_shared ? dshared.get() : nullptr, with_shared ? dsgate.get() : nullptr, st);
      EXPECT_EQ(h_one.download(), h_two.download()) << "combine + residual E " << c.E << " shared " << with_shared;
      // And the next norm in the same pass: h and x the same bits as the residual add then cuda::rmsnorm.
      const auto nw = hypic::test::randn(c.D, 105, 0.3f);
      DevArray<float> dnw(pool, nw), h_norm(pool, h0);
      DevArray<bf16> x_one(pool, c.T * c.D), x_two(pool, c.T * c.D);
      for (const bool zc : {false, true}) {
        h_norm.upload(h0);
        const bool one = moe_combine_residual_norm(mys.get(), c.T, c.K, c.D, dplan, dw.get(), h_norm.get(),
                                                   with_shared ? dshared.get() : nullptr,
                                                   with_shared ? dsgate.get() : nullptr, dnw.get(), 1e-6f, zc,
                                                   x_one.get(), st);
        EXPECT_EQ(one, c.D % 256 == 0) << "D " << c.D;
        if (!one) continue;
        rmsnorm(h_one.get(), x_two.get(), c.T, c.D, dnw.get(), 1e-6f, zc, st);
        EXPECT_EQ(h_norm.download(), h_one.download()) << "combine + residual + norm, h, E " << c.E;
        EXPECT_EQ(from_device_bf16(x_one), from_device_bf16(x_two)) << "combine + residual + norm, x, E " << c.E;
        std::vector<float> ref(size_t(c.T * c.D));
        cpu::rmsnorm(h_one.download().data(), ref.data(), c.T, c.D, nw.data(), 1e-6f, zc);
        HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(x_one), ref), kTolBf16Out);
      }
    }
    // The one-launch device plan: the same counts, offsets and expert list, every (token, slot) placed once
    // within its expert's rows; the whole path over it (no gather, fused combine) gives the same output.
    DevArray<unsigned char> ws3(pool, moe_plan_workspace_bytes(c.T, c.K, c.E));
    const MoePlan fplan = moe_plan_from_workspace(ws3.get(), c.T, c.K, c.E);
    DevArray<int32_t> flist(pool, slots);
    moe_plan_device(dids.get(), c.T, c.K, c.E, fplan, flist.get(), slots, st);
    st.synchronize();
    const auto raw = [](const int32_t* p, int64_t n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      HYPIC_CUDA_CHECK(cudaMemcpy(v.data(), p, sizeof(int32_t) * size_t(n), cudaMemcpyDeviceToHost));
      return v;
    };
    EXPECT_EQ(raw(fplan.counts, c.E), counts) << "plan counts E " << c.E;
    const auto offs = raw(fplan.offsets, c.E + 1);
    EXPECT_EQ(offs, raw(dplan.offsets, c.E + 1)) << "plan offsets E " << c.E;
    EXPECT_EQ(flist.download(), got_list) << "plan expert list E " << c.E;
    const auto fslot = raw(fplan.slot_row, R), fsrc = raw(fplan.src_token, R), hids = dids.download();
    std::vector<int> seen(size_t(R), 0);
    for (int64_t i = 0; i < R; ++i) {
      const int32_t row = fslot[i], e = hids[i];
      ASSERT_TRUE(row >= offs[e] && row < offs[e + 1]) << "slot " << i << " row " << row;
      EXPECT_EQ(fsrc[row], i / c.K) << "row " << row;
      ++seen[row];
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), R) << "every grouped row placed once";
    DevArray<bf16> fact(pool, R * c.I), fys(pool, R * c.D);
    DevArray<float> h_plan(pool, h0), h_ref(pool, h0);
    moe_grouped_gate_up_mma(dx.get(), c.D, fplan.offsets, flist.get(), slots, dgu_all.get(), c.I, fact.get(), st,
                            fplan.src_token);
    moe_grouped_down_mma(fact.get(), c.I, fplan.offsets, flist.get(), slots, ddown_all.get(), c.D, fys.get(), st);
    moe_combine_residual(fys.get(), c.T, c.K, c.D, fplan, dw.get(), h_plan.get(), dshared.get(), dsgate.get(), st);
    residual_add(h_ref.get(), mout.get(), dshared.get(), dsgate.get(), c.T, c.D, st);
    HYPIC_EXPECT_ERR_LT(rel_err(h_plan.download(), h_ref.download()), 1e-6f) << "device plan path E " << c.E;
  }
}

// The tiled path of a long prefill (moe_tiled.h): many rows per expert (several 128-row tiles, the last
// one partial), experts with none, the input rows read through the plan; against the CPU, and its
// activation against the few-row tensor-core kernels' (the same fp32 products, summed in another order).
TEST_F(CudaOps, MoeTiledMatchesCpu) {
  Stream st;
  struct TiledCase {
    MoeCase c;
    float skew;
  };
  // The Hopper form is on unless the run turned it off; the variable is restored after each forced run.
  const char* env = std::getenv("HYPIC_CUDA_MOE_SM90");
  const bool had_env = env != nullptr;
  const std::string saved = had_env ? env : "";
  const bool sm90_wanted = !(had_env && saved == "0");
  int sm90_cases = 0;
  // Expert tile counts: 4 each, 1 each, and skewed (many tiles for a few experts, none for many) twice.
  for (const TiledCase tc : {TiledCase{{2048, 16, 4, 256, 128}, 0.0f}, TiledCase{{1000, 64, 8, 512, 192}, 0.0f},
                             TiledCase{{300, 256, 8, 2048, 512}, 0.0f}, TiledCase{{700, 32, 2, 128, 64}, 3.0f},
                             TiledCase{{1500, 32, 4, 256, 128}, 2.0f}}) {
    const MoeCase c = tc.c;
    const MoeReference m = moe_reference(c, tc.skew);
    const int64_t R = c.T * c.K;
    ASSERT_TRUE(moe_tiled_supported(c.D, c.I, R, c.E));
    auto dx = to_device_bf16(pool, m.x);
    DevArray<float> dlog(pool, m.logits), dw(pool, R);
    DevArray<int32_t> dids(pool, R);
    moe_route(dlog.get(), c.T, c.E, c.K, true, dids.get(), dw.get(), st);
    ASSERT_EQ(dids.download(), m.ids) << "routing E " << c.E;
    std::vector<float> gu_all, down_all;
    for (int64_t e = 0; e < c.E; ++e) {
      gu_all.insert(gu_all.end(), m.wgu[e].begin(), m.wgu[e].end());
      down_all.insert(down_all.end(), m.wd[e].begin(), m.wd[e].end());
    }
    auto dgu = to_device_bf16(pool, gu_all), ddown = to_device_bf16(pool, down_all);
    DevArray<unsigned char> ws(pool, moe_plan_workspace_bytes(c.T, c.K, c.E));
    const MoePlan plan = moe_plan_from_workspace(ws.get(), c.T, c.K, c.E);
    moe_plan(dids.get(), c.T, c.K, c.E, plan, nullptr, st);
    const int64_t slots = moe_tile_slots(R, c.E);
    DevArray<int32_t> tiles(pool, 2 * slots);
    int2* dtiles = reinterpret_cast<int2*>(tiles.get());
    moe_tile_list(plan.offsets, c.E, dtiles, slots, st);
    DevArray<bf16> act(pool, R * c.I), ys(pool, R * c.D), out(pool, c.T * c.D);
    // Both forms: the Hopper kernels (where the device and shape take them) and the mma.sync ones.
    auto run_tiled = [&](bool sm90) {
      setenv("HYPIC_CUDA_MOE_SM90", sm90 ? "1" : "0", 1);
      moe_tiled_gate_up(dx.get(), c.D, plan.src_token, plan.offsets, c.E, dtiles, slots, dgu.get(), c.I, act.get(), st);
      moe_tiled_down(act.get(), c.I, plan.offsets, c.E, dtiles, slots, ddown.get(), c.D, ys.get(), st);
      moe_combine(ys.get(), c.T, c.K, c.D, plan, dw.get(), out.get(), false, st);
      if (had_env)
        setenv("HYPIC_CUDA_MOE_SM90", saved.c_str(), 1);
      else
        unsetenv("HYPIC_CUDA_MOE_SM90");
    };
    const bool sm90 =
        sm90_wanted && (moe_tiled_sm90_gate_up_applies(c.D, c.I) || moe_tiled_sm90_down_applies(c.D, c.I));
    sm90_cases += sm90;
    std::vector<float> sm90_act;
    if (sm90) {
      run_tiled(true);
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(out), m.out), 2 * kTolBf16Out) << "Hopper tiled MoE E " << c.E;
      sm90_act = from_device_bf16(act);
      // The epilogue's two forms (HYPIC_CUDA_MOE_SM90_EPI: per-warp staging, the default; straight from the
      // accumulators) write the same bits, partial tiles included.
      const auto bits = [](const DevArray<bf16>& a) {
        const std::vector<bf16> v = a.download();
        std::vector<uint16_t> b(v.size());
        std::memcpy(b.data(), v.data(), sizeof(uint16_t) * v.size());
        return b;
      };
      const std::vector<uint16_t> staged_act = bits(act), staged_ys = bits(ys);
      for (const char* form : {"0"}) {
        setenv("HYPIC_CUDA_MOE_SM90_EPI", form, 1);
        run_tiled(true);
        unsetenv("HYPIC_CUDA_MOE_SM90_EPI");
        EXPECT_EQ(bits(act), staged_act) << "epilogue " << form << ", gate/up, E " << c.E;
        EXPECT_EQ(bits(ys), staged_ys) << "epilogue " << form << ", down, E " << c.E;
      }
    }
    run_tiled(false);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(out), m.out), 2 * kTolBf16Out) << "tiled MoE E " << c.E;
    if (sm90) {
      HYPIC_EXPECT_ERR_LT(rel_err(sm90_act, from_device_bf16(act)), kTolBf16Out) << "Hopper vs mma.sync act E " << c.E;
    }

    // The tile list: every expert's rows covered once by tiles of 128 in expert order, then empty slots.
    st.synchronize();
    std::vector<int32_t> offs(size_t(c.E + 1));
    HYPIC_CUDA_CHECK(cudaMemcpy(offs.data(), plan.offsets, sizeof(int32_t) * offs.size(), cudaMemcpyDeviceToHost));
    const std::vector<int32_t> tl = tiles.download();
    int64_t i = 0;
    for (int64_t e = 0; e < c.E; ++e)
      for (int32_t r = offs[e]; r < offs[e + 1]; r += 128, ++i) {
        ASSERT_LT(i, slots);
        EXPECT_EQ(tl[2 * i], e) << "tile " << i;
        EXPECT_EQ(tl[2 * i + 1], r) << "tile " << i;
      }
    for (; i < slots; ++i) EXPECT_EQ(tl[2 * i], -1) << "empty tile slot " << i;

    // The plan and the tile list in one launch: the same counts, offsets and tiles; the rows within an
    // expert may come in another order, and the MoE's output is the same bits.
    {
      DevArray<bf16> act2(pool, R * c.I), ys2(pool, R * c.D), out2(pool, c.T * c.D);
      auto moe_out = [&](const MoePlan& p, const int2* t) {  // the default form, the given plan and tiles
        moe_tiled_gate_up(dx.get(), c.D, p.src_token, p.offsets, c.E, t, slots, dgu.get(), c.I, act2.get(), st);
        moe_tiled_down(act2.get(), c.I, p.offsets, c.E, t, slots, ddown.get(), c.D, ys2.get(), st);
        moe_combine(ys2.get(), c.T, c.K, c.D, p, dw.get(), out2.get(), false, st);
        return from_device_bf16(out2);
      };
      const std::vector<float> unfused_out = moe_out(plan, dtiles);
      DevArray<unsigned char> ws2(pool, moe_plan_workspace_bytes(c.T, c.K, c.E));
      const MoePlan fused = moe_plan_from_workspace(ws2.get(), c.T, c.K, c.E);
      DevArray<int32_t> tiles2(pool, 2 * slots);
      int2* dtiles2 = reinterpret_cast<int2*>(tiles2.get());
      moe_plan_tiles_device(dids.get(), c.T, c.K, c.E, fused, dtiles2, slots, kMoeTileRows, st);
      st.synchronize();
      std::vector<int32_t> offs2(size_t(c.E + 1));
      HYPIC_CUDA_CHECK(cudaMemcpy(offs2.data(), fused.offsets, sizeof(int32_t) * offs2.size(), cudaMemcpyDeviceToHost));
      EXPECT_EQ(offs2, offs) << "fused plan offsets E " << c.E;
      EXPECT_EQ(tiles2.download(), tl) << "fused plan tiles E " << c.E;
      std::vector<int32_t> src2(static_cast<size_t>(R)), slot2(static_cast<size_t>(R));
      HYPIC_CUDA_CHECK(cudaMemcpy(src2.data(), fused.src_token, sizeof(int32_t) * R, cudaMemcpyDeviceToHost));
      HYPIC_CUDA_CHECK(cudaMemcpy(slot2.data(), fused.slot_row, sizeof(int32_t) * R, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < R; ++r) ASSERT_EQ(src2[slot2[r]], r / c.K) << "slot " << r << " E " << c.E;
      EXPECT_EQ(moe_out(fused, dtiles2), unfused_out) << "MoE through the fused plan, E " << c.E;
    }

    // Against the few-row tensor-core kernels on the same plan.
    const int64_t eslots = std::min(c.E, R);
    DevArray<int32_t> list(pool, eslots);
    moe_expert_list(plan.offsets, c.E, eslots, list.get(), st);
    DevArray<bf16> mact(pool, R * c.I);
    moe_grouped_gate_up_mma(dx.get(), c.D, plan.offsets, list.get(), eslots, dgu.get(), c.I, mact.get(), st,
                            plan.src_token);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(act), from_device_bf16(mact)), kTolBf16Out) << "act E " << c.E;
  }
  // On an H100 / H200 the Hopper kernels took the cases whose shapes they support: gate/up at D 256 / I 128 (two
  // cases) and D 2048 / I 512, down at those and D 512 / I 192. (They measured bit-identical to the mma.sync kernels there:
  // the same k16 tensor-core products summed in the same k order.)
  if (current_device_is_sm90() && sm90_wanted) {
    EXPECT_EQ(sm90_cases, 4);
  }
}

// ---------------------------------------------------------------------------------------------------
// Sampling: the device against hypic::cpu::sample (what sdk::Session draws with) on the same draws, so
// one draw gives one token on every backend. Masses are summed in float on the device and in double on
// the host: a draw may differ only where it lies on the boundary between two kept ids.
// Whether cpu::sample draws `id` for some draw in [u - d, u + d] (bisection: the draw walks ids in order).
bool drawn_near(const float* x, int64_t V, const hypic::SamplingParams& p, double u, double d, int64_t id) {
  double lo = std::max(0.0, u - d), hi = std::min(1.0 - 1e-15, u + d);
  if (hypic::cpu::sample(x, V, p, lo) > id || hypic::cpu::sample(x, V, p, hi) < id) return false;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    const int64_t s = hypic::cpu::sample(x, V, p, mid);
    if (s == id) return true;
    (s < id ? lo : hi) = mid;
  }
  return hypic::cpu::sample(x, V, p, lo) == id || hypic::cpu::sample(x, V, p, hi) == id;
}

TEST_F(CudaOps, SamplingGivesTheCpuTokenForTheSameDraw) {
  Stream st;
  const int64_t B = 64;
  for (const int64_t V : {int64_t{448}, int64_t{151936}}) {
    auto logits = hypic::test::randn(B * V, 300, 3.0f);
    for (int64_t b = 0; b < B; b += 8) logits[b * V + 5] = logits[b * V + 9] = 40.0f;  // ties at the top
    DevArray<float> dl(pool, logits);
    DevArray<int32_t> dout(pool, B);
    argmax_rows(dl.get(), B, V, dout.get(), st);
    const auto am = dout.download();
    for (int64_t b = 0; b < B; ++b) EXPECT_EQ(am[b], hypic::cpu::argmax(logits.data() + b * V, V)) << b;
    for (const SamplingParams p : {SamplingParams{1.0f, 1, 1.0f, 7}, SamplingParams{0.8f, 40, 0.95f, 11},
                                   SamplingParams{1.2f, 0, 0.9f, 13}, SamplingParams{1.0f, 0, 1.0f, 17},
                                   SamplingParams{0.7f, 3, 1.0f, 19}, SamplingParams{1.5f, 0, 0.5f, 23}}) {
      sample_rows(dl.get(), B, V, p, dout.get(), st);
      const auto got = dout.download();
      int same = 0;
      for (int64_t b = 0; b < B; ++b) {
        const float* x = logits.data() + b * V;
        const double u = sampling_uniform(p.seed, uint64_t(b));
        const hypic::SamplingParams hp{p.temperature, p.top_k, p.top_p};
        const int64_t want = hypic::cpu::sample(x, V, hp, u);
        ASSERT_GE(got[b], 0);
        ASSERT_LT(got[b], V);
        if (got[b] == want) {
          ++same;
          continue;
        }
        // The device sums the masses in float: a draw on a boundary may land on the other side. The
        // device's token must be one cpu::sample gives for a draw within 1e-5 (the walk is monotone in u).
        EXPECT_TRUE(drawn_near(x, V, hp, u, 1e-5, got[b]))
            << "V " << V << " row " << b << " top_k " << p.top_k << " top_p " << p.top_p << ": device drew "
            << got[b] << ", cpu::sample " << want << " for u " << u;
      }
      std::printf("[ metrics  ] sampling V %ld top_k %d top_p %.2f T %.1f: %d of %ld draws identical to cpu::sample\n",
                  long(V), p.top_k, p.top_p, p.temperature, same, long(B));
      EXPECT_GE(same, B - B / 8) << "V " << V << " top_k " << p.top_k << " top_p " << p.top_p;
    }
  }
}

// Per-row draws (continuous batching): each row its own rule, draw and vocabulary limit; inactive rows
// untouched.
TEST_F(CudaOps, DrawRowsGivesEachRowTheCpuToken) {
  Stream st;
  const int64_t B = 24, ld = 1000;
  const auto logits = hypic::test::randn(B * ld, 400, 3.0f);
  std::vector<RowDraw> rows(B);
  for (int64_t b = 0; b < B; ++b) {
    const float temps[4] = {0.0f, 0.7f, 1.0f, 1.3f};
    rows[b] = {temps[b % 4], int32_t(b % 3 == 0 ? 0 : 20 + b), b % 5 == 0 ? 1.0f : 0.9f,
               float(sampling_uniform(77, uint64_t(b))), int32_t(ld - 37 * (b % 7)), b % 6 != 5};
  }
  DevArray<float> dl(pool, logits);
  DevArray<RowDraw> drows(pool, rows);
  DevArray<int32_t> dout(pool, std::vector<int32_t>(B, -7));
  draw_rows(dl.get(), B, ld, drows.get(), dout.get(), st);
  const auto got = dout.download();
  for (int64_t b = 0; b < B; ++b) {
    if (!rows[b].active) {
      EXPECT_EQ(got[b], -7) << "inactive row " << b;
      continue;
    }
    const float* x = logits.data() + b * ld;
    const hypic::SamplingParams hp{rows[b].temperature, rows[b].top_k, rows[b].top_p};
    const int64_t want = hypic::cpu::sample(x, rows[b].n, hp, rows[b].u);
    ASSERT_GE(got[b], 0);
    ASSERT_LT(got[b], rows[b].n) << "row " << b << " drew past its vocabulary";
    if (got[b] != want) {
      EXPECT_TRUE(drawn_near(x, rows[b].n, hp, rows[b].u, 1e-5, got[b])) << "row " << b;
    }
  }
}

}  // namespace
}  // namespace hypic::cuda::test
