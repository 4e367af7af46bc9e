// Reading a user-named input file safely: only regular files (a FIFO, a device such as /dev/zero or a
// folder is refused before anything blocks or reads forever) and only up to a size limit.
#pragma once
#include <cstddef>
#include <string>

namespace hypic {

// Default ceiling for text inputs (configs, templates, JSON, JSONL): far above any real one.
inline constexpr size_t kMaxTextFileBytes = size_t{256} << 20;

// The whole content of `path`. Throws IoError naming `what` and the path when the file is missing,
// unreadable, not a regular file, or larger than `max_bytes`.
std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes = kMaxTextFileBytes);

// Opens `path` read-only without blocking (a FIFO would otherwise block open()) and checks it is a
// regular file; returns the descriptor and its size. Throws IoError as above.
int open_regular_file(const std::string& path, const std::string& what, size_t* size);

}  // namespace hypic
