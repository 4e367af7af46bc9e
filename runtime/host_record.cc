#include "runtime/host_record.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace hypic {
namespace {

// Ordinary host memory: what the CPU backend's records live in.
class HostBlock : public Memory {
 public:
  explicit HostBlock(size_t bytes) {
    if (bytes && !(data_ = std::malloc(bytes))) throw std::bad_alloc();
    bytes_ = bytes;
  }
  ~HostBlock() override { std::free(data_); }
};

}  // namespace

HostRecord::HostRecord(Backend& b, std::string_view record) : HostRecord(b, record.size()) {
  if (size_) std::memcpy(data(), record.data(), size_);
}

std::unique_ptr<Memory> Backend::allocate_host(size_t bytes) { return std::make_unique<HostBlock>(bytes); }

void Backend::expand_from_host(std::shared_ptr<const void> keep, const char* packed, size_t bytes,
                               std::span<const ExpandPiece> pieces) {
  cpu::expand_packed(packed, pieces.data(), pieces.size());  // host memory: done when it returns
}

void Backend::pack_to_host(std::span<const PackPiece> pieces, char* packed, size_t bytes) {
  cpu::pack_arrays(packed, pieces.data(), pieces.size());  // host memory: the arrays are readable here
}

std::vector<float> Backend::head_max_abs(const float* x, size_t heads, size_t per_head) {
  const std::vector<float> v = to_host(x, heads * per_head, DType::F32);
  std::vector<float> out(heads, 0.0f);
  for (size_t h = 0; h < heads; ++h)
    for (size_t i = 0; i < per_head; ++i) out[h] = std::max(out[h], std::fabs(v[h * per_head + i]));
  return out;
}

}  // namespace hypic
