#!/bin/bash
# -W on the walk's second warpgroup and U in the state's X group as the only W-in-walk form, the default for batches
# whose one-warpgroup blocks outnumber the SMs and wherever the walk runs beside prep: op test by default and with the
# form everywhere; model and engine CUDA tests by default; the bench of the previous form (prep forms W and U,
# HYPIC_CUDA_GDN_WU_IN_WALK=0), the default and the form everywhere (=1) at lengths callE did not measure, one and two
# sequences (two: prep first), interleaved, twice; the default at callE's shapes once; each GDN kernel's own time
# (CUPTI, .gpubin/trace.tar.xz), one sequence beside prep and with every chunk prepared first (LEAD=100: the walk's own
# pace), at 8k and 32k.
# Pack: TARGETS="cuda_gdn_chunked_test cuda_model_test engine_model_test hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build
# (keep .gpubin/trace.tar.xz)
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_WU_IN_WALK=1 TT=60 gtest cuda_gdn_chunked_test "" _all
HYPIC_CUDA_GDN_WU_IN_WALK=1 HYPIC_CUDA_GDN_OVERLAP=0 TT=60 gtest cuda_gdn_chunked_test "" _all_prepfirst
TT=100 gtest cuda_model_test "" ""
TT=120 gtest engine_model_test "*cuda*" ""
gdn_bench "a b" "previous:HYPIC_CUDA_GDN_WU_IN_WALK=0 default:X=0 all:HYPIC_CUDA_GDN_WU_IN_WALK=1" --tokens 1024,2048,4096,16384 --gdn-seqs 1,2 --iters 20
gdn_bench "a" "default_8k32k:X=0" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
# On an H200 (no GDN figure from one since the thirty-seventh session): fla at the same shapes.
if grep -q H200 $O/device.txt; then FT=150 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20; fi
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
for tok in 8192 32768; do for f in beside:X=0 lead100:HYPIC_CUDA_GDN_OVERLAP_LEAD=100; do
  n=${f%%:*}_$tok
  env ${f#*:} CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
    HYPIC_TRACE_OUT=$O/gdn_$n.trace timeout 60 $B/hypic_bench_kernels --only gdn --tokens $tok --gdn-seqs 1 --iters 10 > $O/bench_trace_$n.json 2>&1
  echo "$n:"; summ $O/gdn_$n.trace | tee $O/trace_summary_$n.txt; rm -f $O/gdn_$n.trace
done; done
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
