#!/bin/bash
# Issue 12 goals 3 and 5 on an H200 (main at 86adf79), what the session's device time left room for: batch 1/8/32 under
# the default; the opt-in forms of the batch-1 step (fold, one-trip combine, early recurrence trigger, one-launch MoE)
# once each against the default; the RAG TTFT against the prefix cache.
# Pack: TARGETS="cuda_decode_ops_test hypic_bench_model engine_batch_model_test cuda_model_test engine_model_test hypic_bench_ttft hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
BS=1,8; grep -q H200 $O/device.txt && BS=1,8,32
DT=120 dec batches_default X=1 --decode 0 --batch $BS --batch-steps 24; date +%T
for f in d:X=1 fold:HYPIC_CUDA_DECODE_ATTN_FOLD=1 trip:HYPIC_CUDA_COMBINE_ONE_TRIP=1 recf:HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1 one:HYPIC_CUDA_MOE_ONE_LAUNCH=1 d2:X=1; do
  [ $(left 300) -gt 90 ] || break
  DT=45 dec one_${f%%:*} ${f#*:} --decode 0 --batch 1 --batch-steps 24
done; date +%T
if [ $(left 300) -gt 60 ]; then
  timeout $(left 295) $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/ttft.json 2>$O/ttft.err
  grep -E '"mode"|p50|p90' $O/ttft.json | head -20
fi
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
