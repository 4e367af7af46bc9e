#!/bin/bash
# The rule of callF's `all` as the default (W in the walk wherever it applies, prep-first launches whose blocks fit one
# wave included), and the state's warpgroup waiting for -W after issuing U^T's products (HYPIC_CUDA_GDN_WU_FORMED_EARLY=1:
# before, callF's kernel): op test; model and engine CUDA tests; the bench of the previous form
# (HYPIC_CUDA_GDN_WU_IN_WALK=0), the default and callF's wait at one, two (prep first) and 16 sequences, interleaved,
# twice.
# Pack: TARGETS="cuda_gdn_chunked_test cuda_model_test engine_model_test hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
TT=100 gtest cuda_model_test "" ""
TT=120 gtest engine_model_test "*cuda*" ""
gdn_bench "a b" "previous:HYPIC_CUDA_GDN_WU_IN_WALK=0 default:X=0 early:HYPIC_CUDA_GDN_WU_FORMED_EARLY=1" --tokens 2048,8192,32768 --gdn-seqs 1,2,16 --iters 20
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
