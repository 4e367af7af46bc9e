#include "runtime/text/tokenizer.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/regular_file.h"
#include "runtime/text/added_tokens.h"
#include "runtime/text/bpe.h"
#include "runtime/text/byte_level.h"
#include "runtime/text/decoder.h"
#include "runtime/text/normalizer.h"
#include "runtime/text/pre_tokenizer.h"
#include "runtime/text/utf8.h"

namespace hypic {

struct Tokenizer::Impl {
  std::string where;
  uint64_t fingerprint = 0;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;
  AddedTokenMatcher raw_added;         // matched before normalization
  AddedTokenMatcher normalized_added;  // matched after it
  std::unordered_map<int, AddedToken> added_by_id;
  std::unordered_map<std::string, int> added_by_content;
  size_t vocab_size = 0;
  // Byte-level decoder: every id's bytes, precomputed (decode is then a concatenation).
  std::vector<std::string> id_bytes;

  void encode_plain(std::string_view text, std::vector<int>& out) const;
  void encode_normalized(std::string_view text, std::vector<int>& out) const;
};

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

void check_utf8(std::string_view text, const char* what) {
  const size_t bad = utf8::find_invalid(text);
  if (bad != std::string_view::npos)
    throw InvalidArgument(std::string(what) + " is not valid UTF-8 (bad byte 0x" +
                          [&] {
                            char b[3];
                            std::snprintf(b, sizeof(b), "%02X", static_cast<unsigned char>(text[bad]));
                            return std::string(b);
                          }() +
                          " at offset " + std::to_string(bad) + ")");
}

}  // namespace

void Tokenizer::Impl::encode_normalized(std::string_view text, std::vector<int>& out) const {
  PieceBuffer buf;
  buf.pieces.push_back(text);
  if (pre_tokenizer) pre_tokenizer->split(buf);
  for (std::string_view p : buf.pieces) model->encode_piece(p, out);
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int>& out) const {
  std::string normalized_storage;
  std::string_view norm = text;
  if (normalizer) {
    normalized_storage = normalizer->normalize(text);
    norm = normalized_storage;
  }
  if (normalized_added.empty()) return encode_normalized(norm, out);
  std::vector<AddedTokenMatcher::Segment> segs;
  normalized_added.split(norm, segs);
  for (const auto& s : segs) {
    if (s.id >= 0)
      out.push_back(s.id);
    else
      encode_normalized(norm.substr(s.begin, s.end - s.begin), out);
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(read_regular_file(path, "tokenizer file"), path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FormatError(where + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw FormatError(where + ": a tokenizer.json must be a JSON object");
  auto impl = std::make_unique<Impl>();
  impl->where = where;
  impl->fingerprint = fnv1a(json_text);
  try {
    const auto& model = j.at("model");
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") throw ModelError(where + ": unsupported model type \"" + type + "\" (only BPE)");
    impl->normalizer = make_normalizer(j.value("normalizer", nlohmann::json()), where);
    impl->pre_tokenizer = make_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json()), where);
    const bool byte_level = impl->pre_tokenizer && impl->pre_tokenizer->ends_byte_level();
    impl->model = std::make_unique<BpeModel>(model, byte_level, where);
    impl->decoder = make_decoder(j.value("decoder", nlohmann::json()), where);
    impl->vocab_size = impl->model->size();
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      const auto& arr = j["added_tokens"];
      if (!arr.is_array()) throw FormatError(where + ": added_tokens must be an array");
      for (size_t i = 0; i < arr.size(); ++i) {
        const auto& a = arr[i];
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string())
          throw FormatError(where + ": added_tokens[" + std::to_string(i) + "] needs an integer id and a content");
        AddedToken t;
        if (!a["id"].is_number_unsigned() || a["id"].get<uint64_t>() >= static_cast<uint64_t>(kMaxTokenId))
          throw FormatError(where + ": added_tokens[" + std::to_string(i) + "] has id " + a["id"].dump() +
                            ", outside [0, " + std::to_string(kMaxTokenId) + ")");
        t.id = a["id"].get<int>();
        t.content = a["content"].get<std::string>();
        t.special = a.value("special", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        t.single_word = a.value("single_word", false);
        t.normalized = a.value("normalized", !t.special);
        if (t.normalized && impl->normalizer) {
          // The reference matches such tokens against their normalized form.
          t.content = impl->normalizer->normalize(t.content);
          impl->normalized_added.add(t);
        } else {
          impl->raw_added.add(t);
        }
        impl->added_by_content[a["content"].get<std::string>()] = t.id;
        impl->vocab_size = std::max(impl->vocab_size, static_cast<size_t>(t.id) + 1);
        t.content = a["content"].get<std::string>();
        impl->added_by_id[t.id] = std::move(t);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(where + ": unexpected structure: " + e.what());
  }
  if (impl->decoder && impl->decoder->is_byte_level()) {
    impl->id_bytes.resize(impl->vocab_size);
    for (size_t id = 0; id < impl->vocab_size; ++id) {
      auto it = impl->added_by_id.find(static_cast<int>(id));
      const std::string& s =
          it != impl->added_by_id.end() ? it->second.content : (id < impl->model->size() ? impl->model->token(static_cast<int>(id)) : std::string());
      impl->id_bytes[id] = byte_level::to_bytes(s);
    }
  }
  return Tokenizer(std::move(impl));
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  check_utf8(text, "text to encode");
  std::vector<int> out;
  out.reserve(text.size() / 3 + 4);
  if (impl_->raw_added.empty()) {
    impl_->encode_plain(text, out);
    return out;
  }
  std::vector<AddedTokenMatcher::Segment> segs;
  impl_->raw_added.split(text, segs);
  for (const auto& s : segs) {
    if (s.id >= 0)
      out.push_back(s.id);
    else
      impl_->encode_plain(text.substr(s.begin, s.end - s.begin), out);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int> ids, bool skip_special_tokens) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= impl_->vocab_size)
      throw InvalidArgument("token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                            " is outside the vocabulary of " + impl_->where + " (size " +
                            std::to_string(impl_->vocab_size) + ")");
  }
  if (!impl_->id_bytes.empty()) {
    std::string bytes;
    for (int id : ids) {
      if (skip_special_tokens && is_special(id)) continue;
      bytes += impl_->id_bytes[static_cast<size_t>(id)];
    }
    return utf8::to_valid_lossy(bytes);
  }
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    toks.push_back(id_to_token(id));
  }
  if (impl_->decoder) impl_->decoder->decode(toks);
  std::string bytes;
  for (const auto& t : toks) bytes += t;
  return utf8::to_valid_lossy(bytes);
}

std::optional<int> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_by_content.find(std::string(token));
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model->id_of(token);
}

const std::string& Tokenizer::id_to_token(int id) const {
  auto it = impl_->added_by_id.find(id);
  if (it != impl_->added_by_id.end()) return it->second.content;
  if (id < 0 || static_cast<size_t>(id) >= impl_->model->size() || impl_->model->token(id).empty())
    throw InvalidArgument("token id " + std::to_string(id) + " is not in the vocabulary of " + impl_->where);
  return impl_->model->token(id);
}

bool Tokenizer::is_special(int id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && it->second.special;
}

size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

uint64_t Tokenizer::fingerprint() const { return impl_->fingerprint; }

}  // namespace hypic
