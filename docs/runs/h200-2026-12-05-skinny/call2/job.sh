#!/usr/bin/env bash
# session script (not committed): gemm_skinny on by default, checked and measured
set -x
CFG=tools/bench/configs/qwen3_5_35b_a3b.json
t() { local n=$1; shift; timeout 150 $B/$n "$@" > $O/$n$SUF.txt 2>&1; echo "$n$SUF exit $?"; grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED|Failure$|ms total\)$" $O/$n$SUF.txt | tail -6; }
t cuda_gemm_skinny_test
t cuda_model_test
t cuda_stitch_ops_test
t cuda_decode_ops_test
t engine_model_test --gtest_filter='*cuda*:*Cuda*:*CUDA*'
t engine_batch_model_test
t sdk_multi_turn_model_test --gtest_filter='*cuda*:*Cuda*:*CUDA*'
$B/hypic_bench_ttft --config $CFG --case rag --requests 8 > $O/ttft_on.json 2> $O/ttft_on.txt
grep -oE '"mode": "[a-z]+", "ttft_ms": \{[^}]*\}' $O/ttft_on.json; grep 'measured request' $O/ttft_on.txt | grep hypic
HYPIC_CUDA_SKINNY=0 $B/hypic_bench_ttft --config $CFG --case rag --mode hypic --requests 8 > $O/ttft_off.json 2> $O/ttft_off.txt
grep -oE '"mode": "[a-z]+", "ttft_ms": \{[^}]*\}' $O/ttft_off.json; grep 'measured request' $O/ttft_off.txt | grep hypic
for v in 1 0; do
  HYPIC_CUDA_SKINNY=$v timeout 150 $B/hypic_bench_model --config $CFG --random-weights --prefill 8192 --decode 64 --batch 1,8,32 --batch-steps 24 > $O/decode_skinny$v.json 2> $O/decode_skinny$v.txt
  echo "decode $v exit $?"; grep -o '"batch": [0-9]*\|"graph_drawn": {"ms_per_step": [0-9.]*' $O/decode_skinny$v.json | tr '\n' ' '; echo
done
CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH HYPIC_TRACE_OUT=$O/req8.trace \
  $B/hypic_bench_ttft --config $CFG --case rag --mode hypic --warmup 8 --requests 1 --profile-request 8 > /dev/null 2>&1
python3 tools/bench/kernel_gaps.py $O/req8.trace > $O/req8_gaps.txt 2>&1; head -60 $O/req8_gaps.txt; gzip -f $O/req8.trace
timeout 120 $B/hypic_bench_kernels --only skinny --iters 20 > $O/bench_skinny.json; echo "bench exit $?"
