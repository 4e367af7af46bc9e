// Reading a model's weight files once before they are opened, with a progress line (bytes and bytes/s):
// the loaders map the files, so the first pass over the weights is where a cold disk is slow; reading
// them here moves that wait to a place that reports it. Nothing happens when no progress is shown.
#pragma once
#include <string>

namespace hypic::tools {

// `model` is a model directory (its *.safetensors files) or one .safetensors file; quiet or a
// non-terminal stderr makes this a no-op. Unreadable files are left for the loader to report.
void prefetch_weights(const std::string& model, bool quiet);

}  // namespace hypic::tools
