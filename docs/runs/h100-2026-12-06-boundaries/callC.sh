#!/bin/bash
# Decode at batch 1: the GDN conv in the input products' epilogue, now with the tail and taps brought into L1
# before the products' wait and the recurrence launched once every products block has its sums (default;
# HYPIC_CUDA_GEMV_CONV_TRIGGER=start: at the products' start, as in callB; HYPIC_CUDA_GDN_CONV_IN_GEMV=0: main's
# form), three rounds interleaved; the op, model, engine, batch and multi-turn tests by default; both timelines.
# Pack: TARGETS="cuda_decode_ops_test cuda_model_test engine_model_test hypic_bench_model sdk_multi_turn_model_test engine_batch_model_test" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=90 gtest cuda_decode_ops_test "" ""
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"
FORMS="base:X=0 noconv:HYPIC_CUDA_GDN_CONV_IN_GEMV=0 start:HYPIC_CUDA_GEMV_CONV_TRIGGER=start"
dec() {  # dec NAME ENV ARGS...: one bench run into $O/decode_NAME.json, its figures printed
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout 90 $B/hypic_bench_model $CFG "$@" > $O/decode_$n.json 2>$O/decode_$n.err
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' $O/decode_$n.json) $(grep -oE '"graph_drawn": \{[^}]*' $O/decode_$n.json | grep -oE '"(ms_per_step|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -1 $O/decode_$n.err
}
for f in $FORMS; do dec ${f%%:*}_1 ${f#*:} --decode 0 --batch 1 --batch-steps 24; done
TT=100 gtest cuda_model_test "" ""
TT=150 gtest engine_model_test "*cuda*:*Cuda*:*CUDA*" ""
TT=90 gtest engine_batch_model_test "" ""
TT=90 gtest sdk_multi_turn_model_test "*cuda*" ""
for r in 2 3; do for f in $FORMS; do dec ${f%%:*}_$r ${f#*:} --decode 0 --batch 1 --batch-steps 24; done; done
dec batches_base X=0 --decode 0 --batch 1,8 --batch-steps 24
dec batches_noconv HYPIC_CUDA_GDN_CONV_IN_GEMV=0 --decode 0 --batch 1,8 --batch-steps 24
mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
for f in base:X=0 noconv:HYPIC_CUDA_GDN_CONV_IN_GEMV=0; do
  n=${f%%:*}
  env $(tr , " " <<< "${f#*:}") CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
    HYPIC_TRACE_OUT=$O/step_$n.trace timeout 90 $B/hypic_bench_model $CFG --decode 0 --batch 1 --batch-steps 24 > /dev/null 2>&1
  python3 tools/bench/kernel_gaps.py $O/step_$n.trace --graph-step 2 --list 0:40 > $O/decode_gaps_$n.txt 2>&1
  echo "timeline $n:"; sed -n '/kernels by name/,/^$/p' $O/decode_gaps_$n.txt | head -14
  sed -n '/by start/,$p' $O/decode_gaps_$n.txt | sed -n 7,13p
  rm -f $O/step_$n.trace
done
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
