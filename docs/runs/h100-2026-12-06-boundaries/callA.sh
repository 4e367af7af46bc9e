#!/bin/bash
# Decode at batch 1: L2 prefetches across the step's kernel boundaries. HYPIC_CUDA_MOE_DOWN_L2 (0 / start / end:
# the gate/up kernel asks L2 for the down rows), HYPIC_CUDA_GEMV_L2 (head: the old first 2 KB of each row;
# default rows: whole rows for R > 1), HYPIC_CUDA_NEXT_L2_MB (0: off; the down kernel asks L2 for the next
# layer's first products). Op tests first; the batch-1 step under the forms, interleaved, three rounds; batch
# 1/8 base and default; timelines of base and default; the model, engine, batch and multi-turn tests by default.
# Pack: TARGETS="cuda_decode_ops_test cuda_model_test engine_model_test hypic_bench_model sdk_multi_turn_model_test engine_batch_model_test" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=90 gtest cuda_decode_ops_test "" ""
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"
OFF=HYPIC_CUDA_MOE_DOWN_L2=0,HYPIC_CUDA_GEMV_L2=head,HYPIC_CUDA_NEXT_L2_MB=0
FORMS="base:$OFF down_end:HYPIC_CUDA_GEMV_L2=head,HYPIC_CUDA_NEXT_L2_MB=0 down_start:HYPIC_CUDA_MOE_DOWN_L2=start,HYPIC_CUDA_GEMV_L2=head,HYPIC_CUDA_NEXT_L2_MB=0 rows:HYPIC_CUDA_MOE_DOWN_L2=0,HYPIC_CUDA_NEXT_L2_MB=0 next16:HYPIC_CUDA_MOE_DOWN_L2=0,HYPIC_CUDA_GEMV_L2=head all:X=0 all_next32:HYPIC_CUDA_NEXT_L2_MB=32 all_next8:HYPIC_CUDA_NEXT_L2_MB=8"
dec() {  # dec NAME ENV ARGS...: one bench run into $O/decode_NAME.json, its figures printed
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout 90 $B/hypic_bench_model $CFG "$@" > $O/decode_$n.json 2>$O/decode_$n.err
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' $O/decode_$n.json) $(grep -oE '"(decode|graph_drawn)": \{[^}]*' $O/decode_$n.json | grep -oE '"(decode|graph_drawn)"|"(ms_per_token|ms_per_step|tokens_per_s|fraction_of_peak|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -1 $O/decode_$n.err
}
if grep -q "^\[  PASSED  \]" $O/cuda_decode_ops_test.txt && ! grep -q "^\[  FAILED  \]" $O/cuda_decode_ops_test.txt; then
  for r in 1 2 3; do for f in $FORMS; do dec ${f%%:*}_$r ${f#*:} --decode 64 --batch 1 --batch-steps 24; done; done
  dec batches_base $OFF --decode 0 --batch 1,8 --batch-steps 24
  dec batches_all X=0 --decode 0 --batch 1,8 --batch-steps 24
  mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
  for f in base:$OFF all:X=0; do
    n=${f%%:*}
    env $(tr , " " <<< "${f#*:}") CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
      HYPIC_TRACE_OUT=$O/step_$n.trace timeout 90 $B/hypic_bench_model $CFG --decode 64 --batch 1 --batch-steps 24 > /dev/null 2>&1
    python3 tools/bench/kernel_gaps.py $O/step_$n.trace --graph-step 2 --list 0:40 > $O/decode_gaps_$n.txt 2>&1
    echo "timeline $n:"; sed -n '/kernels by name/,/^$/p' $O/decode_gaps_$n.txt | head -14; grep -E "window" $O/decode_gaps_$n.txt
    rm -f $O/step_$n.trace
  done
  sed -n '/by start/,$p' $O/decode_gaps_all.txt | head -30
  TT=100 gtest cuda_model_test "" ""
  TT=150 gtest engine_model_test "*cuda*:*Cuda*:*CUDA*" ""
  TT=90 gtest engine_batch_model_test "" ""
  TT=90 gtest sdk_multi_turn_model_test "*cuda*" ""
else
  echo "the decode op test did not pass: benches left out"
fi
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
