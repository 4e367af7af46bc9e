#!/bin/bash
# Where the time goes with W and U formed in the walk (HYPIC_CUDA_GDN_WU_IN_WALK=1) against the default, one sequence
# and 16: each kernel's own time (CUPTI, .gpubin/trace.tar.xz) beside prep, prep first, and every chunk prepared before
# the walk with the walk still reading flags (LEAD=100: the walk's own pace); then the bench at 16k (the one-sequence
# lengths between 8k, where it was slower, and 32k, where it was faster).
# Pack: TARGETS="hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build (keep .gpubin/trace.tar.xz)
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
summ() { python3 - "$1" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1], errors="replace"):
    f = line.rstrip("\n").split(";")
    name = ";".join(f[8:])
    if f[0] == "K" and "gdn" in name:
        d[(name[:70], f[6], f[7])].append((int(f[2]) - int(f[1])) / 1000)
for (name, grid, block), v in sorted(d.items()):
    print(f"  {name:70s} grid {grid:>10s} x {block:>4s} n {len(v):4d} median {statistics.median(v):8.1f} us")
PY
}
for tok in 8192 32768; do for m in default:X=0 wu:HYPIC_CUDA_GDN_WU_IN_WALK=1; do
  for f in beside:X=0 seq:HYPIC_CUDA_GDN_OVERLAP=0 lead100:HYPIC_CUDA_GDN_OVERLAP_LEAD=100; do
    n=${m%%:*}_${f%%:*}_$tok
    env ${m#*:} ${f#*:} CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
      HYPIC_TRACE_OUT=$O/gdn_$n.trace timeout 60 $B/hypic_bench_kernels --only gdn --tokens $tok --gdn-seqs 1 --iters 10 > $O/bench_trace_$n.json 2>&1
    echo "$n:"; summ $O/gdn_$n.trace; rm -f $O/gdn_$n.trace
  done
  n=${m%%:*}_16seq_$tok
  env ${m#*:} CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
    HYPIC_TRACE_OUT=$O/gdn_$n.trace timeout 60 $B/hypic_bench_kernels --only gdn --tokens $tok --gdn-seqs 16 --iters 10 > $O/bench_trace_$n.json 2>&1
  echo "$n:"; summ $O/gdn_$n.trace; rm -f $O/gdn_$n.trace
done; done
gdn_bench "a b" "default:X=0 wu:HYPIC_CUDA_GDN_WU_IN_WALK=1" --tokens 16384 --gdn-seqs 1,4 --iters 20
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
