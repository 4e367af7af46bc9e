// The packed expansion and packing kernels (kernels/cuda/packed_expand.h) against their CPU reference
// (kernels/packed_expand.h), bit for bit: random bytes (NaNs, infinities and subnormals among them) at
// every byte alignment, every conversion, pieces of very different sizes in one launch; and the head
// maxima that decide which transfer-operator heads a record skips. gpu label.
#include "kernels/cuda/packed_expand.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/packed_expand.h"

namespace hypic {
namespace {

TEST(CudaPackedExpand, EqualsTheCpuReferenceBitForBit) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(7);
  const ExpandOp ops[] = {ExpandOp::Copy16, ExpandOp::Copy32, ExpandOp::Bf16ToF32, ExpandOp::F32ToBf16,
                          ExpandOp::Zero32};
  const uint64_t sizes[] = {1, 3, 255, 4097, 70000};
  std::vector<ExpandPiece> pieces;  // src offsets into `packed`; dst: byte offsets into the output, for now
  uint64_t src = 0, dst = 0;
  for (int rep = 0; rep < 3; ++rep)
    for (ExpandOp op : ops)
      for (uint64_t n : sizes) {
        src += rng() % 4;  // every alignment
        ExpandPiece p{src, n, reinterpret_cast<void*>(dst), op};
        pieces.push_back(p);
        src += expand_src_bytes(p);
        const uint64_t elem = op == ExpandOp::Copy16 || op == ExpandOp::F32ToBf16 ? 2 : 4;
        dst = (dst + n * elem + 3) / 4 * 4;
      }
  std::vector<char> packed(src + 8);
  for (char& c : packed) c = static_cast<char>(rng());
  std::vector<char> want(dst, 0x11), got(dst);
  uint64_t max_n = 0;
  std::vector<ExpandPiece> host = pieces;
  for (ExpandPiece& p : host) p.dst = want.data() + reinterpret_cast<uint64_t>(p.dst);
  cpu::expand_packed(packed.data(), host.data(), host.size());

  char *d_packed = nullptr, *d_out = nullptr;
  ExpandPiece* d_pieces = nullptr;
  HYPIC_CUDA_CHECK(cudaMalloc(&d_packed, packed.size()));
  HYPIC_CUDA_CHECK(cudaMalloc(&d_out, dst));
  HYPIC_CUDA_CHECK(cudaMalloc(&d_pieces, pieces.size() * sizeof(ExpandPiece)));
  for (ExpandPiece& p : pieces) {
    p.dst = d_out + reinterpret_cast<uint64_t>(p.dst);
    max_n = std::max(max_n, p.n);
  }
  HYPIC_CUDA_CHECK(cudaMemcpy(d_packed, packed.data(), packed.size(), cudaMemcpyHostToDevice));
  HYPIC_CUDA_CHECK(cudaMemset(d_out, 0x11, dst));
  HYPIC_CUDA_CHECK(cudaMemcpy(d_pieces, pieces.data(), pieces.size() * sizeof(ExpandPiece), cudaMemcpyHostToDevice));
  cuda::expand_packed(d_packed, d_pieces, static_cast<int64_t>(pieces.size()), max_n, nullptr);
  HYPIC_CUDA_CHECK(cudaMemcpy(got.data(), d_out, dst, cudaMemcpyDeviceToHost));
  cudaFree(d_packed);
  cudaFree(d_out);
  cudaFree(d_pieces);
  ASSERT_EQ(got.size(), want.size());
  size_t first_diff = got.size();
  for (size_t i = 0; i < got.size() && first_diff == got.size(); ++i)
    if (got[i] != want[i]) first_diff = i;
  EXPECT_EQ(first_diff, got.size()) << "first differing byte of the output";
}

TEST(CudaPackedExpand, PackingAndHeadMaximaEqualTheCpuReference) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(11);
  const uint64_t n = 50000;
  std::vector<uint32_t> words(n);
  for (uint32_t& w : words) w = static_cast<uint32_t>(rng());  // NaNs, infinities, subnormals among them
  const ExpandOp ops[] = {ExpandOp::Copy16, ExpandOp::Copy32, ExpandOp::F32ToBf16};
  std::vector<PackPiece> pieces;
  uint64_t at = 0, max_n = 0;
  for (int rep = 0; rep < 4; ++rep)
    for (ExpandOp op : ops) {
      at += rng() % 4;
      const uint64_t m = 1 + rng() % n;
      PackPiece p{reinterpret_cast<const void*>(static_cast<uintptr_t>(rng() % (n - m + 1))), m, at, op};
      pieces.push_back(p);  // src: an element offset into `words`, for now
      at += pack_dst_bytes(p);
      max_n = std::max(max_n, m);
    }
  std::vector<char> want(at + 3, 0x33), got(at + 3);
  std::vector<PackPiece> host = pieces;
  for (PackPiece& p : host) p.src = words.data() + reinterpret_cast<uintptr_t>(p.src);
  cpu::pack_arrays(want.data(), host.data(), host.size());

  uint32_t* d_words = nullptr;
  char* d_packed = nullptr;
  PackPiece* d_pieces = nullptr;
  HYPIC_CUDA_CHECK(cudaMalloc(&d_words, n * 4));
  HYPIC_CUDA_CHECK(cudaMalloc(&d_packed, want.size()));
  HYPIC_CUDA_CHECK(cudaMalloc(&d_pieces, pieces.size() * sizeof(PackPiece)));
  for (PackPiece& p : pieces) p.src = d_words + reinterpret_cast<uintptr_t>(p.src);
  HYPIC_CUDA_CHECK(cudaMemcpy(d_words, words.data(), n * 4, cudaMemcpyHostToDevice));
  HYPIC_CUDA_CHECK(cudaMemset(d_packed, 0x33, want.size()));
  HYPIC_CUDA_CHECK(cudaMemcpy(d_pieces, pieces.data(), pieces.size() * sizeof(PackPiece), cudaMemcpyHostToDevice));
  cuda::pack_arrays(d_packed, d_pieces, static_cast<int64_t>(pieces.size()), max_n, nullptr);
  HYPIC_CUDA_CHECK(cudaMemcpy(got.data(), d_packed, got.size(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(got == want);

  // Head maxima: 7 heads of 1000 finite values, one head all zero.
  std::vector<float> x(7 * 1000);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float& v : x) v = nd(rng);
  std::fill(x.begin() + 2000, x.begin() + 3000, 0.0f);
  float* d_x = nullptr;
  float* d_max = nullptr;
  HYPIC_CUDA_CHECK(cudaMalloc(&d_x, x.size() * 4));
  HYPIC_CUDA_CHECK(cudaMalloc(&d_max, 7 * 4));
  HYPIC_CUDA_CHECK(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  cuda::head_max_abs(d_x, 7, 1000, d_max, nullptr);
  std::vector<float> m(7);
  HYPIC_CUDA_CHECK(cudaMemcpy(m.data(), d_max, 7 * 4, cudaMemcpyDeviceToHost));
  for (int h = 0; h < 7; ++h) {
    float w = 0;
    for (int i = 0; i < 1000; ++i) w = std::max(w, std::fabs(x[h * 1000 + i]));
    EXPECT_EQ(m[h], w) << h;
  }
  for (void* p : {static_cast<void*>(d_words), static_cast<void*>(d_packed), static_cast<void*>(d_pieces),
                  static_cast<void*>(d_x), static_cast<void*>(d_max)})
    cudaFree(p);
}

}  // namespace
}  // namespace hypic
