#!/usr/bin/env bash
# Every hypic command explains itself and refuses bad options:
#  - `hypic --help` lists the commands; `hypic CMD --help` exits 0 and lists its options;
#  - the options in --help are exactly those the README's "Command line" section gives for CMD;
#  - commands that load a model document the environment knobs (HYPIC_THREADS) in --help, as the README does;
#  - a malformed or out-of-range number, a bad choice and an unknown flag exit 2 naming the option;
#  - the audit's cases (issue 14): a 2^31 --decode-tokens, an empty --modes, a 2^44 --cache-mb, a
#    directory as --text-file.
set -euo pipefail
readme="$HYPIC_SOURCE_DIR/README.md"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect_usage_error "option named in the message" ARGS...: exit status 2, the option named on stderr.
expect_usage_error() {
  local name=$1; shift
  set +e; "$HYPIC" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?; set -e
  [ "$rc" = 2 ] || fail "hypic $* exited $rc (want 2): $(cat "$tmp/err")"
  grep -qF -- "$name" "$tmp/err" || fail "hypic $*: message does not name $name: $(cat "$tmp/err")"
}

"$HYPIC" --help >"$tmp/top"
commands=$(awk '/^Subcommands:/{on=1; next} on && /^  [a-z]/{print $1}' "$tmp/top")
[ "$(echo "$commands" | wc -l)" -ge 12 ] || fail "hypic --help lists too few commands: $commands"

# The README's command-line block: "hypic NAME ..." lines and their indented continuations.
python3 - "$readme" >"$tmp/readme_opts" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
block = text.split("## Command line", 1)[1].split("```", 2)[1]
opts, cmd = {}, None
for line in block.splitlines():
    m = re.match(r"hypic ([a-z-]+)", line)
    if m: cmd = m.group(1)
    elif not line.startswith(" "): cmd = None
    if cmd: opts.setdefault(cmd, set()).update(re.findall(r"--[a-z][a-z0-9-]*", line.split("#")[0]))
for c, o in sorted(opts.items()): print(c, " ".join(sorted(o)))
PY

for c in $commands; do
  "$HYPIC" "$c" --help >"$tmp/help" || fail "hypic $c --help exited non-zero"
  grep -q "^Options:" "$tmp/help" || fail "hypic $c --help lists no options"
  [ -z "$(tail -c1 "$tmp/help")" ] || fail "hypic $c --help does not end with a newline"
  help_opts=$(grep -oE '^  (-h,)?--[a-z][a-z0-9-]*' "$tmp/help" | sed 's/^ *-h,//; s/^ *//' | grep -vx -- --help | sort | tr '\n' ' ')
  readme_opts=$(awk -v c="$c" '$1 == c {$1=""; print}' "$tmp/readme_opts" | tr ' ' '\n' | grep . | sort | tr '\n' ' ' || true)
  [ "$help_opts" = "$readme_opts" ] || fail "hypic $c: --help has [$help_opts], README has [$readme_opts]"
  # Options with a default show it (always_capture_default): "--seam INT:... =8".
  if grep -q -- "--model TEXT REQUIRED" "$tmp/help"; then
    grep -q HYPIC_THREADS "$tmp/help" || fail "hypic $c --help does not document HYPIC_THREADS"
  fi
  # Every numeric option: garbage and overflow are usage errors naming it.
  for o in $(grep -oE '^  --[a-z][a-z0-9-]* (INT|UINT|FLOAT)' "$tmp/help" | awk '{print $1}'); do
    expect_usage_error "$o" "$c" "$o" not-a-number
    expect_usage_error "$o" "$c" "$o" 999999999999999999999999
  done
  expect_usage_error "--no-such-flag" "$c" --no-such-flag
done
grep -q HYPIC_THREADS "$readme" || fail "README does not document HYPIC_THREADS"
grep -q "seam INT" <("$HYPIC" eval-pic --help) && grep -qE -- '--seam INT:.*\]=8( |$)' <("$HYPIC" eval-pic --help) \
  || fail "eval-pic --help does not show --seam's default"

# Choices and the audit's cases.
M="$HYPIC_SOURCE_DIR/tests/fixtures/models/qwen3_5_dense"
echo '{"blocks": ["a"]}' >"$tmp/p.jsonl"
expect_usage_error "--device" logits --model "$M" --ids-file x --device gpu
expect_usage_error "--mode" run t.yaml --vars v.json --model "$M" --mode fastest
expect_usage_error "--decode-tokens" eval-pic --model "$M" --prompts "$tmp/p.jsonl" --decode-tokens 2147483648
expect_usage_error "--modes" eval-pic --model "$M" --prompts "$tmp/p.jsonl" --modes ""
expect_usage_error "--modes" eval-pic --model "$M" --prompts "$tmp/p.jsonl" --modes hypic,bogus
expect_usage_error "--modes" eval-pic --model "$M" --prompts "$tmp/p.jsonl" --modes hypic,hypic
expect_usage_error "--cache-mb" eval-pic --model "$M" --prompts "$tmp/p.jsonl" --cache-mb 17592186044416
expect_usage_error "--cache-mb" run t.yaml --vars v.json --model "$M" --cache-mb 17592186044416
expect_usage_error "--modle" eval-pic --modle "$M" --prompts "$tmp/p.jsonl"  # a typo is named, not "--model is required"
set +e; "$HYPIC" tokenize --tokenizer "$M/tokenizer.json" --text-file "$tmp" >"$tmp/out" 2>"$tmp/err"; rc=$?; set -e
[ "$rc" = 1 ] && grep -qF "'$tmp' is a directory" "$tmp/err" || fail "tokenize --text-file DIR: rc $rc, $(cat "$tmp/err") $(cat "$tmp/out")"
# No arguments: the command list on stderr, exit 2.
set +e; "$HYPIC" >/dev/null 2>"$tmp/err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "Subcommands:" "$tmp/err" || fail "bare hypic: rc $rc"
echo PASS
