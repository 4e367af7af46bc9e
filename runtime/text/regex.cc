#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/text/regex.h"

#include <pcre2.h>

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/error.h"

namespace hypic {

namespace {

// Match data and a JIT stack per thread: encode is const and may run on several threads at once.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(4, nullptr);
    // 1 MiB: long whitespace runs backtrack through `\s+(?!\S)`; the 32 KiB default can run out.
    stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    if (stack && ctx) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState s;
  return s;
}

// PCRE2's default limits count backtracking steps, not input: `\s*[\r\n]+` over 10 M spaces takes
// 10 M steps before it gives up, the default match limit. Tokenizer patterns are linear in the
// input, so a match that hits a limit is run again without one (and with a JIT stack that can grow to
// 256 MiB, made only for that retry).
bool is_limit_error(int rc) {
  return rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
         rc == PCRE2_ERROR_JIT_STACKLIMIT;
}

int match_unlimited(const pcre2_code* code, bool jit, PCRE2_SPTR subject, size_t size, size_t start,
                    pcre2_match_data* data) {
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = jit ? pcre2_jit_stack_create(1024 * 1024, 256 * 1024 * 1024, nullptr) : nullptr;
  if (!ctx || (jit && !stack)) {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(ctx);
    return PCRE2_ERROR_NOMEMORY;
  }
  pcre2_set_match_limit(ctx, UINT32_MAX);
  pcre2_set_depth_limit(ctx, UINT32_MAX);
  pcre2_set_heap_limit(ctx, UINT32_MAX);
  if (stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
  const int rc = jit ? pcre2_jit_match(code, subject, size, start, PCRE2_NO_UTF_CHECK, data, ctx)
                     : pcre2_match(code, subject, size, start, PCRE2_NO_UTF_CHECK, data, ctx);
  pcre2_jit_stack_free(stack);
  pcre2_match_context_free(ctx);
  return rc;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                        &off, nullptr);
  if (!code_)
    throw FormatError(where + ": regex does not compile at offset " + std::to_string(off) + ": " +
                      pcre2_message(err) + " (pattern: " + pattern + ")");
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

bool Regex::find(std::string_view text, size_t start, size_t* match_begin, size_t* match_end) const {
  ThreadMatchState& st = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, st.data, st.ctx)
                : pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, st.data, st.ctx);
  if (is_limit_error(rc)) rc = match_unlimited(code_, jit_, subject, text.size(), start, st.data);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0)
    throw InvalidArgument("regex match failed at byte " + std::to_string(start) + " of " +
                          std::to_string(text.size()) + ": " + pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  *match_begin = ov[0];
  *match_end = ov[1];
  return true;
}

}  // namespace hypic
