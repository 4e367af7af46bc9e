// A CUDA sequence state's K/V growth (runtime/cuda/cuda_sequence_state.h): CudaSequenceState::reserve_attention
// gives the growing layers one shared block, keeps their rows across growth, and hands the block on correctly
// when a layer later grows alone or the state is cloned; on the owner's stream (stream-ordered memory) and on
// another stream (plain blocks). A new state's linear layers start at zero for work on its stream without a
// synchronisation. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/memory.h"
#include "runtime/cuda/cuda_sequence_state.h"

namespace hypic {
namespace {

constexpr int64_t kRow = 16;  // elements a K/V row

std::vector<uint16_t> rows_of(int64_t n, int seed) {
  std::vector<uint16_t> v(static_cast<size_t>(n * kRow));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(seed * 7919 + i * 31);
  return v;
}

// The first n rows of a layer's K (or V) and positions, copied to the host after `stream`'s work.
std::vector<uint16_t> download_rows(const DeviceMemory& m, int64_t n, cudaStream_t stream) {
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint16_t> h(static_cast<size_t>(n * kRow));
  HYPIC_CUDA_CHECK(cudaMemcpy(h.data(), m.get(), 2 * h.size(), cudaMemcpyDeviceToHost));
  return h;
}

class CudaSequenceStateTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    owner_ = std::make_shared<cuda::Stream>();
  }
  std::shared_ptr<cuda::Stream> owner_;
};

// Appends n rows (seeded by layer and round) to layer l of s, through device buffers, recording them in `want`;
// the positions from the host, or from the device (odd seeds: append's one-launch form).
void append_rows(CudaSequenceState& s, int l, int64_t n, int seed, std::vector<std::vector<uint16_t>>& want,
                 std::vector<std::vector<int64_t>>& want_pos, cudaStream_t stream) {
  const std::vector<uint16_t> k = rows_of(n, seed), v = rows_of(n, seed + 1000);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = 3 * (s.attn[static_cast<size_t>(l)].rows + i) + seed;
  DeviceMemory dk(2 * k.size()), dv(2 * v.size()), dp(sizeof(int64_t) * pos.size());
  HYPIC_CUDA_CHECK(cudaMemcpy(dk.get(), k.data(), 2 * k.size(), cudaMemcpyHostToDevice));
  HYPIC_CUDA_CHECK(cudaMemcpy(dv.get(), v.data(), 2 * v.size(), cudaMemcpyHostToDevice));
  HYPIC_CUDA_CHECK(cudaMemcpy(dp.get(), pos.data(), sizeof(int64_t) * pos.size(), cudaMemcpyHostToDevice));
  // A pageable copy may land after cudaMemcpy returns, and the legacy stream does not order `stream`.
  HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
  const bool on_device = seed % 2 == 1;
  s.attn[static_cast<size_t>(l)].append(dk.get(), dv.get(), on_device ? dp.as<int64_t>() : pos.data(), n, kRow, stream,
                                        on_device);
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream));  // before the source buffers go
  want[static_cast<size_t>(l)].insert(want[static_cast<size_t>(l)].end(), k.begin(), k.end());
  want_pos[static_cast<size_t>(l)].insert(want_pos[static_cast<size_t>(l)].end(), pos.begin(), pos.end());
}

std::vector<int64_t> download_positions(const CudaAttentionLayerState& a, cudaStream_t stream) {
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<int64_t> h(static_cast<size_t>(a.rows));
  HYPIC_CUDA_CHECK(cudaMemcpy(h.data(), a.pos.get(), sizeof(int64_t) * h.size(), cudaMemcpyDeviceToHost));
  return h;
}

TEST_P(CudaSequenceStateTest, GroupedReservationKeepsRowsThroughGrowthAndClones) {
  const bool on_owner = GetParam();
  cuda::Stream other;
  const cudaStream_t stream = on_owner ? owner_->get() : other.get();
  CudaSequenceState s;
  s.attn.resize(4);
  s.lin.resize(4);
  for (auto& a : s.attn) a.stream = owner_;
  const std::vector<int> layers{0, 2, 3};
  std::vector<std::vector<uint16_t>> want(4);
  std::vector<std::vector<int64_t>> want_pos(4);

  s.reserve_attention(layers, 100, kRow, stream);
  for (int l : layers) {
    EXPECT_GE(s.attn[static_cast<size_t>(l)].capacity, 100);
    EXPECT_TRUE(s.attn[static_cast<size_t>(l)].group) << "layer " << l << " in the shared block";
  }
  EXPECT_EQ(s.attn[1].capacity, 0) << "a layer not named is left alone";
  const void* block = s.attn[0].group.get();
  EXPECT_EQ(s.attn[2].group.get(), block);
  for (int l : layers) append_rows(s, l, 70 + l, l, want, want_pos, stream);

  // Room already there: nothing moves.
  s.reserve_attention(layers, 200, kRow, stream);
  EXPECT_EQ(s.attn[0].group.get(), block);

  // Growth with rows in place: a new shared block, the rows copied over.
  s.reserve_attention(layers, 600, kRow, stream);
  EXPECT_NE(s.attn[0].group.get(), block);
  for (int l : layers) {
    const auto& a = s.attn[static_cast<size_t>(l)];
    EXPECT_GE(a.capacity, 600);
    EXPECT_EQ(download_rows(a.k, a.rows, stream), want[static_cast<size_t>(l)]) << "layer " << l;
  }
  for (int l : layers) append_rows(s, l, 300, 10 + l, want, want_pos, stream);

  // One layer grows alone: it leaves the shared block, the others keep it.
  s.attn[2].reserve(2000, kRow, stream);
  EXPECT_FALSE(s.attn[2].group);
  EXPECT_TRUE(s.attn[0].group);
  append_rows(s, 2, 900, 20, want, want_pos, stream);

  const CudaSequenceState c = s.clone(stream);
  for (int l : layers) {
    const auto& a = s.attn[static_cast<size_t>(l)];
    const auto& b = c.attn[static_cast<size_t>(l)];
    EXPECT_EQ(download_rows(a.k, a.rows, stream), want[static_cast<size_t>(l)]) << "layer " << l;
    EXPECT_EQ(download_positions(a, stream), want_pos[static_cast<size_t>(l)]) << "layer " << l;
    EXPECT_EQ(b.rows, a.rows);
    EXPECT_EQ(download_rows(b.k, b.rows, stream), want[static_cast<size_t>(l)]) << "clone, layer " << l;
  }
  // The original goes first: the clone's copies stand alone.
  s = CudaSequenceState();
  for (int l : layers)
    EXPECT_EQ(download_rows(c.attn[static_cast<size_t>(l)].k, c.attn[static_cast<size_t>(l)].rows, stream),
              want[static_cast<size_t>(l)])
        << "clone after the original went, layer " << l;
}

TEST_P(CudaSequenceStateTest, NewStateIsZeroForWorkOnItsStream) {
  ModelConfig cfg;
  cfg.num_layers = 2;
  cfg.layer_kinds = {LayerKind::LinearAttention, LayerKind::FullAttention};
  cfg.conv_kernel = 4;
  cfg.lin_k_heads = 2;
  cfg.lin_v_heads = 2;
  cfg.lin_k_dim = 16;
  cfg.lin_v_dim = 16;
  const bool on_owner = GetParam();
  CudaSequenceState s = CudaSequenceState::empty_for(cfg, on_owner ? owner_ : nullptr);
  ASSERT_GT(s.lin[0].S.bytes(), 0u);
  // Read back in the owner's stream order (a plain block is complete on return).
  std::vector<float> S(s.lin[0].S.bytes() / sizeof(float), 1.0f);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(S.data(), s.lin[0].S.get(), s.lin[0].S.bytes(), cudaMemcpyDeviceToHost,
                                   owner_->get()));
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(owner_->get()));
  for (float x : S) ASSERT_EQ(x, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Streams, CudaSequenceStateTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "owner_stream" : "other_stream"; });

}  // namespace
}  // namespace hypic
