#!/bin/bash
# W and U formed on the walk's second warpgroup (HYPIC_CUDA_GDN_WU_IN_WALK=1): the op test under it beside prep and
# with prep first; if it passes, the bench against the default interleaved, fla in the same call, and the model and
# engine CUDA tests under it.
# Pack: TARGETS="cuda_gdn_chunked_test cuda_model_test engine_model_test hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
HYPIC_CUDA_GDN_WU_IN_WALK=1 TT=60 gtest cuda_gdn_chunked_test "" _wu
HYPIC_CUDA_GDN_WU_IN_WALK=1 HYPIC_CUDA_GDN_OVERLAP=0 TT=60 gtest cuda_gdn_chunked_test "" _wu_prepfirst
if grep -q "PASSED  \] 7 tests" $O/cuda_gdn_chunked_test_wu.txt; then
  gdn_bench "a b" "default:X=0 wu:HYPIC_CUDA_GDN_WU_IN_WALK=1" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
  gdn_bench "a" "wu_prepfirst:HYPIC_CUDA_GDN_WU_IN_WALK=1,HYPIC_CUDA_GDN_OVERLAP=0 prepfirst:HYPIC_CUDA_GDN_OVERLAP=0" --tokens 8192,32768 --gdn-seqs 1 --iters 20
  FT=150 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
  HYPIC_CUDA_GDN_WU_IN_WALK=1 TT=100 gtest cuda_model_test "" _wu
  HYPIC_CUDA_GDN_WU_IN_WALK=1 TT=120 gtest engine_model_test "*cuda*" _wu
fi
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
