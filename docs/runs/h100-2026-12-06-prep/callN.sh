#!/bin/bash
# Session 42, call N: gdn_prep held to at most N chunks ahead of the walk beside it (HYPIC_CUDA_GDN_PREP_AHEAD=N),
# so that the tiles are still in L2 when the walk reads them. Op test under N=16; the GDN bench (one sequence, 8k /
# 16k / 32k) for the previous commit's binary (old), this one unbounded (new) and N = 8, 12, 16, 24, 32, twice.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
HYPIC_CUDA_GDN_PREP_AHEAD=16 TT=60 gtest cuda_gdn_chunked_test "" _ahead16
HYPIC_CUDA_GDN_PREP_AHEAD=2 TT=60 gtest cuda_gdn_chunked_test "" _ahead2
date +%T
for k in a b; do for f in old new 8 12 16 24 32; do
  bin=$B/hypic_bench_kernels; [ $f = old ] && bin=$B/hypic_bench_kernels_old
  a=0; case $f in old|new) ;; *) a=$f;; esac
  HYPIC_CUDA_GDN_PREP_AHEAD=$a timeout 60 $bin --only gdn --tokens 8192,16384,32768 --iters 20 > $O/bench_${f}_$k.json 2>&1
  echo "$f $k: $(grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' $O/bench_${f}_$k.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //; s/"out\+state"/os/; s/"out\+state\+transfer"/T/' | tr '\n' ' ')"
done; done
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
