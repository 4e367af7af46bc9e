#include "kernels/sampling.h"

#include <gtest/gtest.h>

#include <cmath>

#include <map>
#include <random>
#include <vector>

namespace hypic::cpu {
namespace {

TEST(Sampling, GreedyIsArgmaxWithLowestIdOnTies) {
  const std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(argmax(l.data(), 4), 1);
  EXPECT_EQ(sample(l.data(), 4, {0.0f, 0, 1.0f}, 0.99), 1);
}

TEST(Sampling, TopKNeverLeavesTheTopK) {
  const std::vector<float> l = {3.0f, 2.9f, 2.8f, 2.7f, 2.6f};
  for (double u = 0; u < 1.0; u += 0.01) {
    const auto id = sample(l.data(), 5, {1.0f, 2, 1.0f}, u);
    EXPECT_TRUE(id == 0 || id == 1) << u;
  }
}

TEST(Sampling, TopPKeepsTheNucleus) {
  // probabilities ~ 0.64, 0.24, 0.09, 0.03: top_p 0.8 keeps the first two
  const std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  for (double u = 0; u < 1.0; u += 0.01) EXPECT_LT(sample(l.data(), 4, {1.0f, 0, 0.8f}, u), 2);
}

TEST(Sampling, FrequenciesFollowTheSoftmax) {
  const std::vector<float> l = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  int ones = 0;
  for (int i = 0; i < 20000; ++i) ones += sample(l.data(), 2, {1.0f, 0, 1.0f}, U(rng)) == 1;
  EXPECT_NEAR(ones / 20000.0, 0.75, 0.02);
}

TEST(Sampling, TheDrawWalksTheKeptIdsInIdOrder) {
  // p = 0.1, 0.4, 0.2, 0.3: u falls into the ids' mass intervals in id order (not by probability).
  const std::vector<float> l = {0.0f, std::log(4.0f), std::log(2.0f), std::log(3.0f)};
  const SamplingParams all{1.0f, 0, 1.0f};
  EXPECT_EQ(sample(l.data(), 4, all, 0.05), 0);
  EXPECT_EQ(sample(l.data(), 4, all, 0.45), 1);
  EXPECT_EQ(sample(l.data(), 4, all, 0.55), 2);
  EXPECT_EQ(sample(l.data(), 4, all, 0.75), 3);
  // Top-2 keeps ids 1 and 3 (mass 0.7): id 1 holds [0, 4/7) of the draw.
  const SamplingParams top2{1.0f, 2, 1.0f};
  EXPECT_EQ(sample(l.data(), 4, top2, 0.55), 1);
  EXPECT_EQ(sample(l.data(), 4, top2, 0.60), 3);
  // Top-p 0.65 keeps 0.4 + 0.3; top-p 0.75 also keeps 0.2.
  EXPECT_EQ(sample(l.data(), 4, {1.0f, 0, 0.65f}, 0.60), 3);
  EXPECT_EQ(sample(l.data(), 4, {1.0f, 0, 0.75f}, 0.60), 2);
}

TEST(Sampling, TiesAtAThresholdAreAllKept) {
  const std::vector<float> l = {1.0f, 2.0f, 2.0f, 0.0f};
  for (double u = 0; u < 1.0; u += 0.05) {
    const auto id = sample(l.data(), 4, {1.0f, 1, 1.0f}, u);  // top-1 with a tie at the top: both kept
    EXPECT_EQ(id, u < 0.5 ? 1 : 2) << u;
    EXPECT_EQ(sample(l.data(), 4, {1.0f, 0, 0.3f}, u), id) << u;  // the nucleus reaches 0.3 inside the tie
  }
}

TEST(Sampling, KlDivergenceOfLogitRows) {
  const std::vector<float> p = {0.0f, std::log(3.0f)}, shifted = {5.0f, 5.0f + std::log(3.0f)};  // 0.25, 0.75
  EXPECT_NEAR(kl_divergence(p.data(), shifted.data(), 2), 0.0, 1e-12);  // logits up to a constant
  const std::vector<float> uniform = {0.0f, 0.0f};
  const double expected = 0.25 * std::log(0.25 / 0.5) + 0.75 * std::log(0.75 / 0.5);
  EXPECT_NEAR(kl_divergence(p.data(), uniform.data(), 2), expected, 1e-6);
  EXPECT_GT(kl_divergence(uniform.data(), p.data(), 2), 0.0);
}

}  // namespace
}  // namespace hypic::cpu
