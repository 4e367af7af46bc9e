// cuda::gemm_skinny (the Hopper product of few rows) against the CPU reference product: every row padding,
// both block widths, split K summed over a cluster, strided rows, K not a multiple of the 64-wide step,
// narrow outputs (one column), all three output forms, the same bits on a second run, every plan, three
// products in one launch, and the shapes it refuses.
#include <cstring>
#include <vector>

#include "kernels/cuda/gemm_skinny_sm90.h"
#include "kernels/cuda/sm90_host.h"
#include "kernels/gemm.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

constexpr float kTolF32 = 2e-5f;   // fp32 sums of exact bf16 products, another order than the CPU's
constexpr float kTolBf16 = 8e-3f;  // and one bf16 rounding of the output

struct Case {
  int64_t M, K, N, ldx;
};

class SkinnyOps : public CudaOps {
 protected:
  void SetUp() override {
    CudaOps::SetUp();
    if (IsSkipped()) return;
    if (!current_device_is_sm90()) GTEST_SKIP() << "gemm_skinny runs on sm_90 only";
  }
};

// Host arithmetic only (runs without a GPU): every plan covers N and K exactly once, in at most 8 slices of
// K none of them empty, with rows padded to a wgmma width; and the 35B-A3B stitch's products fill the H200.
TEST(SkinnyPlan, CoversEveryProblemOnce) {
  for (int64_t M : {1, 2, 16, 17, 33, 96, 97, 158, 160, 161, 200, 256})
    for (int64_t N : {1, 4, 6, 64, 100, 256, 512, 1024, 2048, 4096, 8192, 248320})
      for (int64_t K : {8, 64, 136, 512, 2048, 4096})
        for (int sms : {1, 78, 132}) {
          SCOPED_TRACE(::testing::Message() << M << " x " << N << " x " << K << " on " << sms << " SMs");
          const GemmSkinnyPlan p = gemm_skinny_plan(M, N, K, sms);
          const int64_t kt = (K + 63) / 64;
          EXPECT_GE(p.rows_padded, M);
          EXPECT_TRUE(p.rows_padded == 16 || p.rows_padded % 32 == 0) << p.rows_padded;
          EXPECT_LE(p.rows_padded, 256);
          EXPECT_TRUE(p.block_cols == 128 || (p.block_cols == 256 && p.rows_padded <= 160)) << p.block_cols;
          EXPECT_GE(int64_t(p.tiles) * p.block_cols, N);
          EXPECT_LT(int64_t(p.tiles - 1) * p.block_cols, N);
          EXPECT_GE(p.splits, 1);
          EXPECT_LE(p.splits, 8);
          EXPECT_GE(int64_t(p.splits) * p.k_steps, kt);
          EXPECT_LT(int64_t(p.splits - 1) * p.k_steps, kt);  // the last slice is not empty
          if (sms == 1) {
            EXPECT_EQ(p.splits, 1);
          }
        }
  struct Want {
    int64_t M, N, K;
    int block_cols, tiles, splits;
  };
  for (const Want w : {Want{158, 8192, 2048, 128, 64, 2}, Want{158, 4096, 2048, 128, 32, 3},
                       Want{158, 2048, 4096, 128, 16, 6}, Want{8, 2048, 512, 128, 16, 4},
                       Want{8, 8192, 2048, 128, 64, 2}}) {
    const GemmSkinnyPlan p = gemm_skinny_plan(w.M, w.N, w.K, 132);
    EXPECT_EQ(p.block_cols, w.block_cols) << w.N << " x " << w.K;
    EXPECT_EQ(p.tiles, w.tiles) << w.N << " x " << w.K;
    EXPECT_EQ(p.splits, w.splits) << w.N << " x " << w.K;
  }
  EXPECT_THROW(gemm_skinny_plan(257, 64, 64, 132), UnsupportedShape);
  // Several targets: their tiles add up; 158 rows through the GDN layer's qkv, z and beta/alpha products.
  const int64_t gdn[3] = {8192, 4096, 64};
  const GemmSkinnyPlan g = gemm_skinny_plan_many(158, gdn, 3, 2048, 132);
  EXPECT_EQ(g.tiles, (8192 + 4096) / g.block_cols + 1);
  EXPECT_LE(int64_t(g.tiles) * g.splits, 132);  // one wave
  EXPECT_GE(int64_t(g.tiles) * g.splits, 96);
  EXPECT_THROW(gemm_skinny_plan_many(158, gdn, 4, 2048, 132), UnsupportedShape);
}

TEST_F(SkinnyOps, MatchesCpuInEveryForm) {
  Stream st;
  const Case cases[] = {
      {1, 64, 64, 64},          {2, 2048, 64, 2048},     {8, 2048, 8192, 2048},  {17, 520, 100, 520},
      {31, 4096, 2048, 4096},   {64, 512, 2048, 512},    {90, 2048, 512, 2056},  {128, 2048, 1024, 2048},
      {158, 2048, 4096, 2048},  {158, 4096, 2048, 4104}, {180, 1024, 772, 1024}, {256, 2048, 1024, 2048},
      {240, 136, 4096, 136},    {5, 2048, 1, 2048},      {33, 256, 6, 256},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "M " << c.M << " K " << c.K << " N " << c.N << " ldx " << c.ldx);
    auto xs = randn_bf16(c.M * c.ldx, uint32_t(c.M + c.K), 1.0f);
    std::vector<float> x(c.M * c.K);
    for (int64_t m = 0; m < c.M; ++m) std::memcpy(&x[m * c.K], &xs[m * c.ldx], 4 * c.K);
    const auto w = randn_bf16(c.N * c.K, uint32_t(c.N + 7), 0.05f);
    std::vector<float> ref(c.M * c.N);
    cpu::linear(x.data(), c.M, c.K, w.data(), DType::F32, c.N, ref.data());
    auto dx = to_device_bf16(pool, xs), dw = to_device_bf16(pool, w);

    ASSERT_TRUE(gemm_skinny_applies(dx.get(), c.M, c.K, c.ldx, dw.get(), c.N, dx.get(), DType::F32, c.N, true));
    DevArray<float> y32(pool, c.M * c.N);
    DevArray<bf16> y16(pool, c.M * c.N);
    gemm_skinny(dx.get(), c.M, c.K, c.ldx, dw.get(), c.N, y32.get(), DType::F32, c.N, false, st);
    gemm_skinny(dx.get(), c.M, c.K, c.ldx, dw.get(), c.N, y16.get(), DType::BF16, c.N, false, st);
    st.synchronize();
    const auto first = y32.download();
    HYPIC_EXPECT_ERR_LT(rel_err(first, ref), kTolF32);
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(y16), ref), kTolBf16);

    // Split K is summed in a fixed order: a second run gives the same bits.
    gemm_skinny(dx.get(), c.M, c.K, c.ldx, dw.get(), c.N, y32.get(), DType::F32, c.N, false, st);
    st.synchronize();
    const auto second = y32.download();
    EXPECT_EQ(std::memcmp(first.data(), second.data(), 4 * first.size()), 0);

    // Accumulate onto what y holds (a residual stream).
    const auto base = hypic::test::randn(c.M * c.N, uint32_t(c.N), 2.0f);
    y32.upload(base);
    gemm_skinny(dx.get(), c.M, c.K, c.ldx, dw.get(), c.N, y32.get(), DType::F32, c.N, true, st);
    st.synchronize();
    std::vector<float> sum(ref);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += base[i];
    HYPIC_EXPECT_ERR_LT(rel_err(y32.download(), sum), kTolF32);
  }
}

// Every plan the bench's sweep may force (both block widths, 1 to 8 slices of K) computes the same product.
TEST_F(SkinnyOps, EveryPlanMatchesCpu) {
  Stream st;
  const int64_t M = 100, K = 1024, N = 768;
  const auto x = randn_bf16(M * K, 11), w = randn_bf16(N * K, 12, 0.05f);
  std::vector<float> ref(M * N);
  cpu::linear(x.data(), M, K, w.data(), DType::F32, N, ref.data());
  auto dx = to_device_bf16(pool, x), dw = to_device_bf16(pool, w);
  DevArray<float> y(pool, M * N);
  for (const int cols : {128, 256})
    for (const int cap : {1, 2, 3, 8}) {
      const GemmSkinnyPlan p = gemm_skinny_plan(M, N, K, 132, cols, cap);
      gemm_skinny(dx.get(), M, K, K, dw.get(), N, y.get(), DType::F32, N, false, st, &p);
      st.synchronize();
      HYPIC_EXPECT_ERR_LT(rel_err(y.download(), ref), kTolF32) << cols << " columns, " << p.splits << " splits";
    }
  // A plan made for another problem is refused.
  const GemmSkinnyPlan other = gemm_skinny_plan(M, 2 * N, K, 132);
  EXPECT_THROW(gemm_skinny(dx.get(), M, K, K, dw.get(), N, y.get(), DType::F32, N, false, st, &other),
               UnsupportedShape);
}

// A layer's three input projections in one launch (the GDN layer's qkv, z and fp32 beta/alpha rows; here
// smaller), each output in its own form, against one product each on the CPU.
TEST_F(SkinnyOps, SeveralTargetsInOneLaunch) {
  Stream st;
  const int64_t K = 512;
  for (const int64_t M : {3, 158}) {
    const auto x = randn_bf16(M * K, 21);
    const int64_t Ns[3] = {1024, 516, 64};
    std::vector<std::vector<float>> w(3), ref(3);
    std::vector<DevArray<bf16>> dw;
    for (int i = 0; i < 3; ++i) {
      w[i] = randn_bf16(Ns[i] * K, 22 + i, 0.05f);
      ref[i].resize(M * Ns[i]);
      cpu::linear(x.data(), M, K, w[i].data(), DType::F32, Ns[i], ref[i].data());
      dw.push_back(to_device_bf16(pool, w[i]));
    }
    auto dx = to_device_bf16(pool, x);
    DevArray<bf16> y0(pool, M * Ns[0]);
    DevArray<float> y1(pool, M * Ns[1]), y2(pool, M * Ns[2]);
    const auto base = hypic::test::randn(M * Ns[1], 23, 1.0f);
    y1.upload(base);
    const GemmSkinnyTarget t[3] = {{dw[0].get(), Ns[0], y0.get(), DType::BF16, Ns[0], false},
                                   {dw[1].get(), Ns[1], y1.get(), DType::F32, Ns[1], true},
                                   {dw[2].get(), Ns[2], y2.get(), DType::F32, Ns[2], false}};
    ASSERT_TRUE(gemm_skinny_applies_many(dx.get(), M, K, K, t, 3));
    gemm_skinny_many(dx.get(), M, K, K, t, 3, st);
    st.synchronize();
    for (size_t i = 0; i < ref[1].size(); ++i) ref[1][i] += base[i];
    HYPIC_EXPECT_ERR_LT(rel_err(from_device_bf16(y0), ref[0]), kTolBf16) << M;
    HYPIC_EXPECT_ERR_LT(rel_err(y1.download(), ref[1]), kTolF32) << M;
    HYPIC_EXPECT_ERR_LT(rel_err(y2.download(), ref[2]), kTolF32) << M;
    // A target that does not fit (weights not 16-byte aligned) refuses the whole launch.
    GemmSkinnyTarget bad[3] = {t[0], t[1], t[2]};
    bad[2].w = dw[2].get() + 1;
    EXPECT_FALSE(gemm_skinny_applies_many(dx.get(), M, K, K, bad, 3));
  }
}

TEST_F(SkinnyOps, RefusesWhatItCannotTake) {
  DevArray<bf16> x(pool, 512 * 2048), w(pool, 2048 * 2048);
  DevArray<float> y(pool, 512 * 2048);
  EXPECT_TRUE(gemm_skinny_applies(x.get(), 256, 2048, 2048, w.get(), 2048, y.get(), DType::F32, 2048, false));
  EXPECT_FALSE(gemm_skinny_applies(x.get(), 257, 2048, 2048, w.get(), 2048, y.get(), DType::F32, 2048, false));
  EXPECT_FALSE(gemm_skinny_applies(x.get(), 8, 2044, 2048, w.get(), 2048, y.get(), DType::F32, 2048, false));
  EXPECT_TRUE(gemm_skinny_applies(x.get(), 8, 2048, 2048, w.get(), 2046, y.get(), DType::F32, 2048, false));
  EXPECT_FALSE(gemm_skinny_applies(x.get(), 8, 2048, 2048, w.get(), 2048, reinterpret_cast<char*>(y.get()) + 2,
                                   DType::F32, 2048, false));  // an fp32 output 2 bytes off
  EXPECT_FALSE(gemm_skinny_applies(x.get(), 8, 2048, 2048, w.get(), 2048, y.get(), DType::BF16, 2048, true));
  EXPECT_FALSE(gemm_skinny_applies(x.get() + 1, 8, 2048, 2048, w.get(), 2048, y.get(), DType::F32, 2048, false));
  EXPECT_THROW(gemm_skinny(x.get(), 300, 2048, 2048, w.get(), 2048, y.get(), DType::F32, 2048, false, nullptr),
               UnsupportedShape);
}

}  // namespace
}  // namespace hypic::cuda::test
