// kda_chunked_prefill (outputs, final state, transfer operator) and kda_recurrent against the CPU reference
// (cpu::kda_recurrent / kda_transfer): tiny shapes, partial and whole chunks, packed batches with empty,
// one-token and chunk-multiple sequences, strong decay (e^Gam underflowing inside a chunk) and weak decay,
// zero and random initial states, the transfer operator alone, grouped q/k heads, odd value dims.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/kda.h"
#include "kernels/kda.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

constexpr float kTol = 3e-2f;  // as the GDN chunked tests: bf16 UT operands over many chunks

struct Case {
  std::vector<int32_t> cu;  // sequence offsets; one sequence when size 2
  int64_t H, Hk, dk, dv;
  float g_lo, g_hi;  // per-channel log decay ~ U(g_lo, g_hi)
  bool initial_state = true;
  bool want_out = true;
  bool want_state = true;  // false: the transfer operator alone
  bool want_transfer = true;  // false: outputs and state only (a continuation the engine does not cache)
};

struct Inputs {
  std::vector<float> q, k, v, g, beta, qx, kx;  // qx, kx: q/k expanded to the value heads (the CPU layout)
};

Inputs make_inputs(int64_t T, int64_t H, int64_t Hk, int64_t dk, int64_t dv, float g_lo, float g_hi, uint32_t seed) {
  Inputs in;
  in.q = hypic::test::randn(T * Hk * dk, seed);
  in.k = hypic::test::randn(T * Hk * dk, seed + 1);
  hypic::test::l2norm_heads(in.q, dk);
  hypic::test::l2norm_heads(in.k, dk);
  for (auto& x : in.q) x /= std::sqrt(float(dk));
  round_bf16(in.q);
  round_bf16(in.k);
  in.v = randn_bf16(T * H * dv, seed + 2);
  in.g = hypic::test::uniform(T * H * dk, seed + 3, g_lo, g_hi);
  in.beta = hypic::test::uniform(T * H, seed + 4, 0.05f, 0.95f);
  in.qx.resize(T * H * dk);
  in.kx.resize(T * H * dk);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(&in.q[(t * Hk + h / (H / Hk)) * dk], dk, &in.qx[(t * H + h) * dk]);
      std::copy_n(&in.k[(t * Hk + h / (H / Hk)) * dk], dk, &in.kx[(t * H + h) * dk]);
    }
  return in;
}

void run_chunked(DevicePool& pool, const Case& c) {
  const int64_t T = c.cu.back(), N = int64_t(c.cu.size()) - 1, H = c.H, Hk = c.Hk, dk = c.dk, dv = c.dv;
  const Inputs in = make_inputs(T, H, Hk, dk, dv, c.g_lo, c.g_hi, 101);
  const auto S0 = c.initial_state ? hypic::test::randn(N * H * dk * dv, 106, 0.3f)
                                  : std::vector<float>(N * H * dk * dv, 0.0f);
  std::vector<float> T0(N * H * dk * dk);
  for (int64_t i = 0; i < N * H * dk * dk; ++i) T0[i] = 0.1f * float((i * 7919) % 13) / 13.0f;  // not the identity
  for (int64_t m = 0; m < N * H; ++m)
    for (int64_t i = 0; i < dk; ++i) T0[(m * dk + i) * dk + i] += 1.0f;
  std::vector<float> S_ref = S0, T_ref = T0, o_ref(T * H * dv, 0.0f);
  int64_t max_len = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t b = c.cu[n], L = c.cu[n + 1] - c.cu[n];
    max_len = std::max(max_len, L);
    cpu::kda_recurrent({L, H, dk, dv}, in.qx.data() + b * H * dk, in.kx.data() + b * H * dk, in.v.data() + b * H * dv,
                       in.g.data() + b * H * dk, in.beta.data() + b * H, S_ref.data() + n * H * dk * dv,
                       o_ref.data() + b * H * dv);
    cpu::kda_transfer(L, H, dk, in.kx.data() + b * H * dk, in.g.data() + b * H * dk, in.beta.data() + b * H,
                      T_ref.data() + n * H * dk * dk);
  }

  const GdnShape s{T, N, H, Hk, dk, dv};
  auto dq = to_device_bf16(pool, in.q), dk_ = to_device_bf16(pool, in.k), dv_ = to_device_bf16(pool, in.v);
  DevArray<float> dg(pool, in.g), db(pool, in.beta), dS(pool, S0), dT(pool, T0);
  DevArray<int32_t> dcu(pool, c.cu);
  DevArray<bf16> dout(pool, T * H * dv);
  DevArray<unsigned char> ws(pool, kda_chunked_workspace_bytes(s));
  HYPIC_CUDA_CHECK(cudaMemset(ws.get(), 0xff, ws.n));  // padded tiles must not depend on old contents
  kda_chunked_prefill(s, dq.get(), dk_.get(), dv_.get(), dg.get(), db.get(), N > 1 ? dcu.get() : nullptr, max_len,
                      c.want_state ? dS.get() : nullptr, c.want_out ? dout.get() : nullptr,
                      c.want_transfer ? dT.get() : nullptr, ws.get(), nullptr);
  const std::string what = "T " + std::to_string(T) + " N " + std::to_string(N) + " H " + std::to_string(H) +
                           " Hk " + std::to_string(Hk) + " dk " + std::to_string(dk) + " dv " + std::to_string(dv) +
                           " g [" + std::to_string(c.g_lo) + ", " + std::to_string(c.g_hi) + "]" +
                           (c.initial_state ? " with S0" : " zero S0");
  if (c.want_out) {
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), kTol) << "out, " << what;
  }
  if (c.want_state) {
    HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), kTol) << "state, " << what;
  } else {
    EXPECT_EQ(dS.download(), S0) << "the state is not touched without it, " << what;
  }
  if (c.want_transfer) {
    HYPIC_EXPECT_ERR_LT(rel_err(dT.download(), T_ref), kTol) << "transfer, " << what;
  } else {
    EXPECT_EQ(dT.download(), T0) << "the operator is not touched without it, " << what;
  }
}

TEST_F(CudaOps, KdaChunkedTinyAndOddLengths) {
  run_chunked(pool, {{0, 1}, 2, 2, 16, 16, -0.5f, -0.01f, false});
  run_chunked(pool, {{0, 5}, 2, 2, 16, 24, -0.5f, -0.01f});
  run_chunked(pool, {{0, 77}, 3, 3, 32, 40, -1.0f, -0.01f});    // one whole chunk and a partial one
  run_chunked(pool, {{0, 128}, 2, 1, 64, 64, -1.0f, -0.01f});   // exactly two chunks, grouped q/k heads
}

TEST_F(CudaOps, KdaChunkedModelShapesLong) {
  // Kimi-Linear heads of 128; ~16 chunks, the last one partial; 4 state and 4 transfer column blocks.
  run_chunked(pool, {{0, 1000}, 4, 4, 128, 128, -1.0f, -0.001f});
  // Weaker decay keeps the span's transfer operator far from zero (e^-50), so its check has teeth.
  run_chunked(pool, {{0, 1000}, 4, 4, 128, 128, -0.1f, -0.001f, false, /*want_out=*/false});
}

TEST_F(CudaOps, KdaChunkedStrongAndWeakDecay) {
  run_chunked(pool, {{0, 300}, 4, 4, 128, 64, -8.0f, -2.0f});     // e^Gam underflows inside every chunk
  run_chunked(pool, {{0, 300}, 4, 4, 128, 64, -1e-3f, -1e-6f});   // nearly no decay
  run_chunked(pool, {{0, 200}, 2, 2, 96, 20, -0.3f, -0.01f});     // dk 96 (padded), dv 20 (scalar loads)
}

TEST_F(CudaOps, KdaChunkedContinuationWithoutTransfer) {
  // The engine's continuations (a start state, no operator): Kimi's fixture heads (dk 16) with its unbounded
  // softplus gates (per-token decays down to e^-30) and Ring-2.5's bounded ones (down to e^-5).
  for (const int64_t T : {20, 47, 64, 65, 100, 150, 203})
    for (const float lo : {-30.0f, -5.0f, -0.5f})
      run_chunked(pool, {{0, int32_t(T)}, 4, 4, 16, 16, lo, -0.001f, true, true, true, /*want_transfer=*/false});
}

TEST_F(CudaOps, KdaChunkedPackedSequences) {
  run_chunked(pool, {{0, 0, 1, 65, 129, 129, 300, 301}, 4, 2, 128, 96, -1.0f, -0.01f});
  run_chunked(pool, {{0, 64, 65, 190}, 2, 2, 64, 128, -1.0f, -0.01f, false});
}

TEST_F(CudaOps, KdaChunkedTransferAlone) {
  run_chunked(pool, {{0, 70, 71, 300}, 4, 4, 128, 128, -0.05f, -0.001f, true, false, /*want_state=*/false});
}

// N sequences of T tokens each, decode layout [N, T, ...]; with the packed state or per-sequence pointers.
TEST_F(CudaOps, KdaRecurrentMatchesCpu) {
  for (const int64_t T : {1, 3})
    for (const bool pointers : {false, true}) {
      const int64_t N = 5, H = 4, Hk = 2, dk = 128, dv = 72;
      const Inputs in = make_inputs(N * T, H, Hk, dk, dv, -1.0f, -0.01f, 111);
      const auto S0 = hypic::test::randn(N * H * dk * dv, 116, 0.3f);
      std::vector<float> S_ref = S0, o_ref(N * T * H * dv);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t b = n * T;
        cpu::kda_recurrent({T, H, dk, dv}, in.qx.data() + b * H * dk, in.kx.data() + b * H * dk,
                           in.v.data() + b * H * dv, in.g.data() + b * H * dk, in.beta.data() + b * H,
                           S_ref.data() + n * H * dk * dv, o_ref.data() + b * H * dv);
      }
      const GdnShape s{T, N, H, Hk, dk, dv};
      auto dq = to_device_bf16(pool, in.q), dk_ = to_device_bf16(pool, in.k), dv_ = to_device_bf16(pool, in.v);
      DevArray<float> dg(pool, in.g), db(pool, in.beta), dS(pool, S0);
      DevArray<bf16> dout(pool, N * T * H * dv);
      std::vector<float*> ptrs(N);
      for (int64_t n = 0; n < N; ++n) ptrs[n] = dS.get() + n * H * dk * dv;
      DevArray<float*> dptrs(pool, ptrs);
      kda_recurrent(s, dq.get(), dk_.get(), dv_.get(), dg.get(), db.get(), pointers ? nullptr : dS.get(), dout.get(),
                    nullptr, pointers ? dptrs.get() : nullptr);
      const std::string what = "T " + std::to_string(T) + (pointers ? " state pointers" : " packed state");
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), 1e-2f) << "out, " << what;
      HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), 1e-4f) << "state, " << what;
    }
}

}  // namespace
}  // namespace hypic::cuda::test
