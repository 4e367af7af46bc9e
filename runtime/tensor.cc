#include "runtime/tensor.h"

#include <cstring>
#include <new>

#include "runtime/error.h"

namespace hypic {

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto d : shape_) n *= d;
  return n;
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  const size_t bytes = t.nbytes();
  std::shared_ptr<char[]> buf(new char[bytes ? bytes : 1]);
  t.data_ = buf.get();
  t.owner_ = std::shared_ptr<const void>(buf, buf.get());
  t.owned_ = true;
  return t;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.mutable_raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::view(DType dtype, std::vector<int64_t> shape, const void* data, std::shared_ptr<const void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

void* Tensor::mutable_raw() {
  HYPIC_ASSERT(owned_, "mutable access to a read-only tensor view");
  return const_cast<void*>(data_);
}

Tensor Tensor::to_f32() const {
  Tensor t = empty(DType::F32, shape_);
  convert_to_f32(data_, dtype_, numel(), t.mutable_data<float>());
  return t;
}

std::vector<float> Tensor::to_f32_vector() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  convert_to_f32(data_, dtype_, numel(), v.data());
  return v;
}

std::string Tensor::shape_string() const { return shape_to_string(shape_); }

}  // namespace hypic
