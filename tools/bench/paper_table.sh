#!/usr/bin/env bash
# The HYPIC paper's headline comparison at the Qwen3.5-35B-A3B shape (random weights, one GPU): TTFT of
# every cache mode on four workload shapes modelled on the paper's datasets, warm (the rag case: steady
# state, chunks recurring in new orders) and cold (every block missing), and the composed state's distance
# from full recompute by layer (the state case). One hypic_bench_ttft call per
# (workload, case); JSON per call in OUTDIR (ONLY=state runs only the state case). tools/bench/paper_table.py turns them into docs/paper_table.md
# and its plot.
# Usage: tools/bench/paper_table.sh HYPIC_BENCH_TTFT OUTDIR [CONFIG]
set -euo pipefail
bench=${1:?usage: paper_table.sh HYPIC_BENCH_TTFT OUTDIR [CONFIG]}
out=${2:?outdir}
config=${3:-tools/bench/configs/qwen3_5_35b_a3b.json}
mkdir -p "$out"
# name: pool, chunks per request (min max), tokens per chunk. Short-chunk multi-hop QA (HotpotQA-like),
# a few longer passages (TriviaQA-like), several whole documents (MultiNews-like), and one or two long
# reports split into chunks (GovReport-like; chunks are drawn from the pool without keeping a report's
# chunks together, so this models the lengths, not the contiguity).
workloads="hotpotqa:48:8:12:150 triviaqa:24:4:6:500 multinews:16:3:6:1500 govreport:48:16:32:512"
for w in $workloads; do
  IFS=: read -r name pool cmin cmax ctok <<< "$w"
  common=(--config "$config" --pool "$pool" --chunks-min "$cmin" --chunks-max "$cmax" --chunk-tokens "$ctok"
          --system 300 --tools 600 --question 30 --seed 1 --quiet)
  if [ "${ONLY:-}" != state ]; then
  echo "== $name rag ($(date +%T))"
  "$bench" "${common[@]}" --case rag --mode all --warmup 16 --requests "${REQUESTS:-32}" > "$out/${name}_rag.json"
  echo "== $name cold ($(date +%T))"
  "$bench" "${common[@]}" --case cold --requests "${COLD_REQUESTS:-6}" --repeats 3 > "$out/${name}_cold.json"
  fi
  echo "== $name state ($(date +%T))"
  "$bench" "${common[@]}" --case state --warmup 0 --requests "${STATE_REQUESTS:-4}" > "$out/${name}_state.json"
done
echo "== done ($(date +%T))"
