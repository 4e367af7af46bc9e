#!/bin/bash
# Issue 12 goal 3, the short form of callC.sh (what the session's device time left room for): the four opt-in forms of
# the batch-1 decode step alone and together against main's, twice, interleaved; the decode op test and the batched
# engine test under all four; batch 1/8/32 under main and all four; both timelines.
# Pack: tools/bench/pack_gpu_binaries.sh build   (the full set)
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"
TT=150 gtest cuda_decode_ops_test "" ""
dec() {  # dec NAME ENV ARGS...: one bench run into $O/decode_NAME.json, its figures printed
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout 100 $B/hypic_bench_model $CFG "$@" > $O/decode_$n.json 2>$O/decode_$n.err
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' $O/decode_$n.json) $(grep -oE '"(decode|graph_drawn)": \{[^}]*' $O/decode_$n.json | grep -oE '"(decode|graph_drawn)"|"(ms_per_token|ms_per_step|tokens_per_s|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -1 $O/decode_$n.err
}
ALL=HYPIC_CUDA_COMBINE_ONE_TRIP=1,HYPIC_CUDA_QK_PRE_ANGLES=1,HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1,HYPIC_CUDA_DECODE_ATTN_FOLD=1
FORMS="main:X=1 trip:HYPIC_CUDA_COMBINE_ONE_TRIP=1 qkpre:HYPIC_CUDA_QK_PRE_ANGLES=1 recf:HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1 fold:HYPIC_CUDA_DECODE_ATTN_FOLD=1 all:$ALL"
if ! grep -q "^\[  FAILED  \]" $O/cuda_decode_ops_test.txt && grep -q "^\[  PASSED  \]" $O/cuda_decode_ops_test.txt; then
  for r in 1 2; do for f in $FORMS; do dec ${f%%:*}_$r ${f#*:} --decode 64 --batch 1 --batch-steps 24; done; date +%T; done
  ( export $(tr , " " <<< "$ALL"); TT=90 gtest engine_batch_model_test "" _all )
  for f in main:X=1 all:$ALL; do dec batches_${f%%:*} ${f#*:} --decode 0 --batch 1,8,32 --batch-steps 24; done
  mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
  for f in main:X=1 all:$ALL; do
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
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
