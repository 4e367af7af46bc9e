#!/bin/bash
# The second warpgroup's outputs and forming interleaved (one step: chunk c's outputs with chunk c + 2's W and U), and
# with HYPIC_CUDA_GDN_WU_PREFETCH=1 the inputs' L2 prefetch two chunks ahead and the state's wait for W and U after its
# decay work: op tests under both, beside prep and prep first; the bench against the default interleaved; the walk's
# own pace (CUPTI, LEAD=100); fla in the same call. Both forms measured slower than callA's and were removed: the tree
# keeps callA's second warpgroup (commit dd29923's form_and_write).
# Pack: TARGETS="cuda_gdn_chunked_test hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build (keep trace.tar.xz)
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
HYPIC_CUDA_GDN_WU_IN_WALK=1 TT=60 gtest cuda_gdn_chunked_test "" _wu
HYPIC_CUDA_GDN_WU_IN_WALK=1 HYPIC_CUDA_GDN_WU_PREFETCH=1 TT=60 gtest cuda_gdn_chunked_test "" _wupf
HYPIC_CUDA_GDN_WU_IN_WALK=1 HYPIC_CUDA_GDN_WU_PREFETCH=1 HYPIC_CUDA_GDN_OVERLAP=0 TT=60 gtest cuda_gdn_chunked_test "" _wupf_prepfirst
if grep -q "PASSED  \] 7 tests" $O/cuda_gdn_chunked_test_wu.txt; then
  gdn_bench "a b" "default:X=0 wu:HYPIC_CUDA_GDN_WU_IN_WALK=1 wupf:HYPIC_CUDA_GDN_WU_IN_WALK=1,HYPIC_CUDA_GDN_WU_PREFETCH=1" --tokens 8192,16384,32768 --gdn-seqs 1,16 --iters 20
  mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
  for tok in 8192 32768; do for m in wu:HYPIC_CUDA_GDN_WU_IN_WALK=1 wupf:HYPIC_CUDA_GDN_WU_IN_WALK=1,HYPIC_CUDA_GDN_WU_PREFETCH=1; do
    for f in beside:X=0 lead100:HYPIC_CUDA_GDN_OVERLAP_LEAD=100; do
      n=${m%%:*}_${f%%:*}_$tok
      env $(tr , " " <<< "${m#*:}") ${f#*:} CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
        HYPIC_TRACE_OUT=$O/gdn_$n.trace timeout 60 $B/hypic_bench_kernels --only gdn --tokens $tok --gdn-seqs 1 --iters 10 > $O/bench_trace_$n.json 2>&1
      echo "$n:"; python3 - $O/gdn_$n.trace <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1], errors="replace"):
    f = line.rstrip("\n").split(";")
    name = ";".join(f[8:])
    if f[0] == "K" and "gdn" in name:
        d[(name[60:110], f[6], f[7])].append((int(f[2]) - int(f[1])) / 1000)
for (name, grid, block), v in sorted(d.items()):
    print(f"  {name:50s} grid {grid:>10s} x {block:>4s} n {len(v):4d} median {statistics.median(v):8.1f} us")
PY
      rm -f $O/gdn_$n.trace
    done
  done; done
  FT=150 fla_gdn --tokens 8192,16384,32768 --gdn-seqs 1,16 --iters 20
fi
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
