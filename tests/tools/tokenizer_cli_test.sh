#!/usr/bin/env bash
# hypic tokenize / detokenize / render-chat against reference outputs (Python tokenizers / transformers),
# and their errors on bad input: non-zero exit and a message naming the problem.
set -euo pipefail
: "${HYPIC:?path to the hypic binary}" "${HYPIC_SOURCE_DIR:?repository root}"
FIX="$HYPIC_SOURCE_DIR/tests/fixtures"
# The real Qwen3 tokenizer is the shared fixture next to the checkout (CMake's HYPIC_QWEN3_TOKENIZER_DIR).
QWEN="${HYPIC_QWEN3_TOKENIZER_DIR:-$HYPIC_SOURCE_DIR/../shared/fixtures/qwen3-tokenizer}"
TOK="$QWEN/tokenizer.json"
if [ ! -f "$TOK" ]; then echo "skipped: the Qwen3 tokenizer is not at $QWEN"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

printf 'Hello world!<|im_start|>user\n我们 😀 it'"'"'s\r\n' > "$tmp/text.txt"
"$HYPIC" tokenize --tokenizer "$TOK" --text-file "$tmp/text.txt" > "$tmp/ids.json"
grep -q '^\[.*151644.*\]$' "$tmp/ids.json" || fail "tokenize output is not a JSON id array with <|im_start|>: $(cat "$tmp/ids.json")"
"$HYPIC" detokenize --tokenizer "$TOK" --ids-file "$tmp/ids.json" > "$tmp/back.txt"
cmp -s "$tmp/text.txt" "$tmp/back.txt" || fail "detokenize(tokenize(x)) != x"

# Known ids from the reference (Python tokenizers): "Hello world" -> [9707, 1879].
printf 'Hello world' > "$tmp/hw.txt"
[ "$("$HYPIC" tokenize --tokenizer "$TOK" --text-file "$tmp/hw.txt")" = "[9707,1879]" ] || fail "tokenize 'Hello world'"
printf '' > "$tmp/empty.txt"
[ "$("$HYPIC" tokenize --tokenizer "$TOK" --text-file "$tmp/empty.txt")" = "[]" ] || fail "tokenize empty"

# render-chat: the expected text is transformers' apply_chat_template output for the same conversation.
cat > "$tmp/conv.json" <<'JSON'
{"messages": [{"role": "system", "content": "You are a helpful assistant."},
              {"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": null,
               "tool_calls": [{"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
              {"role": "tool", "tool_call_id": "a", "content": "21C"}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}
JSON
printf '%s' '<|im_start|>system
You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
21C
</tool_response><|im_end|>
' > "$tmp/want_nogen.txt"
"$HYPIC" render-chat --model-dir "$QWEN" --conversation "$tmp/conv.json" --no-generation-prompt > "$tmp/got_nogen.txt"
cmp "$tmp/want_nogen.txt" "$tmp/got_nogen.txt" || fail "render-chat --no-generation-prompt differs"
{ cat "$tmp/want_nogen.txt"; printf '<|im_start|>assistant\n'; } > "$tmp/want_gen.txt"
"$HYPIC" render-chat --model-dir "$QWEN" --conversation "$tmp/conv.json" > "$tmp/got_gen.txt"
cmp "$tmp/want_gen.txt" "$tmp/got_gen.txt" || fail "render-chat with generation prompt differs"

# Bad input: non-zero exit and a message that names the problem.
expect_error() {  # expect_error PATTERN cmd...
  local pat=$1; shift
  if "$@" > "$tmp/out" 2> "$tmp/err"; then fail "expected failure: $*"; fi
  grep -q -- "$pat" "$tmp/err" || fail "error for '$*' lacks '$pat': $(cat "$tmp/err")"
}
expect_error "missing.txt" "$HYPIC" tokenize --tokenizer "$TOK" --text-file "$tmp/missing.txt"
expect_error "nope.json" "$HYPIC" tokenize --tokenizer "$tmp/nope.json" --text-file "$tmp/hw.txt"
expect_error "text-file" "$HYPIC" tokenize --tokenizer "$TOK"
printf 'ab\xffcd' > "$tmp/bad_utf8.txt"
expect_error "not valid UTF-8" "$HYPIC" tokenize --tokenizer "$TOK" --text-file "$tmp/bad_utf8.txt"
printf '[1, 2,' > "$tmp/bad_ids.json"
expect_error "bad_ids.json: not valid JSON" "$HYPIC" detokenize --tokenizer "$TOK" --ids-file "$tmp/bad_ids.json"
printf '[1, "x"]' > "$tmp/str_ids.json"
expect_error "str_ids.json" "$HYPIC" detokenize --tokenizer "$TOK" --ids-file "$tmp/str_ids.json"
printf '[1, 99999999]' > "$tmp/big_ids.json"
expect_error "outside the vocabulary" "$HYPIC" detokenize --tokenizer "$TOK" --ids-file "$tmp/big_ids.json"
expect_error "missing_ids.json" "$HYPIC" detokenize --tokenizer "$TOK" --ids-file "$tmp/missing_ids.json"
printf '{"messages": [{"role": "user", "content": 3}]}' > "$tmp/bad_conv.json"
expect_error "bad_conv.json: messages\[0\].content" "$HYPIC" render-chat --model-dir "$QWEN" --conversation "$tmp/bad_conv.json"
printf '{"messages": [' > "$tmp/broken_conv.json"
expect_error "broken_conv.json: not valid JSON" "$HYPIC" render-chat --model-dir "$QWEN" --conversation "$tmp/broken_conv.json"
expect_error "no chat template" "$HYPIC" render-chat --model-dir "$tmp" --conversation "$tmp/conv.json"
echo "tokenizer CLI: ok"
