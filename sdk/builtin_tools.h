// Tools that ship with hypic: an arithmetic calculator and document search over a Retriever.
#pragma once
#include <string>

#include "sdk/retriever.h"
#include "sdk/tool.h"

namespace hypic::sdk {

// Evaluates + - * / ^ (right-associative), unary minus, parentheses and decimal numbers.
// Throws InvalidArgument naming the position of a syntax error, or on division by zero.
double evaluate_arithmetic(const std::string& expression);

// calculator {expression: string} -> the value as a string.
Tool calculator_tool();
// search_docs {query: string, k?: integer} -> the best chunks as "[path] text" paragraphs.
// The retriever must outlive the tool.
Tool search_docs_tool(const Retriever& retriever, size_t default_k = 4);

}  // namespace hypic::sdk
