#!/bin/bash
# The committed default (W and U formed in the walk where measured faster: several sequences whose one-warpgroup
# blocks outnumber the SMs, one sequence of 32k tokens or more beside prep; the second warpgroup's first form, callA):
# op test; the bench of the default against HYPIC_CUDA_GDN_WU_IN_WALK=0 (the previous default) interleaved, twice; fla
# in the same call; model and engine CUDA tests.
# Pack: TARGETS="cuda_gdn_chunked_test cuda_model_test engine_model_test hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
gdn_bench "a b" "previous:HYPIC_CUDA_GDN_WU_IN_WALK=0 default:X=0" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
FT=150 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
TT=100 gtest cuda_model_test "" ""
TT=120 gtest engine_model_test "*cuda*" ""
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
