#!/usr/bin/env bash
# hypic render-chat / render / run with --chat-template: transformers goldens of both formats
# (tests/fixtures/chat/goldens.json; chat_format_test checks all of them in-process, here every fifth
# and every refusal) rendered by the CLI byte for byte, refusals where the template raises, the agent
# on a model told to speak Qwen3.5, and clear errors for a bad template file.
set -euo pipefail
: "${HYPIC:?path to the hypic binary}" "${HYPIC_SOURCE_DIR:?repository root}"
CHAT="$HYPIC_SOURCE_DIR/tests/fixtures/chat"
M="$HYPIC_SOURCE_DIR/tests/fixtures/models/qwen3_5_dense"
T="$HYPIC_SOURCE_DIR/examples/templates"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# One conversation file, expected text (or expected refusal) and flags per golden.
python3 - "$CHAT/goldens.json" "$tmp" <<'PY'
import json, os, sys
rows = json.load(open(sys.argv[1]))
with open(os.path.join(sys.argv[2], "cases.txt"), "w") as index:
    for i, g in enumerate(rows):
        if i % 5 and "error" not in g:
            continue
        conv = {"messages": g["messages"]}
        if "tools" in g:
            conv["tools"] = g["tools"]
        json.dump(conv, open(os.path.join(sys.argv[2], "c%d.json" % i), "w"), ensure_ascii=False)
        flags = [] if g["add_generation_prompt"] else ["--no-generation-prompt"]
        if "enable_thinking" in g:
            flags += ["--enable-thinking", "true" if g["enable_thinking"] else "false"]
        if "error" in g:
            kind = "error"
        else:
            kind = "text"
            open(os.path.join(sys.argv[2], "w%d.txt" % i), "w", encoding="utf-8", newline="").write(g["expected"])
        index.write("%d %s %s_chat_template.jinja %s\n" % (i, kind, g["format"], " ".join(flags)))
PY
n=0
while read -r i kind tmpl flags; do
  # shellcheck disable=SC2086
  if [ "$kind" = text ]; then
    "$HYPIC" render-chat --chat-template "$CHAT/$tmpl" --conversation "$tmp/c$i.json" $flags > "$tmp/g$i.txt" ||
      fail "render-chat case $i"
    cmp -s "$tmp/w$i.txt" "$tmp/g$i.txt" || fail "render-chat case $i ($tmpl) differs from transformers"
  else
    if "$HYPIC" render-chat --chat-template "$CHAT/$tmpl" --conversation "$tmp/c$i.json" $flags 2> "$tmp/err"; then
      fail "case $i: the template refuses this conversation, hypic rendered it"
    fi
    grep -q "c$i.json" "$tmp/err" || fail "case $i: the error does not name the file: $(cat "$tmp/err")"
  fi
  n=$((n + 1))
done < "$tmp/cases.txt"
[ "$n" -ge 12 ] || fail "only $n goldens"

# A prompt plan framed in Qwen3.5: its XML tool docs, and the template's `thinking: false` as an empty,
# closed reasoning section.
"$HYPIC" render "$T/rag_qa.yaml" --vars "$T/rag_qa.vars.json" --chat-template "$CHAT/qwen3.5_chat_template.jinja" \
  --full > "$tmp/plan.json"
python3 - "$tmp/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["chat_format"] == "qwen3.5", p["chat_format"]
assert p["generation_prompt"] == "<|im_start|>assistant\n<think>\n\n</think>\n\n", p["generation_prompt"]
assert "<function=example_function_name>" in "".join(b["text"] for b in p["blocks"])
PY

# The agent on a model told to speak Qwen3.5.
"$HYPIC" run "$T/rag_qa.yaml" --vars "$T/rag_qa.vars.json" --model "$M" --max-steps 1 --json \
  --chat-template "$CHAT/qwen3.5_chat_template.jinja" > "$tmp/run.json" 2> "$tmp/run.err"
grep -q "qwen3.5 chat format" "$tmp/run.err" || fail "run does not say it speaks qwen3.5: $(cat "$tmp/run.err")"

# Bad template files: a clear error naming the file, no crash.
expect_error() {  # expect_error PATTERN cmd...
  local pat=$1; shift
  if "$@" > "$tmp/out" 2> "$tmp/err"; then fail "expected failure: $*"; fi
  grep -q -- "$pat" "$tmp/err" || fail "error for '$*' lacks '$pat': $(cat "$tmp/err")"
}
expect_error "missing.jinja" "$HYPIC" run "$T/rag_qa.yaml" --vars "$T/rag_qa.vars.json" --model "$M" \
  --chat-template "$tmp/missing.jinja"
printf '{{ messages }}' > "$tmp/other.jinja"
expect_error "other.jinja: the chat template is not one hypic implements" "$HYPIC" render-chat \
  --chat-template "$tmp/other.jinja" --conversation "$tmp/c0.json"
expect_error "is not a readable file" "$HYPIC" render-chat --chat-template "$tmp" --conversation "$tmp/c0.json"
echo "render-chat / --chat-template CLI: ok ($n goldens)"
