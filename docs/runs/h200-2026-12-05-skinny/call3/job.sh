#!/usr/bin/env bash
# session script (not committed): conv latency, kv append, skinny host calls; TTFT, host phases, timeline
set -x
CFG=tools/bench/configs/qwen3_5_35b_a3b.json
t() { local n=$1; shift; timeout 150 $B/$n "$@" > $O/$n$SUF.txt 2>&1; echo "$n$SUF exit $?"; grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED|Failure$|ms total\)$" $O/$n$SUF.txt | tail -6; }
t cuda_stitch_ops_test
t cuda_backend_ops_test
t cuda_gemm_skinny_test
t cuda_model_test
t engine_model_test --gtest_filter='*cuda*:*Cuda*:*CUDA*:-*hypic_qa_long*'
t engine_batch_model_test
$B/hypic_bench_ttft --config $CFG --case rag --requests 8 > $O/ttft.json 2> $O/ttft.txt
grep -oE '"mode": "[a-z]+", "ttft_ms": \{[^}]*\}' $O/ttft.json; grep 'measured request' $O/ttft.txt | grep hypic
$B/hypic_bench_ttft --config $CFG --case rag --mode hypic --requests 8 > $O/ttft_b.json 2> $O/ttft_b.txt
grep -oE '"mode": "[a-z]+", "ttft_ms": \{[^}]*\}' $O/ttft_b.json; grep 'measured request' $O/ttft_b.txt | grep hypic
HYPIC_PROFILE=host $B/hypic_bench_ttft --config $CFG --case rag --mode hypic --warmup 8 --requests 1 > $O/ttft_host.json 2> $O/ttft_host.txt
tail -40 $O/ttft_host.txt
CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH HYPIC_TRACE_OUT=$O/req8.trace \
  $B/hypic_bench_ttft --config $CFG --case rag --mode hypic --warmup 8 --requests 1 --profile-request 8 > /dev/null 2>&1
python3 tools/bench/kernel_gaps.py $O/req8.trace > $O/req8_gaps.txt 2>&1; head -24 $O/req8_gaps.txt; sed -n '/kernels by kind/,/host runtime/p' $O/req8_gaps.txt | head -45; gzip -f $O/req8.trace
timeout 150 $B/hypic_bench_model --config $CFG --random-weights --prefill 8192 --decode 64 --batch 1,8,32 --batch-steps 24 > $O/decode.json 2> $O/decode.txt
echo "decode exit $?"; grep -o '"batch": [0-9]*\|"graph_drawn": {"ms_per_step": [0-9.]*' $O/decode.json | tr '\n' ' '; echo
