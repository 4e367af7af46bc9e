// A one-line progress report on stderr for long work a person waits on (model load, ingest, eval-pic,
// benchmarks). It draws only when stderr is a terminal and the program was not asked to be quiet, so
// logs and pipes see nothing extra; the line is redrawn in place at most ~10 times a second.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace hypic::tools {

class Progress {
 public:
  // `what` heads the line ("loading weights"); `total` 0 means unknown. `bytes` formats counts as
  // bytes with a rate in bytes/s.
  Progress(std::string what, uint64_t total, bool quiet, bool bytes = false);
  ~Progress();  // ends the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(uint64_t done, const std::string& note = "");
  void finish();
  // Erases the drawn line, before other output goes to stderr (the next update draws it again).
  void clear();
  bool active() const { return active_; }

  // Whether progress lines are drawn at all: stderr is a terminal.
  static bool stderr_is_terminal();

 private:
  void draw(const std::string& note);
  std::string what_;
  uint64_t total_, done_ = 0;
  bool bytes_, active_, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

// Human-readable bytes: "812 B", "3.4 MB", "1.20 GB".
std::string format_bytes(double bytes);

}  // namespace hypic::tools
