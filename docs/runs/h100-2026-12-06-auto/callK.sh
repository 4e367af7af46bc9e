#!/bin/bash
# Session 41, call K: where two warpgroups a block beside prep, unrolled, overtakes the default for one sequence with T:
# the GDN bench at 8k..64k tokens under the default, PAIR=1 and PAIR=1 UNROLL=1.
. tools/bench/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
gdn_bench "a" "default:HYPIC_CUDA_GDN_OVERLAP=1 pair:HYPIC_CUDA_GDN_WALK_PAIR=1 pair_unroll:HYPIC_CUDA_GDN_WALK_PAIR=1,HYPIC_CUDA_GDN_WALK_UNROLL=1" --tokens 8192,16384,24576,32768,65536 --iters 20
tar czf $OUT/logs.tgz -C /tmp o
