#include "sdk/document_ingester.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/error.h"

namespace hypic::sdk {
namespace fs = std::filesystem;
namespace {

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size() || (c == 0)) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

IngestReport ingest_directory(FtsRetriever& store, const std::string& dir, const IngestOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError("'" + dir + "' is not a readable folder");
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (std::find(options.extensions.begin(), options.extensions.end(), ext) != options.extensions.end())
      files.push_back(it->path());
  }
  if (ec) throw IoError("cannot list '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end());  // deterministic order
  IngestReport report;
  for (size_t i = 0; i < files.size(); ++i) {
    const fs::path& f = files[i];
    if (options.on_document) options.on_document(i, files.size(), fs::relative(f, dir).generic_string());
    std::ifstream in(f, std::ios::binary);
    if (!in) throw IoError("cannot read '" + f.string() + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const std::string key = fs::relative(f, dir).generic_string();
    if (!valid_utf8(text)) {
      report.skipped.push_back(key);
      continue;
    }
    const auto r = store.add_document(key, text, options.chunk_tokens, options.counter);
    if (r.changed) {
      ++report.documents_added;
      report.chunks_added += r.chunks;
    } else {
      ++report.documents_unchanged;
    }
  }
  return report;
}

}  // namespace hypic::sdk
