#!/bin/bash
# Session 41, call J: the final defaults (two warpgroups a walk block where one-warpgroup blocks would be more than the
# SMs; the one-warpgroup loop unrolled where the walk does not run beside prep): op, backend, stitch, model and engine
# tests; the GDN bench over 1 and 16 sequences, default and prep-before-walk (OVERLAP=0), twice; fla in the same call.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_OVERLAP=0 TT=60 gtest cuda_gdn_chunked_test "" _seq
date +%T
gdn_bench "a b" "default:HYPIC_CUDA_GDN_OVERLAP=1 seq:HYPIC_CUDA_GDN_OVERLAP=0" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
date +%T
FT=100 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
date +%T
gtest cuda_backend_ops_test "" ""
gtest cuda_stitch_ops_test "" ""
gtest cuda_model_test "" ""
TT=200 gtest engine_model_test '*cuda*' ""
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
