// safetensors header and index parsing: the input is a safetensors file, optionally preceded by an
// index JSON and a line "#shard". Accepted tensors must lie inside the file and not overlap.
#include <algorithm>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A fresh folder per input, so that every run depends on its input only.
  const std::string dir = hypic::fuzz::scratch_dir() + "/ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string_view in = hypic::fuzz::as_text(data, size);
  const size_t cut = in.find("\n#shard\n");
  if (cut != std::string_view::npos) {
    hypic::fuzz::write_file(dir + "/model.safetensors.index.json", in.substr(0, cut));
    hypic::fuzz::write_file(dir + "/model-1.safetensors", in.substr(cut + 8));
  } else {
    hypic::fuzz::write_file(dir + "/model.safetensors", in);
  }
  try {
    const hypic::Checkpoint c = hypic::Checkpoint::open(dir);
    std::vector<std::pair<const char*, const char*>> spans;
    for (const auto& n : c.names()) {
      const hypic::Tensor t = c.get(n);
      const char* p = static_cast<const char*>(t.raw());
      spans.push_back({p, p + t.nbytes()});
      // Touch the first and last byte: outside the mapping this faults.
      volatile char sink = 0;
      if (t.nbytes() > 0) sink = sink + p[0] + p[t.nbytes() - 1];
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second && spans[i].first != spans[i].second &&
          spans[i - 1].first != spans[i - 1].second)
        __builtin_trap();
  } catch (const hypic::Error&) {
  }
  return 0;
}
