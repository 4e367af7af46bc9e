#!/bin/bash
# The committed form (3994998: the outputs' warpgroup beside prep, split decays where prep is its own launch): op test,
# the bench against 49c3288's binary (hypic_bench_kernels_old) interleaved, fla in the same call, model and engine CUDA
# tests, then a lead of 3 / 5% of the chunks prepared before the walk.
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
for r in a b; do for f in old new; do
  bin=$B/hypic_bench_kernels; [ $f = old ] && bin=$B/hypic_bench_kernels_old
  timeout 60 $bin --only gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 > $O/bench_${f}_$r.json 2>&1
  echo "$f $r:"; grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' $O/bench_${f}_$r.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //'
done; done
FT=90 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
TT=100 gtest cuda_model_test "" ""
TT=120 gtest engine_model_test "*cuda*" ""
gdn_bench "a b" "lead3:HYPIC_CUDA_GDN_OVERLAP_LEAD=3 lead5:HYPIC_CUDA_GDN_OVERLAP_LEAD=5 default:X=0" --tokens 8192,32768 --gdn-seqs 1 --iters 20
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
