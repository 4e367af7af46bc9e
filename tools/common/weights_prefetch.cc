#include "tools/common/weights_prefetch.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tools/common/progress.h"

namespace hypic::tools {

void prefetch_weights(const std::string& model, bool quiet) {
  if (quiet || !Progress::stderr_is_terminal()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(model, ec)) {
    for (const auto& e : fs::directory_iterator(model, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") files.push_back(e.path());
  } else if (fs::is_regular_file(model, ec) && fs::path(model).extension() == ".safetensors") {
    files.push_back(model);
  }
  uint64_t total = 0;
  for (const auto& f : files) {
    const auto size = fs::file_size(f, ec);
    if (!ec) total += size;  // an unreadable file is the loader's to report
  }
  if (total == 0) return;
  Progress p("reading weights", total, quiet, /*bytes=*/true);
  std::vector<char> buf(8 << 20);
  uint64_t done = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      done += static_cast<uint64_t>(in.gcount());
      p.update(done, f.filename().string());
    }
  }
}

}  // namespace hypic::tools
