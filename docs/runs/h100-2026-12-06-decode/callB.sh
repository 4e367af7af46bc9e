#!/bin/bash
# Decode at batch 1: the MoE in one launch, second form (each block's down rows copied into shared memory by
# cp.async while the gate/up tickets stream; HYPIC_CUDA_MOE_DECODE_FUSED=0: the two launches). Op test; the
# batch-1 step under both forms, interleaved, three rounds; each form's step timeline (CUPTI); the model,
# engine, batch and multi-turn tests by default.
# Pack: TARGETS="cuda_decode_ops_test cuda_model_test engine_model_test hypic_bench_model sdk_multi_turn_model_test engine_batch_model_test" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=90 gtest cuda_decode_ops_test "" ""
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"
FORMS="pair:HYPIC_CUDA_MOE_DECODE_FUSED=0 one:X=0"
dec() {  # dec NAME ENV ARGS...: one bench run into $O/decode_NAME.json, its figures printed
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout 90 $B/hypic_bench_model $CFG "$@" > $O/decode_$n.json 2>$O/decode_$n.err
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' $O/decode_$n.json) $(grep -oE '"(decode|graph_drawn)": \{[^}]*' $O/decode_$n.json | grep -oE '"(decode|graph_drawn)"|"(ms_per_token|ms_per_step|tokens_per_s|fraction_of_peak|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -2 $O/decode_$n.err
}
if grep -q "^\[  PASSED  \]" $O/cuda_decode_ops_test.txt && ! grep -q "^\[  FAILED  \]" $O/cuda_decode_ops_test.txt; then
  for r in 1 2 3; do for f in $FORMS; do dec ${f%%:*}_$r ${f#*:} --decode 64 --batch 1 --batch-steps 24; done; done
  mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
  for f in $FORMS; do
    n=${f%%:*}
    env $(tr , " " <<< "${f#*:}") CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
      HYPIC_TRACE_OUT=$O/step_$n.trace timeout 90 $B/hypic_bench_model $CFG --decode 64 --batch 1 --batch-steps 24 > /dev/null 2>&1
    python3 tools/bench/kernel_gaps.py $O/step_$n.trace --graph-step 2 > $O/decode_gaps_$n.txt 2>&1
    echo "timeline $n:"; sed -n '/kernels by name/,/^$/p' $O/decode_gaps_$n.txt | head -6; grep -E "window" $O/decode_gaps_$n.txt
    rm -f $O/step_$n.trace
  done
  TT=100 gtest cuda_model_test "" ""
  TT=150 gtest engine_model_test "*cuda*:*Cuda*:*CUDA*" ""
  TT=90 gtest engine_batch_model_test "" ""
  TT=90 gtest sdk_multi_turn_model_test "*cuda*" ""
else
  echo "the decode op test did not pass: benches left out"
fi
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
