// Retrieval interface: the agent's retrieved-chunks block is filled from any Retriever (SQLite FTS5
// by default, a vector store by plugging in another implementation).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hypic::sdk {

struct Chunk {
  std::string id;        // stable: the same text of the same document always has the same id
  std::string doc_path;  // relative to the ingested folder
  int64_t index = 0;     // position of the chunk within its document
  std::string text;
  double score = 0;  // higher is better; comparable only within one search
};

class Retriever {
 public:
  virtual ~Retriever() = default;
  // The best `k` chunks for `query`, best first. An empty or unmatched query gives no chunks.
  virtual std::vector<Chunk> search(const std::string& query, size_t k) const = 0;
};

// Chunks as a template list variable: [{"id", "path", "index", "text", "score"}].
nlohmann::ordered_json chunks_to_json(const std::vector<Chunk>& chunks);

}  // namespace hypic::sdk
