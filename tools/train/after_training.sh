#!/usr/bin/env bash
# Everything the trained checkpoints are judged by, from the two exported model folders that
# `train.py --recipe all` writes (OUT/long_memory/hf and OUT/tool_agent/hf):
#   - the quality table per question type and cache mode (hypic eval-pic, 600 prompts of evaluation seed 1),
#   - the tool-use table (hypic run over 240 agent tasks of evaluation seed 7, in both chat formats),
#   - transformers' greedy goldens of each checkpoint (golden.json in each model folder).
#
#   tools/train/after_training.sh LONG_MODEL_DIR AGENT_MODEL_DIR RESULTS_DIR [--device auto|cpu|cuda]
#
# The three question types and the two chat formats run as parallel processes (4+ cores help).
# SKIP_GOLDENS=1 leaves the goldens out (e.g. made on a faster machine); THREADS=N for transformers.
# Needs a built hypic (build/tools/hypic/hypic, or HYPIC=...) and Python with torch, transformers and
# tokenizers (the goldens). Writes RESULTS_DIR/{quality.md,quality.json,agent.md,agent.json} and
# LONG_MODEL_DIR/golden.json, AGENT_MODEL_DIR/golden.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 3 ] || { sed -n 2,13p "$0"; exit 2; }
LONG=$1 AGENT=$2 RES=$3
DEVICE=auto
[ "${4:-}" = "--device" ] && DEVICE=${5:?--device needs a value}
HYPIC=${HYPIC:-build/tools/hypic/hypic}
PY=${PYTHON:-python3}
mkdir -p "$RES"
for d in "$LONG" "$AGENT"; do
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    [ -f "$d/$f" ] || { echo "after_training.sh: $d/$f is missing" >&2; exit 1; }
  done
done

echo "== quality table ($LONG)"
"$PY" tools/train/quality_table.py --model "$LONG" --prompts tests/fixtures/eval/long_eval_seed1.jsonl \
  --hypic "$HYPIC" --device "$DEVICE" --jobs 3 --decode-tokens 14 --out "$RES/quality.json" | tee "$RES/quality.md"

echo "== tool use ($AGENT)"
"$PY" tools/train/eval_agent.py --model "$AGENT" --seed 7 --count 240 --hypic "$HYPIC" --device "$DEVICE" \
  --parallel --out "$RES/agent.json" | tee "$RES/agent.md"

[ "${SKIP_GOLDENS:-0}" = 1 ] && exit 0
echo "== goldens (transformers, CPU)"
"$PY" tools/train/make_goldens.py --threads "${THREADS:-2}" --model "$LONG" --prompts tests/fixtures/eval/long_eval_seed1.jsonl --count 12 --max-new 14 \
  --out "$LONG/golden.json"
"$PY" tools/train/make_goldens.py --threads "${THREADS:-2}" --model "$AGENT" --prompts tests/fixtures/eval/agent_first_seed5.jsonl --count 8 \
  --max-new 72 --out "$AGENT/golden.json"
