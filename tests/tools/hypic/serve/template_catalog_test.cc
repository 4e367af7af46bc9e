// The templates of `hypic serve --templates DIR`: every YAML file directly in DIR is loaded at start-up
// (a broken one is named with file:line:column), named by its file name, listed for GET /v1/templates,
// and looked up by name only (an unknown or path-like name is a 404).
#include "tools/hypic/serve/template_catalog.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace hypic::serve {
namespace {

namespace fs = std::filesystem;

const std::string kExamples = std::string(HYPIC_SOURCE_DIR) + "/examples/templates";

// A fresh folder, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("hypic_templates_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name) << text;
  }
};

const char* kGood = "name: good\nvars:\n  question: string\nblocks:\n  - id: q\n    role: user\n    text: \"{{question}}\"\n";

TEST(TemplateCatalog, LoadsEveryTemplateDirectlyInTheFolder) {
  const TemplateCatalog c = TemplateCatalog::load(kExamples);
  // examples/templates holds three templates; common/ (included files) and the .json vars are not templates.
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.get("qa_docs").name, "qa_docs");
  EXPECT_EQ(c.get("tool_agent").tools.size(), 2u);
  EXPECT_FALSE(c.get("rag_qa").blocks.empty());  // its include (common/) resolved inside the folder
}

TEST(TemplateCatalog, ListsNamesVariablesAndOfferedTools) {
  const Json l = TemplateCatalog::load(kExamples).list_json();
  EXPECT_EQ(l["object"], "list");
  ASSERT_EQ(l["data"].size(), 3u);
  EXPECT_EQ(l["data"][0]["id"], "qa_docs");
  EXPECT_EQ(l["data"][0]["object"], "template");
  EXPECT_EQ(l["data"][0]["vars"][0], Json({{"name", "docs"}, {"type", "list"}, {"required", true}}));
  EXPECT_EQ(l["data"][0]["vars"][2], Json({{"name", "expected"}, {"type", "string"}, {"required", false}, {"default", ""}}));
  EXPECT_EQ(l["data"][0]["tools"], Json::array());
  EXPECT_EQ(l["data"][2]["id"], "tool_agent");
  EXPECT_EQ(l["data"][2]["tools"], Json({"calculator", "search_docs"}));
}

TEST(TemplateCatalog, BrokenTemplateIsNamedWithFileAndLineAtStartUp) {
  TempDir d;
  d.write("good.yaml", kGood);
  d.write("bad.yaml", "name: bad\nblocks:\n  - id: q\n    role: user\n    txet: hello\n");
  try {
    TemplateCatalog::load(d.path.string());
    FAIL() << "a broken template loaded";
  } catch (const dsl::TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:5:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("txet"), std::string::npos) << e.what();
  }
}

TEST(TemplateCatalog, IncludeLeavingTheFolderIsRefused) {
  TempDir d;
  d.write("inner/t.yaml", "name: t\nblocks:\n  - include: ../outside.yaml\n");
  d.write("outside.yaml", "blocks:\n  - id: s\n    role: system\n    text: secret\n");
  // The templates folder is inner/: outside.yaml is next to it, not under it.
  EXPECT_THROW(TemplateCatalog::load((d.path / "inner").string()), dsl::IncludeError);
}

TEST(TemplateCatalog, TwoFilesWithOneNameAreRefused) {
  TempDir d;
  d.write("a.yaml", kGood);
  d.write("a.yml", kGood);
  try {
    TemplateCatalog::load(d.path.string());
    FAIL() << "two templates named 'a' loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
}

TEST(TemplateCatalog, FolderThatIsNotOneIsAnIoError) {
  EXPECT_THROW(TemplateCatalog::load(kExamples + "/qa_docs.yaml"), IoError);
  EXPECT_THROW(TemplateCatalog::load(kExamples + "/no_such_folder"), IoError);
}

TEST(TemplateCatalog, UnknownOrPathLikeNameIs404NamingIt) {
  const TemplateCatalog c = TemplateCatalog::load(kExamples);
  for (const std::string name : {"nope", "../qa_docs", "qa_docs.yaml", "common/assistant_persona", "/etc/passwd"}) {
    try {
      c.get(name);
      FAIL() << "found '" << name << "'";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 404);
      EXPECT_EQ(e.type, "not_found_error");
      EXPECT_EQ(e.param, "hypic.template");
      EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("qa_docs, rag_qa, tool_agent"), std::string::npos) << e.what();
    }
  }
}

TEST(TemplateCatalog, WithoutTemplatesEveryNameIs404) {
  const TemplateCatalog none;
  EXPECT_TRUE(none.empty());
  try {
    none.get("qa_docs");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_NE(std::string(e.what()).find("--templates"), std::string::npos) << e.what();
  }
  EXPECT_EQ(none.list_json()["data"], Json::array());
}

}  // namespace
}  // namespace hypic::serve
