#!/usr/bin/env bash
# The serving benchmark of docs/serving.md on a GPU: `hypic serve --device cuda --random-weights` of the
# 35B-A3B shape (tools/bench/configs/qwen3_5_35b_a3b.json, with the Qwen3 tokenizer and the Qwen3.5 chat
# template), one server per cache mode (full, prefix, hypic), each replaying the RAG trace of
# hypic_bench_serve --mode trace (Poisson arrivals; 8-16 chunks per request from a Zipf-popular pool; shared
# system and tool text) at increasing rates, then 32 concurrent sessions for peak decode throughput.
# Usage: tools/bench/serve_trace.sh BUILD_DIR TOKENIZER_DIR CHAT_TEMPLATE OUT_DIR [RATE ...]
#   e.g. tools/bench/serve_trace.sh build-gpu ../shared/fixtures/qwen3-tokenizer \
#          ../shared/fixtures/qwen3.5-chat/chat_template.jinja docs/runs/serve 0.5 1 2 4 8
# Needs `cmake --build BUILD_DIR --target hypic hypic_bench_serve`. Writes OUT_DIR/MODE_rRATE.json and
# OUT_DIR/MODE_decode32.json and prints a summary table (REQUESTS=60 per rate by default; WARMUP=16 warm-up
# requests; DECODE_MODES="full prefix hypic": the modes whose 32-session decode is measured).
set -euo pipefail
build=${1:?build dir}; tok=${2:?tokenizer dir}; tpl=${3:?chat template}; out=${4:?output dir}; shift 4
rates=("$@"); [ ${#rates[@]} -gt 0 ] || rates=(0.5 1 2 4 8)
requests=${REQUESTS:-60}
mkdir -p "$out"
model=$(mktemp -d)
cp tools/bench/configs/qwen3_5_35b_a3b.json "$model/config.json"
cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$model/"
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$model"' EXIT
for mode in full prefix hypic; do
  log="$out/$mode.server.log"
  : > "$log"  # before the job: it opens the log only when it gets scheduled
  "$build/tools/hypic/hypic" serve --model "$model" --device cuda --random-weights --chat-template "$tpl" \
    --mode "$mode" --cache-mb 40000 --max-sessions 32 --max-queue 4096 --port 0 --quiet 2>"$log" &
  pid=$!
  port=
  for _ in $(seq 1200); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.25
  done
  url=http://127.0.0.1:$port
  # Warm-up (kernels, graphs, the cache a steady-state service holds), not recorded.
  "$build/tools/hypic_bench_serve" --url $url --mode trace --rate 1 --requests "${WARMUP:-16}" --chunk-words 400 \
    --request-seed 99 >/dev/null || true
  rs=100
  for r in "${rates[@]}"; do
    # Every rate draws new requests (another question, other chunks in another order) from the same pool.
    rs=$((rs + 1))
    "$build/tools/hypic_bench_serve" --url $url --mode trace --rate "$r" --requests "$requests" --chunk-words 400 \
      --request-seed $rs \
      --max-tokens 32 > "$out/${mode}_r$r.json" || true
  done
  if [[ " ${DECODE_MODES:-full prefix hypic} " == *" $mode "* ]]; then
    "$build/tools/hypic_bench_serve" --url $url --mode load --clients 32 --requests 64 --chunks-min 0 --chunks-max 0 \
      --max-tokens 256 > "$out/${mode}_decode32.json" || true
  fi
  kill $pid; wait $pid 2>/dev/null || true; pid=
done
python3 - "$out" "${rates[@]}" <<'PY'
import json, sys
out, rates = sys.argv[1], sys.argv[2:]
print("mode    rate  p50_ttft_ms  p90_ttft_ms  failed  computed/prompt")
for mode in ("full", "prefix", "hypic"):
    for r in rates:
        j = json.load(open(f"{out}/{mode}_r{r}.json"))
        frac = j["computed_tokens"] / max(1, j["prompt_tokens"])
        print(f"{mode:7} {r:>5} {j['ttft_ms']['p50']:12.1f} {j['ttft_ms']['p90']:12.1f} {j['failed']:7d} {frac:10.3f}")
    try:
        d = json.load(open(f"{out}/{mode}_decode32.json"))
    except (OSError, ValueError):
        continue
    print(f"{mode:7} 32 concurrent: {d['completion_tokens_per_s']:.0f} generated tokens/s, {d['requests_per_s']:.2f} req/s")
PY
