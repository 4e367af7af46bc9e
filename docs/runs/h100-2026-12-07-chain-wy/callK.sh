#!/bin/bash
# The chain bench's kernels under the kernel tracer: device durations of the chain and the span operators per variant.
. tools/bench/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH HYPIC_TRACE_OUT=$O/chain.trace \
  timeout 60 $B/hypic_bench_kernels --only chain --iters 4 > $O/chain_traced.json 2>&1
grep -oE '"variant": "[^"]+", "steps": [0-9]+, "rows": [0-9]+, "ms": [0-9.]+' $O/chain_traced.json
python3 .calls/trace_summary.py $O/chain.trace
rm -f $O/chain.trace; tar czf $OUT/logs.tgz -C /tmp o
