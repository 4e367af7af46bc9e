#!/usr/bin/env bash
# hypic logits / generate on the fixture models against the transformers goldens, and their errors.
set -euo pipefail
F="$HYPIC_SOURCE_DIR/tests/fixtures/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in qwen3_next_moe qwen3_5_dense qwen3_5_moe; do
  python3 -c "import json,sys; g=json.load(open('$F/$m/golden.json')); json.dump(g['input_ids'], open('$tmp/ids.json','w'))"
  "$HYPIC" logits --model "$F/$m" --ids-file "$tmp/ids.json" > "$tmp/logits.json"
  "$HYPIC" generate --model "$F/$m" --ids-file "$tmp/ids.json" --max-new-tokens 12 > "$tmp/gen.json"
  # the same model split over two ranks (CPU threads)
  "$HYPIC" generate --model "$F/$m" --ids-file "$tmp/ids.json" --max-new-tokens 12 --tensor-parallel 2 > "$tmp/gen_tp.json"
  python3 - "$F/$m/golden.json" "$tmp/logits.json" "$tmp/gen.json" "$tmp/gen_tp.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); out = json.load(open(sys.argv[2])); gen = json.load(open(sys.argv[3]))
tp = json.load(open(sys.argv[4]))
assert out["argmax"] == g["argmax"], (out["argmax"], g["argmax"])
assert gen == g["greedy_ids"], (gen, g["greedy_ids"])
assert tp == g["greedy_ids"], ("tensor-parallel", tp, g["greedy_ids"])
PY
done
M="$F/qwen3_5_dense"
expect_fail() {  # expect_fail PATTERN command...: non-zero exit and PATTERN in stderr
  local pat=$1; shift
  if "$@" 2> "$tmp/err" > /dev/null; then echo "expected failure: $*"; exit 1; fi
  grep -q -- "$pat" "$tmp/err" || { echo "missing '$pat' in: $(cat "$tmp/err")"; exit 1; }
}
echo '[1, 2, 999999]' > "$tmp/big.json"
expect_fail "outside the vocabulary" "$HYPIC" logits --model "$M" --ids-file "$tmp/big.json"
expect_fail "does not exist" "$HYPIC" logits --model "$tmp/nope" --ids-file "$tmp/ids.json"
echo '[1, "x"]' > "$tmp/bad.json"
expect_fail "not an integer" "$HYPIC" generate --model "$M" --ids-file "$tmp/bad.json"
cp -r "$M" "$tmp/trunc"
truncate -s 100000 "$tmp/trunc/model.safetensors"
expect_fail "truncated" "$HYPIC" logits --model "$tmp/trunc" --ids-file "$tmp/ids.json"
cp -r "$M" "$tmp/missing"
python3 - "$tmp/missing/model.safetensors" <<'PY'
# Rename one tensor in the header (same length) so it is missing under its real name.
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
i = b.find(b"model.norm.weight"); b[i:i+17] = b"model.norm.xeight"; open(p, "wb").write(b)
PY
expect_fail "lacks tensor 'model.norm.weight'" "$HYPIC" logits --model "$tmp/missing" --ids-file "$tmp/ids.json"
expect_fail "does not divide over 3" "$HYPIC" generate --model "$M" --ids-file "$tmp/ids.json" --tensor-parallel 3
expect_fail "covers the Qwen3-Next" "$HYPIC" generate --model "$F/minimax" --ids-file "$tmp/ids.json" --tensor-parallel 2
expect_fail "unknown option --modle" "$HYPIC" logits --modle "$M" --ids-file "$tmp/ids.json"

# eval-pic: a malformed prompts line is named by file:line; an unknown mode is refused.
printf '{"blocks": ["a", "b"]}\n{"blocks": "not a list"}\n' > "$tmp/bad.jsonl"
expect_fail "bad.jsonl:2" "$HYPIC" eval-pic --model "$M" --prompts "$tmp/bad.jsonl"
printf '{"blocks": ["<|im_start|>user\\nhi", " there<|im_end|>\\n<|im_start|>assistant\\n"]}\n' > "$tmp/ok.jsonl"
expect_fail "unknown mode 'fast'" "$HYPIC" eval-pic --model "$M" --prompts "$tmp/ok.jsonl" --modes full,fast
expect_fail "--device: tpu not in {cpu,cuda,auto}" "$HYPIC" eval-pic --model "$M" --prompts "$tmp/ok.jsonl" --device tpu
if ! nvidia-smi -L > /dev/null 2>&1; then  # no GPU here: cuda is refused by name (CPU-only or CUDA build)
  expect_fail "CUDA" "$HYPIC" eval-pic --model "$M" --prompts "$tmp/ok.jsonl" --device cuda
fi
"$HYPIC" eval-pic --model "$M" --prompts "$tmp/ok.jsonl" --modes full,hypic --decode-tokens 2 > "$tmp/ep.json"
python3 - "$tmp/ep.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d["modes"]) == {"full", "hypic"}
for m in d["modes"].values():
    assert set(m) >= {"top1_agree", "kl_mean", "greedy_match", "exact_match", "computed_tokens_mean", "ttft_ms_p50"}
    assert m["exact_match"] is None
PY
