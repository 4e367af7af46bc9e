// read_regular_file: special files are refused before anything blocks or reads forever.
#include "runtime/regular_file.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <fstream>

#include "runtime/error.h"
#include "tests/sdk/temp_dir.h"

namespace hypic {
namespace {

std::string error_of(const std::string& path, size_t limit = kMaxTextFileBytes) {
  try {
    read_regular_file(path, "thing", limit);
  } catch (const IoError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(RegularFile, SpecialFilesAreRefusedByKind) {
  sdk::test::TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_EQ(error_of(dir.file("fifo")), "thing '" + dir.file("fifo") + "' is a FIFO, not a regular file");
  EXPECT_EQ(error_of("/dev/zero"), "thing '/dev/zero' is a character device, not a regular file");
  EXPECT_EQ(error_of(dir.path.string()), "thing '" + dir.path.string() + "' is a folder, not a regular file");
  EXPECT_NE(error_of(dir.file("none")).find("cannot open thing '" + dir.file("none") + "': No such file"),
            std::string::npos);
}

TEST(RegularFile, SizeLimitAndContent) {
  sdk::test::TempDir dir;
  std::ofstream(dir.file("f"), std::ios::binary) << std::string("a\0b", 3);
  EXPECT_EQ(read_regular_file(dir.file("f"), "thing"), std::string("a\0b", 3));
  EXPECT_EQ(error_of(dir.file("f"), 2), "thing '" + dir.file("f") + "' is 3 bytes, more than the limit of 2");
  std::ofstream(dir.file("empty"));
  EXPECT_EQ(read_regular_file(dir.file("empty"), "thing"), "");
}

}  // namespace
}  // namespace hypic
