// lightning_chunked_prefill, lightning_recurrent and lightning_transfer against the CPU reference
// (cpu::gated_linear_scan / gated_linear_transfer, Scalar kind): tiny shapes, partial and whole chunks,
// packed batches with empty, one-token and chunk-multiple sequences, strong and weak decay, zero and random
// initial states, grouped q/k heads, value dims that are not multiples of 32 or of 8.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/lightning.h"
#include "kernels/transfer_operator.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

constexpr float kTol = 3e-2f;  // bf16 operands (P, the chunk start state) over many chunks

struct Case {
  std::vector<int32_t> cu;  // sequence offsets; one sequence when size 2
  int64_t H, Hk, dk, dv;
  float lam_lo, lam_hi;  // per-head log decay ~ U(lam_lo, lam_hi)
  bool initial_state;
  bool want_out = true;
};

struct Inputs {
  std::vector<float> q, k, v, qx, kx, lam;  // qx, kx: q/k expanded to the value heads (the CPU layout)
};

Inputs make_inputs(int64_t T, int64_t H, int64_t Hk, int64_t dk, int64_t dv, float lam_lo, float lam_hi,
                   uint32_t seed) {
  Inputs in;
  // Rows of norm ~1 keep the outputs O(1) whatever the decay.
  in.q = randn_bf16(T * Hk * dk, seed, 1.0f / std::sqrt(float(dk)));
  in.k = randn_bf16(T * Hk * dk, seed + 1, 1.0f / std::sqrt(float(dk)));
  in.v = randn_bf16(T * H * dv, seed + 2);
  in.lam = hypic::test::uniform(H, seed + 3, lam_lo, lam_hi);
  in.qx.resize(T * H * dk);
  in.kx.resize(T * H * dk);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(&in.q[(t * Hk + h / (H / Hk)) * dk], dk, &in.qx[(t * H + h) * dk]);
      std::copy_n(&in.k[(t * Hk + h / (H / Hk)) * dk], dk, &in.kx[(t * H + h) * dk]);
    }
  return in;
}

// The CPU recurrence over `len` tokens from row b of the [*, H, ...] arrays.
void cpu_scan(const Inputs& in, int64_t b, int64_t len, int64_t H, int64_t dk, int64_t dv, float* S, float* out) {
  std::vector<float> log_a(len * H);
  for (int64_t t = 0; t < len; ++t) std::copy_n(in.lam.data(), H, &log_a[t * H]);
  cpu::gated_linear_scan({cpu::TransferKind::Scalar, H, dk, dv}, len, in.qx.data() + b * H * dk,
                         in.kx.data() + b * H * dk, in.v.data() + b * H * dv, log_a.data(), S, out);
}

void run_chunked(DevicePool& pool, const Case& c) {
  const int64_t T = c.cu.back(), N = int64_t(c.cu.size()) - 1, H = c.H, Hk = c.Hk, dk = c.dk, dv = c.dv;
  const Inputs in = make_inputs(T, H, Hk, dk, dv, c.lam_lo, c.lam_hi, 71);
  const auto S0 = c.initial_state ? hypic::test::randn(N * H * dk * dv, 76, 0.5f)
                                  : std::vector<float>(N * H * dk * dv, 0.0f);
  std::vector<float> S_ref = S0, o_ref(T * H * dv, 0.0f);
  int64_t max_len = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t b = c.cu[n], L = c.cu[n + 1] - c.cu[n];
    max_len = std::max(max_len, L);
    cpu_scan(in, b, L, H, dk, dv, S_ref.data() + n * H * dk * dv, o_ref.data() + b * H * dv);
  }

  const GdnShape s{T, N, H, Hk, dk, dv};
  auto dq = to_device_bf16(pool, in.q), dk_ = to_device_bf16(pool, in.k), dv_ = to_device_bf16(pool, in.v);
  DevArray<float> dlam(pool, in.lam), dS(pool, S0);
  DevArray<int32_t> dcu(pool, c.cu);
  DevArray<bf16> dout(pool, T * H * dv);
  lightning_chunked_prefill(s, dq.get(), dk_.get(), dv_.get(), dlam.get(), N > 1 ? dcu.get() : nullptr, max_len,
                            dS.get(), c.want_out ? dout.get() : nullptr, nullptr);
  const std::string what = "T " + std::to_string(T) + " N " + std::to_string(N) + " H " + std::to_string(H) +
                           " Hk " + std::to_string(Hk) + " dk " + std::to_string(dk) + " dv " + std::to_string(dv) +
                           " lambda [" + std::to_string(c.lam_lo) + ", " + std::to_string(c.lam_hi) + "]" +
                           (c.initial_state ? " with S0" : " zero S0");
  if (c.want_out) {
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), kTol) << "out, " << what;
  }
  HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), kTol) << "state, " << what;
}

TEST_F(CudaOps, LightningChunkedTinyAndOddLengths) {
  run_chunked(pool, {{0, 1}, 2, 2, 16, 16, -0.5f, -0.1f, false});
  run_chunked(pool, {{0, 5}, 2, 2, 16, 24, -0.5f, -0.1f, true});
  run_chunked(pool, {{0, 77}, 3, 3, 32, 40, -0.3f, -0.01f, true});  // one whole chunk and a partial one
  run_chunked(pool, {{0, 128}, 2, 1, 64, 64, -0.3f, -0.01f, true});  // exactly two chunks, grouped q/k heads
}

TEST_F(CudaOps, LightningChunkedModelShapesLong) {
  // Ring-linear / MiniMax heads of 128; ~16 chunks, the last one partial; state columns in 4 blocks.
  run_chunked(pool, {{0, 1000}, 4, 4, 128, 128, -0.2f, -0.001f, true});
  run_chunked(pool, {{0, 1000}, 4, 4, 128, 128, -0.2f, -0.001f, false, /*want_out=*/false});
}

TEST_F(CudaOps, LightningChunkedStrongAndWeakDecay) {
  run_chunked(pool, {{0, 300}, 4, 4, 128, 64, -8.0f, -4.0f, true});      // a^n underflows inside a chunk
  run_chunked(pool, {{0, 300}, 4, 4, 128, 64, -1e-4f, -1e-6f, true});    // nearly no decay: the state grows
  run_chunked(pool, {{0, 200}, 2, 2, 96, 20, -0.05f, -0.05f, false});     // dk 96 (padded), dv 20 (scalar loads)
}

TEST_F(CudaOps, LightningChunkedPackedSequences) {
  run_chunked(pool, {{0, 0, 1, 65, 129, 129, 300, 301}, 4, 2, 128, 96, -0.7f, -0.01f, true});
  run_chunked(pool, {{0, 64, 65, 190}, 2, 2, 64, 128, -0.7f, -0.01f, false});
}

// N sequences of T tokens each, decode layout [N, T, ...]; with the packed state or per-sequence pointers.
TEST_F(CudaOps, LightningRecurrentMatchesCpu) {
  for (const int64_t T : {1, 3})
    for (const bool pointers : {false, true}) {
      const int64_t N = 5, H = 4, Hk = 2, dk = 128, dv = 72;
      const Inputs in = make_inputs(N * T, H, Hk, dk, dv, -1.0f, -0.01f, 81);
      const auto S0 = hypic::test::randn(N * H * dk * dv, 86, 0.5f);
      std::vector<float> S_ref = S0, o_ref(N * T * H * dv);
      for (int64_t n = 0; n < N; ++n)
        cpu_scan(in, n * T, T, H, dk, dv, S_ref.data() + n * H * dk * dv, o_ref.data() + n * T * H * dv);
      const GdnShape s{T, N, H, Hk, dk, dv};
      auto dq = to_device_bf16(pool, in.q), dk_ = to_device_bf16(pool, in.k), dv_ = to_device_bf16(pool, in.v);
      DevArray<float> dlam(pool, in.lam), dS(pool, S0);
      DevArray<bf16> dout(pool, N * T * H * dv);
      std::vector<float*> ptrs(N);
      for (int64_t n = 0; n < N; ++n) ptrs[n] = dS.get() + n * H * dk * dv;
      DevArray<float*> dptrs(pool, ptrs);
      lightning_recurrent(s, dq.get(), dk_.get(), dv_.get(), dlam.get(), pointers ? nullptr : dS.get(), dout.get(),
                          nullptr, pointers ? dptrs.get() : nullptr);
      const std::string what = "T " + std::to_string(T) + (pointers ? " state pointers" : " packed state");
      HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(dout), o_ref), 1e-2f) << "out, " << what;
      HYPIC_EXPECT_ERR_LT(rel_err(dS.download(), S_ref), 1e-5f) << "state, " << what;
    }
}

// The chunked state of a whole span equals T(span) S0 + S(span | 0): the scalar transfer operator composes
// with the device's zero-start state exactly as the CPU transfer_apply does.
TEST_F(CudaOps, LightningTransferComposesWithChunkedState) {
  const int64_t T = 150, H = 4, dk = 64, dv = 64;
  const Inputs in = make_inputs(T, H, H, dk, dv, -0.1f, -0.001f, 91);
  const auto S0 = hypic::test::randn(H * dk * dv, 96, 0.5f);
  std::vector<float> S_ref = S0, o_unused(T * H * dv);
  cpu_scan(in, 0, T, H, dk, dv, S_ref.data(), o_unused.data());
  std::vector<float> T_ref(H, 1.0f), log_a(T * H);
  for (int64_t t = 0; t < T; ++t) std::copy_n(in.lam.data(), H, &log_a[t * H]);
  cpu::gated_linear_transfer({cpu::TransferKind::Scalar, H, dk, dv}, T, log_a.data(), T_ref.data());
  std::vector<float> T_dev(H);
  for (int64_t h = 0; h < H; ++h) T_dev[h] = lightning_transfer(in.lam[h], T);
  EXPECT_LT(rel_err(T_dev, T_ref), 1e-5f);

  const GdnShape s{T, 1, H, H, dk, dv};
  auto dq = to_device_bf16(pool, in.q), dk_ = to_device_bf16(pool, in.k), dv_ = to_device_bf16(pool, in.v);
  DevArray<float> dlam(pool, in.lam), dS(pool, std::vector<float>(H * dk * dv, 0.0f));
  lightning_chunked_prefill(s, dq.get(), dk_.get(), dv_.get(), dlam.get(), nullptr, T, dS.get(), nullptr, nullptr);
  std::vector<float> S_body = dS.download(), S_comp(H * dk * dv);
  cpu::transfer_apply({cpu::TransferKind::Scalar, H, dk, dv}, T_dev.data(), S0.data(), S_body.data(), S_comp.data());
  HYPIC_EXPECT_ERR_LT(rel_err(S_comp, S_ref), kTol) << "T S0 + S(span | 0)";
}

}  // namespace
}  // namespace hypic::cuda::test
