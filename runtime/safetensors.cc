#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/regular_file.h"

namespace hypic {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The safetensors format's own ceiling for the JSON header.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// A value for an error message: nested values are named by type only (dumping them recurses).
std::string brief(const json& v) {
  if (v.is_primitive()) return v.dump();
  if (v.is_array() && v.size() <= 8 && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_primitive(); }))
    return v.dump();
  return std::string("a JSON ") + v.type_name();
}

bool parse_dtype(const std::string& s, DType* out) {
  static const std::map<std::string, DType> m = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"F64", DType::F64},
      {"I64", DType::I64}, {"I32", DType::I32}, {"I16", DType::I16},   {"I8", DType::I8},
      {"U8", DType::U8},   {"BOOL", DType::BOOL}};
  auto it = m.find(s);
  if (it == m.end()) return false;
  *out = it->second;
  return true;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->self_ = f;
  const int fd = open_regular_file(path, "checkpoint file", &f->size_);
  if (f->size_ < 8) {
    ::close(fd);
    throw IoError("'" + path + "' is truncated: " + std::to_string(f->size_) + " bytes, no safetensors header");
  }
  void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) throw IoError("cannot map '" + path + "'");
  f->map_ = m;

  uint64_t hlen;
  std::memcpy(&hlen, m, 8);  // little-endian on every supported host
  if (hlen > kMaxHeaderBytes)
    throw FormatError("'" + path + "': safetensors header of " + std::to_string(hlen) + " bytes exceeds the limit of " +
                      std::to_string(kMaxHeaderBytes));
  if (hlen > f->size_ - 8)
    throw IoError("'" + path + "' is truncated: header claims " + std::to_string(hlen) + " bytes but the file has " +
                  std::to_string(f->size_));
  f->data_start_ = 8 + hlen;
  json h;
  try {
    h = json::parse(static_cast<const char*>(m) + 8, static_cast<const char*>(m) + 8 + hlen);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FormatError("'" + path + "': safetensors header is not valid JSON: " + e.what());
  }
  if (!h.is_object()) throw FormatError("'" + path + "': safetensors header is not a JSON object");
  const size_t data_size = f->size_ - f->data_start_;
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (v.is_object())
        for (auto& [k, mv] : v.items())
          if (mv.is_string()) f->metadata_[k] = mv.get<std::string>();
      continue;
    }
    const std::string where = "'" + path + "': tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw FormatError(where + ": entry lacks dtype/shape/data_offsets");
    Entry e;
    if (!v["dtype"].is_string() || !parse_dtype(v["dtype"].get<std::string>(), &e.dtype))
      throw FormatError(where + ": unsupported dtype " + brief(v["dtype"]));
    if (!v["shape"].is_array()) throw FormatError(where + ": shape is not an array");
    // Sizes are multiplied with overflow checks: a wrapped element count would pass the offsets check.
    uint64_t nbytes = dtype_size(e.dtype);
    for (auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw FormatError(where + ": shape element " + std::to_string(e.shape.size()) + " is " + brief(d) +
                          ", not a size");
      e.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(nbytes, d.get<uint64_t>(), &nbytes))
        throw FormatError(where + ": shape " + shape_to_string(e.shape) + "... overflows the byte count");
    }
    auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw FormatError(where + ": data_offsets must be two non-negative integers, got " + brief(off));
    e.begin = off[0].get<size_t>();
    e.end = off[1].get<size_t>();
    if (e.end < e.begin || e.end - e.begin != nbytes)
      throw FormatError(where + ": data_offsets " + brief(off) + " do not match shape " + shape_to_string(e.shape) +
                        " and dtype (" + std::to_string(nbytes) + " bytes)");
    if (e.end > data_size)
      throw IoError(where + " lies beyond the end of the file (file truncated? " + std::to_string(f->size_) +
                    " bytes)");
    f->entries_[name] = std::move(e);
  }
  // No two tensors may share bytes: sort the non-empty ranges and compare neighbours.
  std::vector<std::pair<const std::string*, const Entry*>> ranges;
  for (auto& [name, e] : f->entries_)
    if (e.end > e.begin) ranges.push_back({&name, &e});
  std::sort(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].second->begin < ranges[i - 1].second->end)
      throw FormatError("'" + path + "': tensors '" + *ranges[i - 1].first + "' and '" + *ranges[i].first +
                        "' overlap (data_offsets [" + std::to_string(ranges[i - 1].second->begin) + ", " +
                        std::to_string(ranges[i - 1].second->end) + ") and [" +
                        std::to_string(ranges[i].second->begin) + ", " + std::to_string(ranges[i].second->end) + "))");
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

Tensor SafetensorsFile::get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw ModelError("tensor '" + name + "' not found in '" + path_ + "'");
  const Entry& e = it->second;
  const char* p = static_cast<const char*>(map_) + data_start_ + e.begin;
  return Tensor::view(e.dtype, e.shape, p, self_.lock());
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> v;
  for (auto& [k, e] : entries_) v.push_back(k);
  return v;
}

Checkpoint Checkpoint::open(const std::string& dir_or_file) {
  Checkpoint c;
  c.source_ = dir_or_file;
  std::error_code ec;
  if (!fs::exists(dir_or_file, ec)) throw IoError("checkpoint '" + dir_or_file + "' does not exist");
  std::vector<std::string> files;
  if (fs::is_directory(dir_or_file, ec)) {
    const fs::path dir(dir_or_file);
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
      const std::string text = read_regular_file(index.string(), "checkpoint index");
      json j;
      try {
        j = json::parse(text);
      } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
        throw FormatError("'" + index.string() + "' is not valid JSON: " + e.what());
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        throw FormatError("'" + index.string() + "' has no weight_map object");
      std::set<std::string> shards;
      for (auto& [k, v] : j["weight_map"].items()) {
        if (!v.is_string()) throw FormatError("'" + index.string() + "': weight_map['" + k + "'] is not a file name");
        // Shards live in the checkpoint's folder: no absolute paths, no way up.
        const fs::path shard(v.get<std::string>());
        bool up = false;
        for (const auto& part : shard) up = up || part == "..";
        if (shard.empty() || shard.is_absolute() || up)
          throw FormatError("'" + index.string() + "': weight_map['" + k + "'] names '" + shard.string() +
                            "', not a file inside the checkpoint folder");
        shards.insert(shard.string());
      }
      for (auto& s : shards) files.push_back((dir / s).string());
    } else if (fs::exists(dir / "model.safetensors")) {
      files.push_back((dir / "model.safetensors").string());
    } else {
      throw IoError("no model.safetensors or model.safetensors.index.json in '" + dir_or_file + "'");
    }
  } else {
    files.push_back(dir_or_file);
  }
  for (auto& f : files) {
    c.files_.push_back(SafetensorsFile::open(f));
    for (auto& n : c.files_.back()->names()) {
      auto [it, fresh] = c.where_.emplace(n, c.files_.size() - 1);
      if (!fresh)
        throw FormatError("checkpoint '" + dir_or_file + "': tensor '" + n + "' is in both '" +
                          c.files_[it->second]->path() + "' and '" + f + "'");
    }
  }
  return c;
}

Tensor Checkpoint::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw ModelError("checkpoint '" + source_ + "' lacks tensor '" + name + "'");
  return files_[it->second]->get(name);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> v;
  for (auto& [k, i] : where_) v.push_back(k);
  return v;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  json h = json::object();
  size_t off = 0;
  for (auto& [name, t] : tensors) {
    h[name] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {off, off + t.nbytes()}}};
    off += t.nbytes();
  }
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8) hs += ' ';
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError("cannot write '" + tmp + "'");
    const uint64_t n = hs.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    for (auto& [name, t] : tensors) out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
    if (!out) throw IoError("short write to '" + tmp + "'");
  }
  fs::rename(tmp, path);  // atomic: a reader never sees a half-written file
}

}  // namespace hypic
