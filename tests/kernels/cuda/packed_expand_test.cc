// The packed expansion kernel (kernels/cuda/packed_expand.h) against its CPU reference
// (kernels/packed_expand.h), bit for bit: random bytes (NaNs, infinities and subnormals among them) at
// every byte alignment, every conversion, pieces of very different sizes in one launch. gpu label.
#include "kernels/cuda/packed_expand.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hypic
