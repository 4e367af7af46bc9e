// Reader for Hugging Face safetensors checkpoints: one file, or shards listed by
// model.safetensors.index.json. Files are memory-mapped; tensors are views into the mapping.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace hypic {

class SafetensorsFile {
 public:
  // Throws IoError (missing/unreadable/truncated) or FormatError (bad header), naming the file.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  Tensor get(const std::string& name) const;  // view; throws ModelError if absent
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    size_t begin, end;  // byte offsets into the data section
  };
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  size_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::weak_ptr<SafetensorsFile> self_;
};

// A whole checkpoint: a directory with model.safetensors or model.safetensors.index.json (+ shards),
// or a single .safetensors file.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir_or_file);

  bool has(const std::string& name) const { return where_.count(name) > 0; }
  Tensor get(const std::string& name) const;  // throws ModelError naming the tensor if absent
  std::vector<std::string> names() const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

// Writes tensors to a safetensors file (used by tests and tools that produce fixtures or caches).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace hypic
