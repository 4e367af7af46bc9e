#include "tools/common/progress.h"

#include <fcntl.h>
#include <pty.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace hypic::tools {
namespace {

// Runs `draw` with stderr on a pseudo-terminal (terminal = true) or a pipe, and returns what it wrote.
template <class F>
std::string stderr_of(bool terminal, F&& draw) {
  int reader = -1, writer = -1;
  if (terminal) {
    EXPECT_EQ(openpty(&reader, &writer, nullptr, nullptr, nullptr), 0);
  } else {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    reader = p[0], writer = p[1];
  }
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(writer, STDERR_FILENO);
  draw();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(writer);
  fcntl(reader, F_SETFL, O_NONBLOCK);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(reader, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(reader);
  return out;
}

TEST(Progress, DrawsCountsOnATerminalAndEndsTheLine) {
  const std::string out = stderr_of(true, [] {
    Progress p("ingesting documents", 4, /*quiet=*/false);
    EXPECT_TRUE(p.active());
    p.update(1, "a.txt");
    p.update(4);
  });
  EXPECT_NE(out.find("ingesting documents: 1/4 (25%)"), std::string::npos) << out;
  EXPECT_NE(out.find("a.txt"), std::string::npos) << out;
  EXPECT_NE(out.find("ingesting documents: 4/4 (100%)"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
}

TEST(Progress, BytesComeWithARate) {
  const std::string out = stderr_of(true, [] {
    Progress p("reading weights", 3'000'000, false, /*bytes=*/true);
    p.update(3'000'000);
  });
  EXPECT_NE(out.find("reading weights: 3.0 MB of 3.0 MB"), std::string::npos) << out;
  EXPECT_NE(out.find("/s"), std::string::npos) << out;
}

TEST(Progress, SilentWhenQuietOrNotATerminal) {
  EXPECT_EQ(stderr_of(false, [] {
              Progress p("x", 2, false);
              EXPECT_FALSE(p.active());
              p.update(1);
            }),
            "");
  EXPECT_EQ(stderr_of(true, [] {
              Progress p("x", 2, /*quiet=*/true);
              p.update(1);
            }),
            "");
}

TEST(Progress, FormatsBytes) {
  EXPECT_EQ(format_bytes(812), "812 B");
  EXPECT_EQ(format_bytes(3.4e6), "3.4 MB");
  EXPECT_EQ(format_bytes(1.2e9), "1.20 GB");
}

}  // namespace
}  // namespace hypic::tools
