#!/bin/bash
# Issue 12 goal 3: the decode step's conv, split and recurrent step in one launch (HYPIC_CUDA_GDN_CONV_RECURRENT=1)
# against the two launches, op test first, interleaved rounds, timelines, the batch tests under it; goal 2: the GDN
# walk (W formed in the walk) profiled by Nsight Compute. On an H200 also the RAG TTFT and batch 32 (main's forms).
# Pack: TARGETS="hypic_bench_kernels cuda_gdn_chunked_test cuda_decode_ops_test hypic_bench_model hypic_bench_ttft engine_batch_model_test" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
H200=0; grep -q H200 $O/device.txt && H200=1
CFG="--config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192"
TT=90 gtest cuda_decode_ops_test "" ""
dec() {  # dec NAME ENV ARGS...: one bench run into $O/decode_NAME.json, its figures printed
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout 100 $B/hypic_bench_model $CFG "$@" > $O/decode_$n.json 2>$O/decode_$n.err
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' $O/decode_$n.json) $(grep -oE '"(decode|graph_drawn)": \{[^}]*' $O/decode_$n.json | grep -oE '"(decode|graph_drawn)"|"(ms_per_token|ms_per_step|tokens_per_s|fraction_of_peak|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -1 $O/decode_$n.err
}
FORMS="base:HYPIC_CUDA_GDN_CONV_RECURRENT=0 fused:HYPIC_CUDA_GDN_CONV_RECURRENT=1"
if grep -q "^\[  PASSED  \]" $O/cuda_decode_ops_test.txt && ! grep -q "^\[  FAILED  \]" $O/cuda_decode_ops_test.txt; then
  for r in 1 2; do for f in $FORMS; do dec ${f%%:*}_$r ${f#*:} --decode 64 --batch 1 --batch-steps 24; done; done
  date +%T
  mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
  for f in $FORMS; do
    n=${f%%:*}
    env $(tr , " " <<< "${f#*:}") CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
      HYPIC_TRACE_OUT=$O/step_$n.trace timeout 90 $B/hypic_bench_model $CFG --decode 64 --batch 1 --batch-steps 24 > /dev/null 2>&1
    python3 tools/bench/kernel_gaps.py $O/step_$n.trace --graph-step 2 --list 0:40 > $O/decode_gaps_$n.txt 2>&1
    echo "timeline $n:"; sed -n '/kernels by name/,/^$/p' $O/decode_gaps_$n.txt | head -16; grep -E "window" $O/decode_gaps_$n.txt
    rm -f $O/step_$n.trace
  done
  date +%T
  B832=1,8; [ $H200 = 1 ] && B832=1,8,32
  for f in $FORMS; do dec batches_${f%%:*} ${f#*:} --decode 0 --batch $B832 --batch-steps 24; done
  HYPIC_CUDA_GDN_CONV_RECURRENT=1 TT=120 gtest engine_batch_model_test "" "_fused"
else
  echo "the decode op test did not pass: decode benches left out"
fi
date +%T
if [ $H200 = 1 ] && [ $(left 420) -gt 100 ]; then
  timeout 200 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/h200_ttft.json 2>$O/h200_ttft.err
  grep -E '"mode"|p50|p90' $O/h200_ttft.json | head -20
  date +%T
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU (left $(left 480) s)"
if [ $(left 480) -gt 90 ]; then
  n=one
  HYPIC_CUDA_GDN_OVERLAP=0 timeout 120 $NCU --set full --import-source yes -k regex:gdn_walk_rs --launch-skip 2 --launch-count 1 \
    -o $O/ncu_walk_$n $B/hypic_bench_kernels --only gdn --tokens 8192 --gdn-seqs 1 --iters 1 > $O/ncu_walk_${n}_run.txt 2>&1
  timeout 40 $NCU -i $O/ncu_walk_$n.ncu-rep --page details > $O/ncu_walk_${n}_details.txt 2>&1
  timeout 40 $NCU -i $O/ncu_walk_$n.ncu-rep --page source --csv --print-source sass > $O/ncu_walk_${n}_sass.csv 2>&1
  timeout 40 $NCU -i $O/ncu_walk_$n.ncu-rep --page source --csv --print-source cuda,sass > $O/ncu_walk_${n}_cudasass.csv 2>&1
  echo "ncu $n:"; grep -E "  Duration|Issued Ipc|Executed Instructions  |Warp Cycles Per Issued|Registers Per|Grid Size|Block Size" $O/ncu_walk_${n}_details.txt | head -8
  python3 tools/bench/ncu_top_stalls.py $O/ncu_walk_${n}_sass.csv --top 25 2>&1 | head -32
  rm -f $O/ncu_walk_$n.ncu-rep
fi
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
