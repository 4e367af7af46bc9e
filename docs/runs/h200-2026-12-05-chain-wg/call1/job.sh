#!/usr/bin/env bash
# What call1 ran ($B: the packed binaries of tools/bench/pack_gpu_binaries.sh, $O: the outputs), from the
# repository root with HYPIC_SOURCE_DIR set.
set -x
CFG=tools/bench/configs/qwen3_5_35b_a3b.json
t() { local n=$1; shift; timeout 200 $B/$n "$@" > $O/$n$SUF.txt 2>&1; echo "$n$SUF exit $?"; grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED|Failure$|ms total\)$|rel_err|Expected|Which is" $O/$n$SUF.txt | head -16; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv
t cuda_stitch_ops_test
t cuda_sequence_state_test
for f in 1 wg; do HYPIC_CUDA_CHAIN_TC=$f $B/hypic_bench_kernels --only chain --iters 20 > $O/chain_$f.json 2>&1; echo "chain $f"; grep -o '"variant": "[^"]*", "steps": [0-9]*, "rows": [0-9]*, "ms": [0-9.]*' $O/chain_$f.json; done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for v in 13:products 21:spans; do
  HYPIC_CUDA_CHAIN_TC=wg timeout 60 "$NCU" --set full --import-source no -k regex:state_chain --launch-skip ${v%%:*} --launch-count 1 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    $B/hypic_bench_kernels --only chain --iters 1 > $O/ncu_chain_${v#*:}.txt 2>&1
done
$B/hypic_bench_ttft --config $CFG --case rag --requests 8 > $O/ttft.json 2> $O/ttft.txt
HYPIC_CUDA_CHAIN_TC=1 $B/hypic_bench_ttft --config $CFG --case rag --mode hypic --requests 8 > $O/ttft_tc1.json 2> $O/ttft_tc1.txt
CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH HYPIC_TRACE_OUT=$O/req8.trace \
  $B/hypic_bench_ttft --config $CFG --case rag --mode hypic --warmup 8 --requests 1 --profile-request 8 > /dev/null 2>&1
python3 tools/bench/kernel_gaps.py $O/req8.trace > $O/req8_gaps.txt 2>&1
t cuda_model_test
t engine_model_test --gtest_filter='*cuda*:*Cuda*:*CUDA*'
t sdk_session_model_test
t cold_scatter_model_test
t tensor_parallel_model_test
t cuda_family_glue_test
t cuda_entry_promotion_test
t cuda_packed_expand_test
t sdk_multi_turn_model_test
t engine_batch_model_test
