#include "tools/common/progress.h"

#include <unistd.h>

#include <cstdio>

namespace hypic::tools {

std::string format_bytes(double b) {
  char buf[32];
  if (b < 1e3) std::snprintf(buf, sizeof buf, "%.0f B", b);
  else if (b < 1e6) std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else if (b < 1e9) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  return buf;
}

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

Progress::Progress(std::string what, uint64_t total, bool quiet, bool bytes)
    : what_(std::move(what)), total_(total), bytes_(bytes), active_(!quiet && stderr_is_terminal()),
      start_(std::chrono::steady_clock::now()), last_(start_ - std::chrono::seconds(1)) {}

Progress::~Progress() { finish(); }

void Progress::update(uint64_t done, const std::string& note) {
  done_ = done;
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100) && done_ != total_) return;
  last_ = now;
  draw(note);
}

void Progress::draw(const std::string& note) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = what_ + ": ";
  if (bytes_) {
    line += format_bytes(static_cast<double>(done_));
    if (total_) line += " of " + format_bytes(static_cast<double>(total_));
    if (s > 0) line += ", " + format_bytes(static_cast<double>(done_) / s) + "/s";
  } else {
    line += std::to_string(done_);
    if (total_) line += "/" + std::to_string(total_);
  }
  if (total_) {
    char pct[16];
    std::snprintf(pct, sizeof pct, " (%.0f%%)", 100.0 * static_cast<double>(done_) / static_cast<double>(total_));
    line += pct;
  }
  char el[32];
  std::snprintf(el, sizeof el, ", %.1f s", s);
  line += el;
  if (!note.empty()) line += "  " + note;
  if (line.size() > 110) line.resize(110);
  // \r and clear-to-end-of-line: redraw in place.
  std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::clear() {
  if (!active_ || !drawn_) return;
  std::fprintf(stderr, "\r\x1b[K");
  std::fflush(stderr);
  drawn_ = false;
}

void Progress::finish() {
  if (!active_) return;
  draw("");
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  active_ = false;
}

}  // namespace hypic::tools
