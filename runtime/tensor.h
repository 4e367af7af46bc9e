// A small tensor: element type, shape, and storage that is either owned or a view kept alive by an
// owner (e.g. a memory-mapped checkpoint). Host memory: checkpoints are read here and backends upload them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace hypic {

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // A read-only view of external memory; `owner` keeps that memory alive.
  static Tensor view(DType dtype, std::vector<int64_t> shape, const void* data, std::shared_ptr<const void> owner);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  const void* raw() const { return data_; }
  void* mutable_raw();  // only for owned tensors
  template <class T> const T* data() const { return static_cast<const T*>(data_); }
  template <class T> T* mutable_data() { return static_cast<T*>(mutable_raw()); }

  // A new owned fp32 copy (converting from F16 / BF16 / F64).
  Tensor to_f32() const;
  std::vector<float> to_f32_vector() const;
  std::string shape_string() const;

 private:
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  bool owned_ = false;
};

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace hypic
