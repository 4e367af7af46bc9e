#!/usr/bin/env bash
# Decode stalls while prompts are admitted (docs/serving.md), on a GPU: `hypic serve --device cuda
# --random-weights` of the 35B-A3B shape (tools/bench/configs/qwen3_5_35b_a3b.json, with the Qwen3
# tokenizer and the Qwen3.5 chat template) in full and hypic mode, each with --prefill-chunk whole (2^30:
# every prompt in one step), 2048 and 512, replaying hypic_bench_serve's RAG trace (~11k-token prompts, 64
# reply tokens, so replies are being decoded while prompts arrive) at RATE requests/s. Prints the replies'
# inter-token latency (all gaps, and gaps while another request waited for its first token), TTFT and the
# server's decode stalls.
# Usage: tools/bench/serve_admission.sh BUILD_DIR TOKENIZER_DIR CHAT_TEMPLATE OUT_DIR [RATE]
# Needs `cmake --build BUILD_DIR --target hypic hypic_bench_serve`. Writes OUT_DIR/MODE_cCHUNK.json
# (REQUESTS=32 per run by default; WARMUP=8 warm-up requests; CHUNKS="1073741824 2048 512"; MODES="full hypic").
set -euo pipefail
build=${1:?build dir}; tok=${2:?tokenizer dir}; tpl=${3:?chat template}; out=${4:?output dir}
rate=${5:-2}
requests=${REQUESTS:-32}
chunks=(${CHUNKS:-1073741824 2048 512})
modes=(${MODES:-full hypic})
mkdir -p "$out"
model=$(mktemp -d)
cp tools/bench/configs/qwen3_5_35b_a3b.json "$model/config.json"
cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$model/"
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$model"' EXIT
for mode in "${modes[@]}"; do
  for chunk in "${chunks[@]}"; do
    log="$out/${mode}_c$chunk.server.log"
    "$build/tools/hypic/hypic" serve --model "$model" --device cuda --random-weights --chat-template "$tpl" \
      --mode "$mode" --prefill-chunk "$chunk" --cache-mb 40000 --max-sessions 32 --max-queue 4096 --port 0 \
      --quiet 2>"$log" &
    pid=$!
    port=
    for _ in $(seq 1200); do
      port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" 2>/dev/null || true)
      [ -n "$port" ] && break
      kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
      sleep 0.25
    done
    url=http://127.0.0.1:$port
    # Warm-up (kernels, graphs, the shared system and tool blocks), not recorded.
    "$build/tools/hypic_bench_serve" --url $url --mode trace --rate 1 --requests "${WARMUP:-8}" --chunk-words 400 \
      --request-seed 99 >/dev/null || true
    "$build/tools/hypic_bench_serve" --url $url --mode trace --rate "$rate" --requests "$requests" --chunk-words 400 \
      --request-seed 101 --max-tokens 64 > "$out/${mode}_c$chunk.json" || true
    kill $pid; wait $pid 2>/dev/null || true; pid=
  done
done
python3 - "$out" "${modes[*]}" "${chunks[*]}" <<'PY'
import json, sys
out, modes, chunks = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("| mode | --prefill-chunk | ITL p50 | ITL p99 | ITL max | ITL p99 during admission | TTFT p50 | TTFT p90 | stalls (mean) | failed |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode in modes:
    for c in chunks:
        try:
            j = json.load(open(f"{out}/{mode}_c{c}.json"))
        except (OSError, ValueError):
            print(f"| {mode} | {c} | no result |"); continue
        i, a, t, s = j["itl_ms"], j["itl_during_admission_ms"], j["ttft_ms"], j["server_decode_stalls"]
        name = "whole" if int(c) >= 1 << 30 else c
        print(f"| {mode} | {name} | {i['p50']:.1f} ms | {i['p99']:.1f} ms | {i['max']:.1f} ms | {a['p99']:.1f} ms | "
              f"{t['p50']:.0f} ms | {t['p90']:.0f} ms | {int(s['n'])} ({s['mean_ms']:.1f} ms) | {j['failed']} |")
PY
