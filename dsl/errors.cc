#include "dsl/errors.h"

namespace hypic::dsl {
namespace {

std::string compose(const SourceLocation& loc, const std::string& block, const std::string& message) {
  std::string s = loc.str() + ": ";
  if (!block.empty()) s += "block '" + block + "': ";
  return s + message;
}

}  // namespace

std::string SourceLocation::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

TemplateError::TemplateError(SourceLocation loc, std::string block, const std::string& message)
    : FormatError(compose(loc, block, message)), loc_(std::move(loc)), block_(std::move(block)) {}

}  // namespace hypic::dsl
