#!/bin/bash
# Session 40, call G (prepared, not run): the op test under HYPIC_CUDA_GDN_WALK_PAIR=auto (two-warpgroup blocks where
# one-warpgroup blocks would be more than the SMs) and under HYPIC_CUDA_GDN_WALK_UNROLL=1 (the walk unrolled by its
# stages); the GDN bench default / unroll on one sequence, default / auto over 1, 4 and 16 sequences; fla over 1 and
# 16 sequences in the same call. Pack cuda_gdn_chunked_test and hypic_bench_kernels.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
HYPIC_CUDA_GDN_WALK_PAIR=auto TT=60 gtest cuda_gdn_chunked_test "" _auto
HYPIC_CUDA_GDN_WALK_UNROLL=1 TT=60 gtest cuda_gdn_chunked_test "" _unroll
gdn_bench "a b" "default:HYPIC_CUDA_GDN_OVERLAP=1 unroll:HYPIC_CUDA_GDN_WALK_UNROLL=1" --tokens 8192,32768 --iters 20
gdn_bench "a b" "seqs_default:HYPIC_CUDA_GDN_OVERLAP=1 seqs_auto:HYPIC_CUDA_GDN_WALK_PAIR=auto" --tokens 8192,32768 --gdn-seqs 1,4,16 --iters 20
fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
