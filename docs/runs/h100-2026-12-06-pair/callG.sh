#!/bin/bash
# Session 40, call G: blocks of two warpgroups where one-warpgroup blocks would be more than the SMs
# (HYPIC_CUDA_GDN_WALK_PAIR=auto): the GDN op test under it, the GDN bench over 1, 4 and 16 sequences under the
# default and auto, fla over 1 and 16 sequences in the same call.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
HYPIC_CUDA_GDN_WALK_PAIR=auto TT=60 gtest cuda_gdn_chunked_test "" _auto
gdn_bench "a" "default:HYPIC_CUDA_GDN_OVERLAP=1 auto:HYPIC_CUDA_GDN_WALK_PAIR=auto" --tokens 8192,32768 --gdn-seqs 1,4,16 --iters 20
FT=100 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
