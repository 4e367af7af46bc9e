#!/bin/bash
# Issue 12 goal 3: the op tests with the harness's copies synchronised; batch 1 and 8 under main, each of the
# forms that measured faster at batch 1 in callD2 (fold, qkpre, trip) and fold+trip, twice, interleaved.
# Pack: TARGETS="cuda_decode_ops_test hypic_bench_model engine_batch_model_test hypic_bench_ttft cuda_sequence_state_test" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
TT=150 gtest cuda_decode_ops_test "" ""
TT=60 gtest cuda_sequence_state_test "" ""
FORMS="main:X=1 fold:HYPIC_CUDA_DECODE_ATTN_FOLD=1 qkpre:HYPIC_CUDA_QK_PRE_ANGLES=1 trip:HYPIC_CUDA_COMBINE_ONE_TRIP=1 foldtrip:HYPIC_CUDA_DECODE_ATTN_FOLD=1,HYPIC_CUDA_COMBINE_ONE_TRIP=1"
for r in 1 2 3; do
  [ $(left 300) -gt 40 ] || break
  for f in $FORMS; do DT=60 dec b_${f%%:*}_$r ${f#*:} --decode 0 --batch 1,8 --batch-steps 24; done; date +%T
done
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
