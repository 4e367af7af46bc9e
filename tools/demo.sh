#!/usr/bin/env bash
# The demo behind the README's first command (run by tools/setup.sh demo after the build).
# The shipped model (examples/models/hypic-qa-tiny, trained by tools/train/) answers questions over
# documents; every document is its own cached segment and recurs across questions in new orders.
set -euo pipefail
cd "$(dirname "$0")/.."
HYPIC=build/tools/hypic/hypic
MODEL=examples/models/hypic-qa-tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== 1. Questions over documents, through the agent SDK (hypic run, examples/templates/qa_docs.yaml)"
echo "   8 questions in one process; documents recur, so later questions reuse their cached segments."
echo "   Expected answers: $(grep -o '"expected": "[^"]*"' examples/templates/qa_docs.vars.json | cut -d'"' -f4 | tr '\n' ' ')"
$HYPIC run examples/templates/qa_docs.yaml --vars examples/templates/qa_docs.vars.json --model "$MODEL" --brief

echo
echo "== 2. Every cache mode side by side on 60 evaluation prompts (hypic eval-pic)"
echo "   full: no cache | prefix: exact prefix reuse | hypic: position-independent reuse + seams | naive, noseam: ablations"
head -n 60 tests/fixtures/eval/qa_eval_seed1.jsonl > "$tmp/prompts.jsonl"
$HYPIC eval-pic --model "$MODEL" --prompts "$tmp/prompts.jsonl" --decode-tokens 6 --show 2
