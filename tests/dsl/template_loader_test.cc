// Hostile templates: alias bombs, huge or special files, includes that leave the template root, deep
// nesting. Each is refused with a typed error naming the place, quickly and without reading forever.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "dsl/compiler.h"
#include "dsl/template.h"
#include "runtime/error.h"
#include "tests/sdk/temp_dir.h"

using namespace hypic::dsl;
using hypic::sdk::test::TempDir;

namespace {

template <class E, class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "accepted";
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(TemplateLoader, AliasBombsInDefaultsAndSchemasStopAtTheValueBudget) {
  // Nine levels of ten aliases: 10^9 values if expanded.
  const auto start = std::chrono::steady_clock::now();
  std::string yaml;
  std::string lists = "[lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]";
  yaml = "vars:\n  a0: {type: list, default: &a0 " + lists + "}\n";
  for (int i = 1; i <= 9; ++i) {
    yaml += "  a" + std::to_string(i) + ": {type: list, default: &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) yaml += std::string(k ? ", " : "") + "*a" + std::to_string(i - 1);
    yaml += "]}\n";
  }
  const std::string err = error_of<TemplateError>([&] { parse_template(yaml + "blocks: []\n", "t.yaml"); });
  EXPECT_NE(err.find("expand to more than 100000 YAML nodes"), std::string::npos) << err;
  EXPECT_EQ(err.rfind("t.yaml:", 0), 0u) << err;

  std::string tools = "tools:\n  - name: t\n    parameters: {type: object, properties: {p: &s0 {type: string}}}\n";
  for (int i = 1; i <= 9; ++i) {
    tools += "  - name: t" + std::to_string(i) + "\n    parameters: &s" + std::to_string(i) + " {type: object, properties: {";
    for (int k = 0; k < 10; ++k) tools += std::string(k ? ", " : "") + "p" + std::to_string(k) + ": *s" + std::to_string(i - 1);
    tools += "}}\n";
  }
  const std::string err2 = error_of<TemplateError>([&] { parse_template(tools + "blocks: []\n", "t.yaml"); });
  EXPECT_NE(err2.find("expand to more than"), std::string::npos) << err2;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(TemplateLoader, TemplatesAndIncludesMustBeRegularFilesOfBoundedSize) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("fifo.yaml").c_str(), 0600), 0);
  EXPECT_NE(error_of<hypic::IoError>([&] { load_template(dir.file("fifo.yaml")); }).find("is a FIFO, not a regular file"),
            std::string::npos);
  write(dir.file("inc_fifo.yaml"), "blocks:\n  - include: fifo.yaml\n");
  const std::string fifo = error_of<IncludeError>([&] { load_template(dir.file("inc_fifo.yaml")); });
  EXPECT_NE(fifo.find("is a FIFO, not a regular file"), std::string::npos) << fifo;
  EXPECT_EQ(fifo.rfind(dir.file("inc_fifo.yaml") + ":2:14: ", 0), 0u) << fifo;

  // /dev/zero is outside the folder; with / as the root it is reached and refused as a device.
  write(dir.file("zero.yaml"), "blocks:\n  - include: /dev/zero\n");
  EXPECT_NE(error_of<IncludeError>([&] { load_template(dir.file("zero.yaml")); }).find("outside the template root"),
            std::string::npos);
  const std::string dev = error_of<IncludeError>([&] { load_template(dir.file("zero.yaml"), LoadOptions{"/"}); });
  EXPECT_NE(dev.find("is a character device, not a regular file"), std::string::npos) << dev;

  write(dir.file("big.yaml"), "blocks: []\n# " + std::string(5 << 20, 'x') + "\n");
  EXPECT_NE(error_of<hypic::IoError>([&] { load_template(dir.file("big.yaml")); }).find("more than the limit of 4194304"),
            std::string::npos);
  EXPECT_NE(error_of<TemplateError>([&] { parse_template(std::string(5 << 20, ' '), "t.yaml"); }).find("more than the limit"),
            std::string::npos);
}

TEST(TemplateLoader, IncludesStayInsideTheTemplateRoot) {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "tpl" / "parts");
  write(dir.file("secret.yaml"), "blocks:\n  - {id: s, role: system, text: secret}\n");
  write(dir.file("tpl/parts/ok.yaml"), "blocks:\n  - {id: ok, role: system, text: fine}\n");
  write(dir.file("tpl/up.yaml"), "blocks:\n  - include: ../secret.yaml\n");
  write(dir.file("tpl/abs.yaml"), "blocks:\n  - include: " + dir.file("secret.yaml") + "\n");
  write(dir.file("tpl/good.yaml"), "blocks:\n  - include: parts/ok.yaml\n");
  std::filesystem::create_symlink(dir.file("secret.yaml"), dir.file("tpl/link.yaml"));
  write(dir.file("tpl/via_link.yaml"), "blocks:\n  - include: link.yaml\n");

  for (const char* f : {"tpl/up.yaml", "tpl/abs.yaml", "tpl/via_link.yaml"}) {
    const std::string err = error_of<IncludeError>([&] { load_template(dir.file(f)); });
    EXPECT_NE(err.find("resolves to '" + dir.file("secret.yaml") + "', outside the template root '" + dir.file("tpl") + "'"),
              std::string::npos)
        << f << ": " << err;
    EXPECT_EQ(err.rfind(dir.file(f) + ":2:14: ", 0), 0u) << err;
  }
  EXPECT_EQ(load_template(dir.file("tpl/good.yaml")).blocks.size(), 1u);
  // An explicit root that contains the file allows it.
  const Template t = load_template(dir.file("tpl/up.yaml"), LoadOptions{dir.path.string()});
  ASSERT_EQ(t.blocks.size(), 1u);
  EXPECT_EQ(t.blocks[0].id, "s");
}

TEST(TemplateLoader, IncludeDepthAndCountAreBounded) {
  TempDir dir;
  // A chain of 300 distinct files, each including the next (it overflowed the stack under ASan).
  for (int i = 0; i < 300; ++i)
    write(dir.file("f" + std::to_string(i) + ".yaml"), "blocks:\n  - include: f" + std::to_string(i + 1) + ".yaml\n");
  write(dir.file("f300.yaml"), "blocks: []\n");
  const std::string deep = error_of<IncludeError>([&] { load_template(dir.file("f0.yaml")); });
  EXPECT_NE(deep.find("includes nested more than 32 deep"), std::string::npos) << deep;
  // 300 includes side by side.
  std::string many = "blocks:\n";
  for (int i = 0; i < 300; ++i) many += "  - include: f300.yaml\n";
  write(dir.file("many.yaml"), many);
  const std::string count = error_of<IncludeError>([&] { load_template(dir.file("many.yaml")); });
  EXPECT_NE(count.find("more than 256 includes"), std::string::npos) << count;
}

TEST(TemplateLoader, DeeplyNestedYamlIsAnErrorNotACrash) {
  const std::string deep = "vars:\n  v: {type: list, default: " + std::string(100000, '[') + std::string(100000, ']') + "}\nblocks: []\n";
  EXPECT_THROW(parse_template(deep, "t.yaml"), TemplateError);
  const std::string mid = "vars:\n  v: {type: list, default: " + std::string(100, '[') + std::string(100, ']') + "}\nblocks: []\n";
  const std::string err = error_of<TemplateError>([&] { parse_template(mid, "t.yaml"); });
  EXPECT_NE(err.find("nested more than 64 levels deep"), std::string::npos) << err;
}

}  // namespace
