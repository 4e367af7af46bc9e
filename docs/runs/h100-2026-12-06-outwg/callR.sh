#!/bin/bash
# The outputs on a warpgroup of their own (HYPIC_CUDA_GDN_OUT_WG=1): op tests under it, the bench against the default
# in the same call (one sequence beside prep and prep first; 16 sequences), each GDN kernel's time.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=90 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_OUT_WG=1 TT=90 gtest cuda_gdn_chunked_test "" _ow
HYPIC_CUDA_GDN_OUT_WG=1 HYPIC_CUDA_GDN_WALK_PAIR=0 TT=90 gtest cuda_gdn_chunked_test "" _ow_pair0
HYPIC_CUDA_GDN_OUT_WG=1 HYPIC_CUDA_GDN_OVERLAP=0 TT=90 gtest cuda_gdn_chunked_test "" _ow_seq
gdn_bench "a b" "default:X=0 ow:HYPIC_CUDA_GDN_OUT_WG=1 seq:HYPIC_CUDA_GDN_OVERLAP=0 ow_seq:HYPIC_CUDA_GDN_OUT_WG=1,HYPIC_CUDA_GDN_OVERLAP=0" --tokens 8192,32768 --gdn-seqs 1 --iters 20
gdn_bench "a" "pair0:HYPIC_CUDA_GDN_WALK_PAIR=0 ow_pair0:HYPIC_CUDA_GDN_OUT_WG=1,HYPIC_CUDA_GDN_WALK_PAIR=0" --tokens 8192,32768 --gdn-seqs 16 --iters 20
mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
for f in ow:HYPIC_CUDA_GDN_OUT_WG=1 ow_seq:HYPIC_CUDA_GDN_OUT_WG=1,HYPIC_CUDA_GDN_OVERLAP=0 ow_lead100:HYPIC_CUDA_GDN_OUT_WG=1,HYPIC_CUDA_GDN_OVERLAP_LEAD=100; do
  for tok in 8192 32768; do n=${f%%:*}_$tok
  env $(tr , " " <<< "${f#*:}") CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
    HYPIC_TRACE_OUT=$O/gdn_$n.trace timeout 60 $B/hypic_bench_kernels --only gdn --tokens $tok --iters 20 > $O/bench_trace_$n.json 2>&1
  echo "$n:"; python3 - $O/gdn_$n.trace <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1], errors="replace"):
    f = line.rstrip("\n").split(";")
    name = ";".join(f[8:])
    if f[0] == "K" and "gdn" in name:
        d[(name[60:75], f[6], f[7])].append((int(f[2]) - int(f[1])) / 1000)
for (name, grid, block), v in sorted(d.items()):
    print(f"  {name:16s} grid {grid:>10s} x {block:>4s} n {len(v):4d} median {statistics.median(v):8.1f} us")
PY
  done
done
HYPIC_CUDA_GDN_OUT_WG=1 TT=200 gtest cuda_model_test "" _ow
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
