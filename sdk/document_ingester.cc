#include "sdk/document_ingester.h"

#include <algorithm>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/regular_file.h"
#include "runtime/text/utf8.h"

namespace hypic::sdk {
namespace fs = std::filesystem;
IngestReport ingest_directory(FtsRetriever& store, const std::string& dir, const IngestOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError("'" + dir + "' is not a readable folder");
  IngestReport report;
  // One bad entry (a symlink loop, a dangling link, an unreadable or non-UTF-8 file) is skipped with a
  // warning naming it; it never aborts the rest of the folder.
  auto skip = [&](const fs::path& p, const std::string& why) {
    const std::string key = utf8::to_valid_lossy(fs::relative(p, dir, ec).generic_string());
    report.skipped.push_back(key.empty() ? utf8::to_valid_lossy(p.string()) : key);
    report.warnings.push_back(report.skipped.back() + ": " + why + "; skipped");
  };
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code ec2;
    const bool regular = it->is_regular_file(ec2);  // follows symlinks; a loop sets ec2 (ELOOP)
    if (ec2) {
      skip(it->path(), "cannot be resolved (" + ec2.message() + ")");
      continue;
    }
    if (!regular) continue;
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (std::find(options.extensions.begin(), options.extensions.end(), ext) != options.extensions.end())
      files.push_back(it->path());
  }
  if (ec) throw IoError("cannot list '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end());  // deterministic order
  for (size_t i = 0; i < files.size(); ++i) {
    const fs::path& f = files[i];
    if (options.on_document) options.on_document(i, files.size(), utf8::to_valid_lossy(fs::relative(f, dir).generic_string()));
    const std::string key = fs::relative(f, dir).generic_string();
    if (utf8::find_invalid(key) != std::string::npos) {
      skip(f, "the file name is not valid UTF-8");
      continue;
    }
    std::string text;
    try {
      text = read_regular_file(f.string(), "document", options.max_document_bytes);
    } catch (const IoError& e) {
      skip(f, e.what());
      continue;
    }
    const size_t bad = utf8::find_invalid(text);
    if (bad != std::string::npos || text.find('\0') != std::string::npos) {
      skip(f, bad != std::string::npos ? "not valid UTF-8 at byte " + std::to_string(bad) : "holds a NUL byte (binary?)");
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
