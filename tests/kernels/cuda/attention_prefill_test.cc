// attention_prefill against the CPU reference on the position patterns the kernel treats differently:
// causal fresh tokens (tiles fully visible / mixed on the diagonal / skipped), a cached prefix,
// shuffled keys with duplicate and out-of-range query positions (every tile mixed), padded head dims,
// partial query and key tiles, more key tiles than one classification chunk, and no keys at all; and the
// split form (attention_prefill_split) on the stitch's shape, with more splits than key tiles, shuffled
// keys and rows that see nothing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <numeric>
#include <random>

#include "kernels/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_prefill_sm90.h"
#include "tests/kernels/cuda/harness.h"
#include "tests/kernels/test_util.h"

namespace hypic::cuda::test {
namespace {

using hypic::test::rel_err;

constexpr float kTolAttn = 2e-2f;  // P rounded to bf16 before P V

struct Case {
  const char* name;
  int64_t Tq, Tk, Hq, Hkv, d;
  std::vector<int64_t> q_pos, k_pos;
  float q_scale = 1.0f;
};

std::vector<int64_t> iota_from(int64_t n, int64_t first) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), first);
  return p;
}

// One kernel launch on the case's device buffers: (shape, q, k, v, q_pos, k_pos, scale, out, stream).
using Launch = std::function<void(const AttentionShape&, const bf16*, const bf16*, const bf16*, const int64_t*,
                                  const int64_t*, float, bf16*, cudaStream_t)>;

// Each launch against the CPU reference of the same inputs (named by `what`).
void check_launches(DevicePool& pool, const Case& c, uint32_t seed,
                    const std::vector<std::pair<std::string, Launch>>& launches) {
  Stream st;
  const auto q = randn_bf16(c.Tq * c.Hq * c.d, seed, c.q_scale), k = randn_bf16(c.Tk * c.Hkv * c.d, seed + 1),
             v = randn_bf16(c.Tk * c.Hkv * c.d, seed + 2);
  const float scale = 1.0f / std::sqrt(float(c.d));
  std::vector<float> ref(c.Tq * c.Hq * c.d);
  cpu::attention({c.Tq, c.Tk, c.Hq, c.Hkv, c.d, c.d}, q.data(), k.data(), v.data(), c.q_pos.data(), c.k_pos.data(),
                 scale, ref.data());
  auto dq = to_device_bf16(pool, q), dk = to_device_bf16(pool, k), dv = to_device_bf16(pool, v);
  DevArray<int64_t> dqp(pool, c.q_pos), dkp(pool, c.k_pos);
  for (const auto& [what, launch] : launches) {
    DevArray<bf16> dout(pool, ref.size());
    launch({c.Tq, c.Tk, c.Hq, c.Hkv, c.d}, dq.get(), dk.get(), dv.get(), dqp.get(), dkp.get(), scale, dout.get(), st);
    const auto got = from_device_bf16(dout);
    HYPIC_EXPECT_ERR_LT(rel_err(got, ref), kTolAttn) << c.name << what;
    // Rows that see no key must be exactly zero (the relative error above could hide a small leak).
    for (int64_t i = 0; i < c.Tq; ++i) {
      if (std::any_of(c.k_pos.begin(), c.k_pos.end(), [&](int64_t p) { return p <= c.q_pos[i]; })) continue;
      for (int64_t x = 0; x < c.Hq * c.d; ++x)
        ASSERT_EQ(got[i * c.Hq * c.d + x], 0.0f) << c.name << what << " row " << i;
    }
  }
}

void check(DevicePool& pool, const Case& c, uint32_t seed) {
  check_launches(pool, c, seed, {{"", [](auto&&... a) { attention_prefill(a...); }}});
}

// The split form in `splits` splits, its workspace filled with garbage first.
Launch split_launch(DevicePool& pool, int64_t splits) {
  return [&pool, splits](const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* qp,
                         const int64_t* kp, float scale, bf16* out, cudaStream_t st) {
    const size_t bytes = std::max<size_t>(16, attention_prefill_workspace_bytes(s, splits));
    DevArray<char> ws(pool, bytes);
    HYPIC_CUDA_CHECK(cudaMemsetAsync(ws.get(), 0x7f, bytes, st));
    attention_prefill_split(s, q, k, v, qp, kp, scale, splits, ws.get(), out, st);
    HYPIC_CUDA_CHECK(cudaStreamSynchronize(st));  // before the workspace goes
  };
}

// A launch with one environment variable set around it (the kernels' A/B forms).
Launch with_env(const char* var, const char* value, Launch launch) {
  return [var, value, launch](const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, const int64_t* qp,
                              const int64_t* kp, float scale, bf16* out, cudaStream_t st) {
    setenv(var, value, 1);
    launch(s, q, k, v, qp, kp, scale, out, st);
    unsetenv(var);
  };
}

// The split form for each split count.
void check_split(DevicePool& pool, const Case& c, uint32_t seed, std::initializer_list<int64_t> split_counts) {
  std::vector<std::pair<std::string, Launch>> launches;
  for (const int64_t splits : split_counts)
    launches.emplace_back(", " + std::to_string(splits) + " splits", split_launch(pool, splits));
  check_launches(pool, c, seed, launches);
}

TEST_F(CudaOps, AttentionPrefillSplitStitchShape) {
  // The stitch: the last 200 positions' queries over 3000 keys (47 key tiles), Qwen3.5 heads; the split
  // count the heuristic picks on an H200 and others, up to more splits than key tiles (empty splits).
  const int64_t Tk = 3000, Tq = 200;
  const AttentionShape s{Tq, Tk, 16, 2, 256};
  // 32 blocks -> 256, two per SM for the mma.sync form; 128, one per SM, for the Hopper form (47 / 4 = 11 tiles
  // allow more).
  EXPECT_EQ(attention_prefill_splits(s, 132), attention_prefill_sm90_applies(s) ? 4 : 8);
  EXPECT_EQ(attention_prefill_splits({2048, Tk, 16, 2, 256}, 132), 1);  // 256 blocks fill the GPU already
  check_split(pool, {"stitch d256", Tq, Tk, 16, 2, 256, iota_from(Tq, Tk - Tq), iota_from(Tk, 0)}, 90,
              {1, 2, 8, 9, 11, 64});
  check_split(pool, {"stitch d96", 70, 900, 6, 3, 96, iota_from(70, 830), iota_from(900, 0)}, 91, {3, 20});
}

TEST_F(CudaOps, AttentionPrefillSplitShuffledKeys) {
  // Keys out of order (two cached segments and fresh rows), queries that see nothing, duplicates.
  std::mt19937 rng(11);
  const int64_t Tk = 1500, Tq = 150;
  std::vector<int64_t> kp = iota_from(Tk, 100);
  std::shuffle(kp.begin(), kp.end(), rng);
  std::vector<int64_t> qp(Tq);
  std::uniform_int_distribution<int64_t> pick(90, 100 + Tk + 5);
  for (auto& p : qp) p = pick(rng);
  qp[0] = 99;  // sees nothing
  qp[1] = qp[2];
  check_split(pool, {"split shuffled", Tq, Tk, 4, 2, 128, qp, kp}, 92, {2, 5, 17});
}

TEST_F(CudaOps, AttentionPrefillSplitCausalSmallHeads) {
  // The fixture models' heads (d 32 in the 64-wide instantiation): a causal pass over 600 tokens (early
  // query tiles see nothing in the later splits) and a stitch-like tail, as the engine runs them.
  check_split(pool, {"split causal d32", 600, 600, 4, 2, 32, iota_from(600, 0), iota_from(600, 0)}, 93, {2, 3, 5});
  check_split(pool, {"split stitch d32", 40, 640, 4, 2, 32, iota_from(40, 600), iota_from(640, 0)}, 94, {2, 4});
  check_split(pool, {"split causal d64", 600, 600, 4, 2, 64, iota_from(600, 0), iota_from(600, 0)}, 95, {2});
}

TEST_F(CudaOps, AttentionPrefillCausalFresh) {
  // Qwen3.5 head layout; Tq = Tk not a multiple of the 128-row query tile nor the 64-key tile.
  const int64_t T = 777;
  check(pool, {"causal d256", T, T, 16, 2, 256, iota_from(T, 0), iota_from(T, 0)}, 10);
  check(pool, {"causal d128", 300, 300, 4, 1, 128, iota_from(300, 0), iota_from(300, 0)}, 20);
  check(pool, {"causal d64 sharp", 260, 260, 2, 2, 64, iota_from(260, 0), iota_from(260, 0), 4.0f}, 30);
}

TEST_F(CudaOps, AttentionPrefillCachedPrefix) {
  // 330 cached keys (two segments stored out of order) then 200 fresh tokens that are also the queries.
  const int64_t cached = 330, fresh = 200;
  std::vector<int64_t> kp = iota_from(cached / 2, cached - cached / 2);
  const auto first = iota_from(cached - cached / 2, 0), tail = iota_from(fresh, cached);
  kp.insert(kp.end(), first.begin(), first.end());
  kp.insert(kp.end(), tail.begin(), tail.end());
  check(pool, {"prefix d256", fresh, cached + fresh, 8, 2, 256, tail, kp}, 40);
  check(pool, {"prefix d96", fresh, cached + fresh, 6, 3, 96, tail, kp}, 50);
}

TEST_F(CudaOps, AttentionPrefillShuffledKeys) {
  // Keys in random order far from zero (int64 positions), queries at random positions including
  // duplicates and ones before every key; head dims that need zero padding.
  std::mt19937 rng(7);
  const int64_t base = int64_t(1) << 40;
  struct Shape {
    int64_t Tq, Tk, d;
  };
  for (const auto [Tq, Tk, d] : {Shape{150, 400, 40}, Shape{260, 333, 200}, Shape{129, 1000, 256}}) {
    std::vector<int64_t> kp = iota_from(Tk, base);
    std::shuffle(kp.begin(), kp.end(), rng);
    std::vector<int64_t> qp(Tq);
    std::uniform_int_distribution<int64_t> pick(base - 5, base + Tk + 5);
    for (auto& p : qp) p = pick(rng);
    qp[0] = base - 1;  // sees nothing
    check(pool, {"shuffled", Tq, Tk, 4, 2, d, qp, kp}, 60 + uint32_t(d));
  }
}

TEST_F(CudaOps, AttentionPrefillManyKeyTiles) {
  // More than 512 key tiles (one classification chunk): a long cached prefix, a few queries at its end.
  const int64_t Tk = 33000, Tq = 140;
  check(pool, {"long", Tq, Tk, 2, 1, 64, iota_from(Tq, Tk - Tq), iota_from(Tk, 0)}, 70);
  // Same keys, queries spread so that every chunk holds skipped, mixed and visible tiles.
  std::vector<int64_t> qp(Tq);
  for (int64_t i = 0; i < Tq; ++i) qp[i] = (i * 7919) % (Tk + 100) - 50;
  check(pool, {"long spread", Tq, Tk, 2, 1, 64, qp, iota_from(Tk, 0)}, 80);
}

// The Hopper form (TMA + wgmma, head dim 256) on an H200: the cases above already reach it through
// attention_prefill for d = 256; these check that it is the form that runs there, and the cases that only
// it treats specially, each against the CPU and against the mma.sync form's output.
TEST_F(CudaOps, AttentionPrefillSm90) {
  int dev = 0, major = 0, minor = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  HYPIC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  HYPIC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) GTEST_SKIP() << "the Hopper form needs compute capability 9.0";
  ASSERT_TRUE(attention_prefill_sm90_applies({777, 777, 16, 2, 256})) << "HYPIC_CUDA_ATTN_SM90=0 set?";
  EXPECT_FALSE(attention_prefill_sm90_applies({777, 777, 16, 2, 128}));
  EXPECT_FALSE(attention_prefill_sm90_applies({777, 0, 16, 2, 256}));
  const Launch sm90 = [](auto&&... a) { attention_prefill_sm90(a..., 1, nullptr, nullptr); };
  const Launch old = with_env("HYPIC_CUDA_ATTN_SM90", "0", [](auto&&... a) { attention_prefill(a...); });
  // Block pairs that share their K/V loads (used where a kv head has an even number of query heads); the output
  // written straight from the accumulators (the staged epilogue is the default); key tiles of 80 (the whole-prefill
  // default is 64) and of 64 split in three over the key tiles (the split default is 80); the running max tracked
  // exactly (slack 0) instead of the reference moving by more than 8 at a time.
  const Launch pairs = with_env("HYPIC_CUDA_ATTN_SM90_CLUSTER", "1", sm90);
  const Launch direct = with_env("HYPIC_CUDA_ATTN_SM90_STAGED", "0", sm90);
  const Launch keys80 = with_env("HYPIC_CUDA_ATTN_SM90_KEYS", "80", sm90);
  const Launch keys64_split = with_env("HYPIC_CUDA_ATTN_SM90_KEYS", "64", split_launch(pool, 3));
  const Launch exact_max = with_env("HYPIC_CUDA_ATTN_SM90_SLACK", "0", sm90);
  // The ping-pong schedule; the block order in sections of one kv head's query heads (an L2
  // budget of 1 MB makes every shape below take sections where it has more than one kv head).
  const Launch ping_pong = with_env("HYPIC_CUDA_ATTN_SM90_SCHEDULE", "2", sm90);
  const Launch sections = with_env("HYPIC_CUDA_ATTN_SM90_L2_MB", "1", sm90);
  const std::vector<std::pair<std::string, Launch>> both = {
      {" sm90", sm90},           {" sm90 direct epilogue", direct}, {" sm90 pairs", pairs},
      {" sm90 80-key tiles", keys80}, {" sm90 64-key tiles, 3 splits", keys64_split}, {" sm90 exact max", exact_max},
      {" sm90 ping-pong", ping_pong}, {" sm90 L2 sections", sections}, {" mma.sync", old}};
  // Both epilogues write the same bits (a partial last query tile included).
  {
    Stream st;
    const int64_t T = 777, Hq = 16, Hkv = 2, d = 256;
    auto dq = to_device_bf16(pool, randn_bf16(T * Hq * d, 99)), dk = to_device_bf16(pool, randn_bf16(T * Hkv * d, 98)),
         dv = to_device_bf16(pool, randn_bf16(T * Hkv * d, 97));
    DevArray<int64_t> pos(pool, iota_from(T, 0));
    DevArray<bf16> a(pool, T * Hq * d), b(pool, T * Hq * d);
    const AttentionShape s{T, T, Hq, Hkv, d};
    sm90(s, dq.get(), dk.get(), dv.get(), pos.get(), pos.get(), 0.0625f, a.get(), st);
    direct(s, dq.get(), dk.get(), dv.get(), pos.get(), pos.get(), 0.0625f, b.get(), st);
    st.synchronize();
    const auto fa = from_device_bf16(a), fb = from_device_bf16(b);
    EXPECT_EQ(std::memcmp(fa.data(), fb.data(), sizeof(float) * fa.size()), 0) << "staged vs direct epilogue";
  }
  // Several query tiles of both warpgroups, one query tile with a single valid row, a partial last key tile.
  check_launches(pool, {"sm90 causal", 2049, 2049, 16, 2, 256, iota_from(2049, 0), iota_from(2049, 0)}, 100, both);
  // One kv head for all query heads; keys far from zero.
  check_launches(pool, {"sm90 mqa", 300, 300, 4, 1, 256, iota_from(300, int64_t(1) << 35), iota_from(300, int64_t(1) << 35)},
                 101, both);
  // More key tiles than one classification chunk (256 tiles of 64 or 80 keys): a few queries at the end of a long
  // prefix, and queries spread so that every chunk holds skipped, mixed and visible tiles.
  const int64_t Tk = 22000, Tq = 140;
  check_launches(pool, {"sm90 long", Tq, Tk, 2, 1, 256, iota_from(Tq, Tk - Tq), iota_from(Tk, 0)}, 102, both);
  std::vector<int64_t> qp(Tq);
  for (int64_t i = 0; i < Tq; ++i) qp[i] = (i * 7919) % (Tk + 100) - 50;
  check_launches(pool, {"sm90 long spread", Tq, Tk, 2, 1, 256, qp, iota_from(Tk, 0)}, 103, both);
  // Queries far apart in one warpgroup: a tile hidden for one warpgroup is computed by the other.
  std::vector<int64_t> qp2(256);
  for (int64_t i = 0; i < 256; ++i) qp2[i] = i < 64 ? i : 3000 + i;
  check_launches(pool, {"sm90 hidden for one warpgroup", 256, 3300, 2, 2, 256, qp2, iota_from(3300, 0)}, 104, both);
  // Sections of two kv heads out of three (3 MB of K and V each, a 7 MB budget): the last section is shorter.
  const Launch two_of_three = with_env("HYPIC_CUDA_ATTN_SM90_L2_MB", "7", sm90);
  check_launches(pool, {"sm90 uneven sections", 700, 3000, 6, 3, 256, iota_from(700, 2300), iota_from(3000, 0)}, 105,
                 {{" sm90 sections of 2 kv heads", two_of_three}, {" mma.sync", old}});
}

TEST_F(CudaOps, AttentionPrefillNoKeys) {
  const int64_t Tq = 5, Hq = 4, d = 64;
  DevArray<bf16> q(pool, Tq * Hq * d), out(pool, Tq * Hq * d);
  HYPIC_CUDA_CHECK(cudaMemset(q.get(), 0, 2 * Tq * Hq * d));
  HYPIC_CUDA_CHECK(cudaMemset(out.get(), 0x7f, 2 * Tq * Hq * d));
  DevArray<int64_t> qp(pool, iota_from(Tq, 0));
  Stream st;
  attention_prefill({Tq, 0, Hq, 2, d}, q.get(), q.get(), q.get(), qp.get(), qp.get(), 0.125f, out.get(), st);
  for (const float x : from_device_bf16(out)) ASSERT_EQ(x, 0.0f);
}

TEST_F(CudaOps, AttentionPrefillRejectsMisalignedRows) {
  DevArray<bf16> buf(pool, 1024);
  DevArray<int64_t> pos(pool, 4);
  Stream st;
  EXPECT_THROW(attention_prefill({2, 2, 1, 1, 64}, buf.get() + 1, buf.get(), buf.get(), pos.get(), pos.get(), 1.0f,
                                 buf.get() + 512, st),
               UnsupportedShape);
}

}  // namespace
}  // namespace hypic::cuda::test
