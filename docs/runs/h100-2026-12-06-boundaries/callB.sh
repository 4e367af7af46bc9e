#!/bin/bash
# Decode at batch 1: the GDN conv in the input products' epilogue and the recurrence's state read before its wait
# (default; HYPIC_CUDA_GDN_CONV_IN_GEMV=0: the conv its own launch; HYPIC_CUDA_GDN_STATE_EARLY=0: the state after), 
# and where the decode down kernel and the products let their successors start
# (HYPIC_CUDA_MOE_DOWN_TRIGGER=loads/wait/none, HYPIC_CUDA_GEMV_TRIGGER=wait/none; default: at the start), three
# rounds interleaved; timelines; Nsight Compute on the MoE pair and the products, each kernel replayed alone;
# the model, engine, batch and multi-turn tests by default.
# Pack: TARGETS="cuda_decode_ops_test cuda_model_test engine_model_test hypic_bench_model sdk_multi_turn_model_test engine_batch_model_test" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=90 gtest cuda_decode_ops_test "" ""
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"
FORMS="base:X=0 noconv:HYPIC_CUDA_GDN_CONV_IN_GEMV=0 nostate:HYPIC_CUDA_GDN_STATE_EARLY=0 dw:HYPIC_CUDA_MOE_DOWN_TRIGGER=wait gw:HYPIC_CUDA_GEMV_TRIGGER=wait"
dec() {  # dec NAME ENV ARGS...: one bench run into $O/decode_NAME.json, its figures printed
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout 90 $B/hypic_bench_model $CFG "$@" > $O/decode_$n.json 2>$O/decode_$n.err
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' $O/decode_$n.json) $(grep -oE '"graph_drawn": \{[^}]*' $O/decode_$n.json | grep -oE '"(ms_per_step|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -1 $O/decode_$n.err
}
if ! grep -q "^\[  PASSED  \]" $O/cuda_decode_ops_test.txt || grep -q "^\[  FAILED  \]" $O/cuda_decode_ops_test.txt; then
  echo "op test failed: decode forms without the conv in the products only"; FORMS="noconv:HYPIC_CUDA_GDN_CONV_IN_GEMV=0"
fi
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
  echo "timeline $n:"; sed -n '/kernels by name/,/^$/p' $O/decode_gaps_$n.txt | head -14; grep -E "window" $O/decode_gaps_$n.txt
  rm -f $O/step_$n.trace
done
NCU=$(ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  timeout 60 $NCU --graph-profiling node -k "regex:decode_down|decode_gate_up|gemv_kernel|gdn_recurrent|conv_split" --launch-skip 300 --launch-count 10 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats \
    $B/hypic_bench_model $CFG --decode 0 --batch 1 --batch-steps 4 > $O/ncu.txt 2>&1
  echo "ncu exit $?"
  grep -E "^  [a-z_:<>0-9 ]+\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Waves Per SM|Theoretical Occupancy" $O/ncu.txt | head -120
fi
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
