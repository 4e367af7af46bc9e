#!/usr/bin/env bash
# Fails when a test skipped that should have run on this machine. Reads ctest's JUnit report
# (ctest --output-junit FILE). A skip is expected only for a reason this machine really has:
#   - "no CUDA ..." (CUDA tests) when no GPU answers `nvidia-smi -L`;
#   - "the Qwen3 tokenizer is not at DIR" when DIR/tokenizer.json does not exist;
#   - "chromium cannot start" (the chat page test) when no chromium on PATH runs headless here.
# Every other skip (a fixture that is there, a new GTEST_SKIP path, a script's exit 77) fails the run.
# Usage: tools/check_skips.sh build/ctest-junit.xml
set -euo pipefail
report=${1:?usage: check_skips.sh JUNIT_XML}
[ -f "$report" ] || { echo "check_skips: no report at $report" >&2; exit 1; }

gpu=no
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then gpu=yes; fi

# One line per skipped test: NAME<TAB>the first line of its output that names a reason.
skipped=$(awk '
  /<testcase / { name = $0; sub(/.*<testcase name="/, "", name); sub(/".*/, "", name); skip = 0; why = "" }
  /status="notrun"/ { skip = 1 }
  skip && why == "" && (/no CUDA/ || /Qwen3 tokenizer is not at/ || /chromium cannot start/) { why = $0 }
  /<\/testcase>/ { if (skip) print name "\t" why; skip = 0 }
' "$report")

total=0 bad=0
while IFS=$'\t' read -r name why; do
  [ -n "$name" ] || continue
  total=$((total + 1))
  ok=no
  if [[ "$why" == *"no CUDA"* ]]; then
    [ "$gpu" = no ] && ok=yes
  elif [[ "$why" == *"Qwen3 tokenizer is not at"* ]]; then
    dir=${why#*Qwen3 tokenizer is not at }
    dir=${dir%% (*}
    dir=${dir%%$'\r'}
    [ -f "$dir/tokenizer.json" ] || ok=yes
  elif [[ "$why" == *"chromium cannot start"* ]]; then
    b=$(command -v chromium || command -v chromium-browser || true)
    if [ -z "$b" ] || ! timeout 60 "$b" --headless --no-sandbox --disable-gpu --dump-dom about:blank >/dev/null 2>&1; then ok=yes; fi
  fi
  if [ "$ok" = no ]; then
    bad=$((bad + 1))
    echo "check_skips: '$name' skipped but should have run here${why:+ (it said: $why)}" >&2
  fi
done <<< "$skipped"

if [ "$bad" -gt 0 ]; then
  echo "check_skips: $bad of $total skipped tests should have run" >&2
  exit 1
fi
echo "check_skips: $total skipped tests, each for a reason this machine has (GPU: $gpu)"
