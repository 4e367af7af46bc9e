#!/bin/bash
# Session 41, call L (prepared, not run: no device time left): the long-sequence rule as the default (two warpgroups
# beside prep, unrolled, from 16k tokens with T). The op test under the default (its new check that a 16k-token,
# 32-head launch with T overlaps) and under PAIR=0; the GDN bench at 8k..32k, default against PAIR=0; fla; the model
# and engine tests. Pack cuda_gdn_chunked_test hypic_bench_kernels cuda_model_test engine_model_test.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_WALK_PAIR=0 TT=60 gtest cuda_gdn_chunked_test "" _pair0
gdn_bench "a b" "default:HYPIC_CUDA_GDN_OVERLAP=1 pair0:HYPIC_CUDA_GDN_WALK_PAIR=0" --tokens 8192,16384,32768 --gdn-seqs 1,16 --iters 20
FT=120 fla_gdn --tokens 8192,16384,32768 --gdn-seqs 1,16 --iters 20
gtest cuda_model_test "" ""
TT=200 gtest engine_model_test '*cuda*' ""
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
