#!/bin/bash
# -W on the walk's second warpgroup and U in the state's X group as the only W-in-walk form, the default for batches
# whose one-warpgroup blocks outnumber the SMs and wherever the walk runs beside prep: op test by default and with the
# form everywhere; model and engine CUDA tests by default; the bench of the previous form (prep forms W and U,
# HYPIC_CUDA_GDN_WU_IN_WALK=0), the default and the form everywhere (=1) at lengths callE did not measure, one and two
# sequences (two: prep first), interleaved, twice; the default at callE's shapes once.
# Pack: TARGETS="cuda_gdn_chunked_test cuda_model_test engine_model_test hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build
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
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
