#!/bin/bash
# Issue 12 goal 3, the short form of callC.sh (what the session's device time left room for): the four opt-in forms of
# the batch-1 decode step alone and together against main's, twice, interleaved; the decode op test and the batched
# engine test under all four; batch 1/8/32 under main and all four; both timelines.
# Pack: tools/bench/pack_gpu_binaries.sh build   (the full set)
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
H200=0; BS=1,8; grep -q H200 $O/device.txt && H200=1 && BS=1,8,32
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"  # the timelines
TT=150 gtest cuda_decode_ops_test "" ""
ALL=HYPIC_CUDA_COMBINE_ONE_TRIP=1,HYPIC_CUDA_QK_PRE_ANGLES=1,HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1,HYPIC_CUDA_DECODE_ATTN_FOLD=1
FORMS="main:X=1 trip:HYPIC_CUDA_COMBINE_ONE_TRIP=1 qkpre:HYPIC_CUDA_QK_PRE_ANGLES=1 recf:HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1 fold:HYPIC_CUDA_DECODE_ATTN_FOLD=1 all:$ALL"
if ! grep -q "^\[  FAILED  \]" $O/cuda_decode_ops_test.txt && grep -q "^\[  PASSED  \]" $O/cuda_decode_ops_test.txt; then
  for r in 1 2; do for f in $FORMS; do dec ${f%%:*}_$r ${f#*:} --decode 64 --batch 1 --batch-steps 24; done; date +%T; done
  ( export $(tr , " " <<< "$ALL"); TT=90 gtest engine_batch_model_test "" _all )
  [ $(left 560) -gt 200 ] && for f in main:X=1 all:$ALL; do DT=150 dec batches_${f%%:*} ${f#*:} --decode 0 --batch $BS --batch-steps 24; done
  [ $(left 560) -gt 120 ] && mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
  [ $(left 560) -gt 120 ] && for f in main:X=1 all:$ALL; do
    n=${f%%:*}
    env $(tr , " " <<< "${f#*:}") CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
      HYPIC_TRACE_OUT=$O/step_$n.trace timeout 90 $B/hypic_bench_model $CFG --decode 64 --batch 1 --batch-steps 24 > /dev/null 2>&1
    python3 tools/bench/kernel_gaps.py $O/step_$n.trace --graph-step 2 --list 0:60 > $O/decode_gaps_$n.txt 2>&1
    echo "timeline $n:"; sed -n '/kernels by name/,/^$/p' $O/decode_gaps_$n.txt | head -16; grep -E "window" $O/decode_gaps_$n.txt
    rm -f $O/step_$n.trace
  done
else
  echo "the decode op test did not pass: decode benches left out"
  grep -E "Failure|Expected|Which is|actual|differ" $O/cuda_decode_ops_test.txt | head -30
fi
date +%T
if [ $H200 = 1 ] && [ $(left 560) -gt 100 ]; then
  timeout 90 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/h200_ttft.json 2>$O/h200_ttft.err
  grep -E '"mode"|p50|p90' $O/h200_ttft.json | head -20
fi
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
