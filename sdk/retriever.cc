#include "sdk/retriever.h"

namespace hypic::sdk {

nlohmann::ordered_json chunks_to_json(const std::vector<Chunk>& chunks) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& c : chunks)
    a.push_back({{"id", c.id}, {"path", c.doc_path}, {"index", c.index}, {"text", c.text}, {"score", c.score}});
  return a;
}

}  // namespace hypic::sdk
