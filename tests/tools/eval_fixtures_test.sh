#!/usr/bin/env bash
# The committed evaluation files are what their generators write: tools/train/make_eval.py with the
# arguments docs/quality.md names (for the long-memory model no flag but the seed and count), so a change
# to tools/train/task.py that would silently change an evaluation set fails here. Needs only python3.
set -euo pipefail
command -v python3 > /dev/null || { echo "python3 not found"; exit 77; }
cd "$HYPIC_SOURCE_DIR"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # committed file, make_eval.py arguments
  local want=$1; shift
  python3 tools/train/make_eval.py "$@" --out "$tmp/got.jsonl"
  if cmp -s "$tmp/got.jsonl" "$want"; then
    echo "ok - $want = make_eval.py $*"
  else
    echo "FAIL: $want differs from make_eval.py $*"; fail=1
  fi
}
check tests/fixtures/eval/long_eval_seed1.jsonl --seed 1 --count 600
check tests/fixtures/eval/qa_eval_seed1.jsonl --task qa --seed 1 --count 500
exit $fail
