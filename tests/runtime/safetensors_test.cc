// Malformed safetensors files and indexes: each is refused with a typed error naming the file and the
// tensor; none is read out of bounds.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/sdk/temp_dir.h"

namespace hypic {
namespace {

// A file with the given JSON header and `data_bytes` zero bytes of data.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
}

template <typename E>
std::string error_of(const std::string& path) {
  try {
    Checkpoint::open(path);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "accepted";
}

TEST(Safetensors, MalformedHeadersAreRefusedNamingTheTensor) {
  sdk::test::TempDir dir;
  struct Case {
    const char* header;
    size_t data;
    const char* expect;
  };
  const std::vector<Case> cases = {
      // Overlapping tensors.
      {R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
           "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
       24, "tensors 'a' and 'b' overlap (data_offsets [0, 16) and [8, 24))"},
      // An element count that wraps 64 bits (2^62 * 4 * 4 bytes = 0 mod 2^64).
      {R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 0,
       "overflows the byte count"},
      {R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4,
       "tensor 'a': shape element 0 is -1, not a size"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 8,
       "tensor 'a': data_offsets [0,4] do not match shape [2] and dtype (8 bytes)"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8, "do not match shape"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8,
       "data_offsets must be two non-negative integers, got [0]"},
      {R"({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", 8, "unsupported dtype \"Q4\""},
      {R"({"a": {"dtype": "F32", "shape": [[[[]]]], "data_offsets": [0, 8]}})", 8,
       "shape element 0 is a JSON array, not a size"},
      {R"({"a": {"dtype": "F32", "shape": [2]}})", 8, "entry lacks dtype/shape/data_offsets"},
      {R"([1, 2])", 0, "safetensors header is not a JSON object"},
      {R"({"a": )", 0, "safetensors header is not valid JSON"},
      {R"({"a": 1e99999})", 0, "safetensors header is not valid JSON"},
  };
  for (const auto& c : cases) {
    const std::string f = dir.file("m.safetensors");
    write_raw(f, c.header, c.data);
    const std::string err = error_of<FormatError>(f);
    EXPECT_NE(err.find("'" + f + "'"), std::string::npos) << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.header << "\n -> " << err;
  }
}

TEST(Safetensors, DataBeyondTheFileAndHugeHeadersAreRefused) {
  sdk::test::TempDir dir;
  const std::string f = dir.file("m.safetensors");
  write_raw(f, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8);
  EXPECT_NE(error_of<IoError>(f).find("tensor 'a' lies beyond the end of the file"), std::string::npos)
      << error_of<IoError>(f);
  {
    std::ofstream out(f, std::ios::binary);
    const uint64_t n = uint64_t{1} << 40;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  EXPECT_NE(error_of<FormatError>(f).find("exceeds the limit"), std::string::npos) << error_of<FormatError>(f);
  write_raw(f, "", 0);
  std::filesystem::resize_file(f, 5);
  EXPECT_NE(error_of<IoError>(f).find("is truncated"), std::string::npos);
}

TEST(Safetensors, ValidFilesStillRoundTrip) {
  sdk::test::TempDir dir;
  const std::string f = dir.file("m.safetensors");
  write_raw(f, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                  "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [8, 8]},
                  "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]}})",
            16);
  const Checkpoint c = Checkpoint::open(f);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b", "e"}));
  EXPECT_EQ(c.get("b").shape(), (std::vector<int64_t>{2, 2}));
}

TEST(Safetensors, DuplicateTensorsAcrossShardsAreRefused) {
  sdk::test::TempDir dir;
  write_raw(dir.file("s1.safetensors"), R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  write_raw(dir.file("s2.safetensors"), R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  std::ofstream(dir.file("model.safetensors.index.json"))
      << R"({"weight_map": {"w": "s1.safetensors", "x": "s2.safetensors"}})";
  const std::string err = error_of<FormatError>(dir.path.string());
  EXPECT_NE(err.find("tensor 'w' is in both '" + dir.file("s1.safetensors") + "' and '" + dir.file("s2.safetensors") +
                     "'"),
            std::string::npos)
      << err;
}

TEST(Safetensors, ShardsOutsideTheFolderAreRefused) {
  sdk::test::TempDir dir;
  for (const char* bad : {"../elsewhere.safetensors", "/etc/passwd", "sub/../../x.safetensors", ""}) {
    std::ofstream(dir.file("model.safetensors.index.json"))
        << nlohmann::json{{"weight_map", {{"w", bad}}}}.dump();
    const std::string err = error_of<FormatError>(dir.path.string());
    EXPECT_NE(err.find("weight_map['w'] names '" + std::string(bad) + "', not a file inside the checkpoint folder"),
              std::string::npos)
        << err;
  }
}

TEST(Safetensors, OnlyRegularFilesAreOpened) {
  sdk::test::TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("model.safetensors").c_str(), 0600), 0);
  EXPECT_NE(error_of<IoError>(dir.path.string()).find("is a FIFO, not a regular file"), std::string::npos);
  EXPECT_NE(error_of<IoError>("/dev/zero").find("is a character device, not a regular file"), std::string::npos);
  std::filesystem::remove(dir.file("model.safetensors"));
  ASSERT_EQ(mkfifo(dir.file("model.safetensors.index.json").c_str(), 0600), 0);
  EXPECT_NE(error_of<IoError>(dir.path.string()).find("is a FIFO, not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace hypic
