#!/bin/bash
# Session 42, call P (the commit's form): gdn_prep on Hopper with L and Aqk in one pass and, where prep runs as a
# launch of its own, g/beta requested before the tile copies. Op test (default, prep before the walk, the mma.sync
# prep); the GDN bench, previous commit (old) against this one (new), interleaved, twice; fla; model and engine tests.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_OVERLAP=0 TT=60 gtest cuda_gdn_chunked_test "" _seq
HYPIC_CUDA_GDN_PREP_SM90=0 TT=60 gtest cuda_gdn_chunked_test "" _mma
gtest cuda_model_test "" ""
TT=200 gtest engine_model_test '*cuda*' ""
date +%T
for k in a b; do for f in old new; do
  bin=$B/hypic_bench_kernels; [ $f = old ] && bin=$B/hypic_bench_kernels_old
  timeout 60 $bin --only gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 > $O/bench_${f}_$k.json 2>&1
  echo "$f $k: $(grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' $O/bench_${f}_$k.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //; s/"out\+state"/os/; s/"out\+state\+transfer"/T/; s/"out\+state, 16 sequences"/os16/; s/"out\+state\+transfer, 16 sequences"/T16/' | tr '\n' ' ')"
done; done
date +%T
FT=100 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
