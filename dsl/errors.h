// Typed errors for templates and the variables supplied to them. Every message starts with
// file:line:column and names the block when there is one, e.g.
//   rag.yaml:12:9: block 'question': undefined variable 'questoin'
#pragma once
#include <string>

#include "runtime/error.h"

namespace hypic::dsl {

struct SourceLocation {
  std::string file;
  int line = 0;    // 1-based; 0 when unknown
  int column = 0;  // 1-based
  std::string str() const;
};

// A template that does not load: bad YAML, unknown key, bad type, undefined variable, bad syntax.
class TemplateError : public FormatError {
 public:
  TemplateError(SourceLocation loc, std::string block, const std::string& message);
  const SourceLocation& location() const { return loc_; }
  const std::string& block() const { return block_; }

 private:
  SourceLocation loc_;
  std::string block_;
};

// Supplied variables that do not fit the declarations: missing, undeclared, wrong type, missing field.
class VariableError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

// Variable text that carries chat markup (role tokens, tool-call tags) under the `reject` policy.
class InjectionError : public VariableError {
 public:
  using VariableError::VariableError;
};

// An include that is missing, unreadable or part of a cycle.
class IncludeError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

}  // namespace hypic::dsl
