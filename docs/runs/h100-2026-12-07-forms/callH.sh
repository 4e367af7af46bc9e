#!/bin/bash
# Issue 12 goals 3 and 5 on an H200, the shortest form (what the session's device time left): batch 1/8/32 under
# the default and HYPIC_CUDA_QK_PRE_ANGLES=0; the RAG TTFT against the prefix cache.
# Pack: TARGETS="cuda_decode_ops_test hypic_bench_model engine_batch_model_test cuda_model_test engine_model_test hypic_bench_ttft" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
BS=1,8; grep -q H200 $O/device.txt && BS=1,8,32
for f in default:X=1 late:HYPIC_CUDA_QK_PRE_ANGLES=0; do DT=60 dec b_${f%%:*}_1 ${f#*:} --decode 0 --batch $BS --batch-steps 24; done; date +%T
if [ $(left 150) -gt 40 ]; then
  timeout $(left 145) $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/ttft.json 2>$O/ttft.err
  grep -E '"mode"|p50|p90' $O/ttft.json | head -20
fi
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
