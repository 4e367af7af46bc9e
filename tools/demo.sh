#!/usr/bin/env bash
# The demo behind the README's first command (run by tools/setup.sh demo after the build):
# a chat prompt through hypic's tokenizer and model, then a RAG-shaped prompt set run in every cache
# mode side by side (full recompute, prefix cache, hypic, and the two ablations).
set -euo pipefail
cd "$(dirname "$0")/.."
HYPIC=build/tools/hypic/hypic
MODEL=${HYPIC_DEMO_MODEL:-tests/fixtures/models/qwen3_next_moe}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== 1. generate: chat prompt -> tokens -> greedy decode ($MODEL)"
printf '<|im_start|>user\nTell me about the old stone bridge.<|im_end|>\n<|im_start|>assistant\n' > "$tmp/prompt.txt"
$HYPIC tokenize --tokenizer "$MODEL/tokenizer.json" --text-file "$tmp/prompt.txt" > "$tmp/ids.json"
echo "prompt ids: $(cat "$tmp/ids.json")"
$HYPIC generate --model "$MODEL" --ids-file "$tmp/ids.json" --max-new-tokens 24 > "$tmp/out.json"
echo "new ids:    $(cat "$tmp/out.json")"
printf 'text:       '; $HYPIC detokenize --tokenizer "$MODEL/tokenizer.json" --ids-file "$tmp/out.json"; echo
echo "(the fixture model has random weights: the text is noise; what matters is that every step runs)"

echo
echo "== 2. eval-pic: RAG prompts (system block + 2-5 recurring documents + question), every cache mode"
head -n 12 tests/fixtures/eval/pic_prompts.jsonl > "$tmp/prompts.jsonl"
$HYPIC eval-pic --model "$MODEL" --prompts "$tmp/prompts.jsonl" --decode-tokens 8
