// The BPE model of the Hugging Face tokenizer.json format: vocab, ranked merges, byte fallback, unk,
// and a word cache (the same pieces recur constantly in real text).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hypic {

// Every token id of a tokenizer.json (vocab and added tokens) lies below this: far above real
// vocabularies (~260k), low enough that the id tables built from it stay a bounded allocation.
inline constexpr int kMaxTokenId = 1 << 24;

class BpeModel {
 public:
  // `byte_level`: pieces arrive as raw bytes and vocab strings are in the byte-level alphabet
  // (ByteLevel pre-tokenizer); otherwise pieces are UTF-8 and each character starts as one symbol.
  BpeModel(const nlohmann::json& model, bool byte_level, const std::string& where);
  ~BpeModel();

  // Appends the ids of one pre-tokenized piece.
  void encode_piece(std::string_view piece, std::vector<int>& out) const;

  // Vocab strings as written in tokenizer.json; ids without a string map to "".
  const std::string& token(int id) const { return tokens_[static_cast<size_t>(id)]; }
  std::optional<int> id_of(std::string_view token) const;
  // One more than the largest vocab id.
  size_t size() const { return tokens_.size(); }

 private:
  struct MergeTable;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using StringMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

  void initial_symbols(std::string_view piece, std::vector<int>& syms) const;
  void merge(std::vector<int>& syms) const;
  void merge_long(std::vector<int>& syms) const;

  bool byte_level_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int unk_id_ = -1;
  std::vector<std::string> tokens_;
  StringMap vocab_;             // vocab string -> id
  StringMap bytes_vocab_;       // raw bytes -> id (byte level with ignore_merges only)
  int byte_unit_[256];          // byte level: id of each single byte, or -1
  int byte_fallback_id_[256];   // id of "<0xXX>", or -1
  std::unique_ptr<MergeTable> merges_;

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> cache_;
};

}  // namespace hypic
