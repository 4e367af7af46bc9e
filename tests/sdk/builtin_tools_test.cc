#include "sdk/builtin_tools.h"

#include <gtest/gtest.h>

#include "runtime/error.h"

namespace hypic::sdk {
namespace {

TEST(Calculator, Arithmetic) {
  EXPECT_DOUBLE_EQ(evaluate_arithmetic("1 + 2 * 3"), 7);
  EXPECT_DOUBLE_EQ(evaluate_arithmetic("(1 + 2) * 3"), 9);
  EXPECT_DOUBLE_EQ(evaluate_arithmetic("2 ^ 3 ^ 2"), 512);
  EXPECT_DOUBLE_EQ(evaluate_arithmetic("-4 / 8"), -0.5);
  EXPECT_EQ(calculator_tool().fn(Json{{"expression", "6*7"}}).get<std::string>(), "42");
}

TEST(Calculator, ErrorsNameThePosition) {
  try {
    evaluate_arithmetic("1 + * 2");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("position 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(evaluate_arithmetic("1/0"), InvalidArgument);
  EXPECT_THROW(evaluate_arithmetic("(1"), InvalidArgument);
  EXPECT_THROW(evaluate_arithmetic(std::string(5000, '(') + "1"), InvalidArgument);
}

TEST(ToolRegistry, FailuresBecomeMessages) {
  ToolRegistry r;
  r.add(calculator_tool());
  EXPECT_TRUE(r.call("calculator", Json{{"expression", "1+1"}}).ok);
  auto unknown = r.call("weather", Json::object());
  EXPECT_FALSE(unknown.ok);
  EXPECT_NE(unknown.content.find("unknown tool 'weather'"), std::string::npos);
  auto missing = r.call("calculator", Json::object());
  EXPECT_NE(missing.content.find("missing required argument 'expression'"), std::string::npos);
  auto wrong = r.call("calculator", Json{{"expression", 3}});
  EXPECT_NE(wrong.content.find("must be of type"), std::string::npos);
  auto throws = r.call("calculator", Json{{"expression", "1/0"}});
  EXPECT_FALSE(throws.ok);
  EXPECT_NE(throws.content.find("division by zero"), std::string::npos);
}

}  // namespace
}  // namespace hypic::sdk
