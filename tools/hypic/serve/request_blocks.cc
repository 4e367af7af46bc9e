#include "tools/hypic/serve/request_blocks.h"

#include <algorithm>

namespace hypic::serve {

namespace {

struct Cut {
  size_t at;
  std::string kind;  // kind of the block that starts here
};

}  // namespace

std::vector<TextBlock> split_rendered_chat(const RenderedChat& chat, const Conversation& conv,
                                           const std::vector<std::vector<ContentPart>>& parts,
                                           const std::string& forced) {
  const std::string& text = chat.text;
  std::vector<Cut> cuts;
  // Every span start opens a block; the preamble has none of its own (it joins what follows).
  if (chat.tools && chat.tools->size() > 0) cuts.push_back({chat.tools->begin, "tools"});
  for (size_t i = 0; i < chat.messages.size(); ++i) {
    const TextSpan& span = chat.messages[i];
    if (span.size() == 0) continue;
    const bool system = i < conv.messages.size() && conv.messages[i].role == "system";
    cuts.push_back({span.begin, system ? "system" : "message"});
    if (i >= parts.size() || i >= chat.content.size()) continue;
    const ContentPlacement& place = chat.content[i];
    if (place.at == std::string::npos) continue;  // rewritten by the template: the message stays one block
    // Content offsets of each part (joined by "\n"), mapped into the text where they lie verbatim.
    size_t off = 0;
    const auto& ps = parts[i];
    for (size_t k = 0; k < ps.size(); ++k) {
      const size_t begin = off, end = off + ps[k].text.size() + (k + 1 < ps.size() ? 1 : 0);
      off = end;
      if (!ps[k].cache || ps[k].text.empty()) continue;
      if (begin < place.skipped || end > place.skipped + place.length) continue;  // trimmed by the template
      const size_t tb = place.at + (begin - place.skipped), te = place.at + (end - place.skipped);
      if (tb > span.begin) cuts.push_back({tb, "document"});
      if (te < span.end) cuts.push_back({te, "message"});
    }
  }
  std::stable_sort(cuts.begin(), cuts.end(), [](const Cut& a, const Cut& b) { return a.at < b.at; });
  const size_t gen = chat.generation_prompt.size() > 0 ? chat.generation_prompt.begin : text.size();
  std::vector<TextBlock> out;
  size_t from = 0;
  std::string kind = cuts.empty() ? "message" : cuts[0].kind;
  for (const Cut& c : cuts) {
    if (c.at <= from || c.at >= gen) {
      if (c.at == from) kind = c.kind;  // the preamble joins this block, which names it
      continue;
    }
    out.push_back({kind, text.substr(from, c.at - from)});
    from = c.at;
    kind = c.kind;
  }
  if (gen > from) out.push_back({kind, text.substr(from, gen - from)});
  std::string tail = text.substr(std::min(gen, text.size())) + forced;
  if (tail.empty()) {
    // No generation prompt: the last block's text becomes the query tail.
    if (out.empty()) return out;
    tail = out.back().text;
    out.pop_back();
  }
  out.push_back({"prompt", std::move(tail)});
  return out;
}

}  // namespace hypic::serve
