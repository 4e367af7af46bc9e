#!/bin/bash
# Session 41, call H: call G (auto and unroll forms: op tests, GDN bench over 1/4/16 sequences, fla), then the
# default form's op, backend, stitch, model and engine tests on this commit's binary.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_WALK_PAIR=auto TT=60 gtest cuda_gdn_chunked_test "" _auto
HYPIC_CUDA_GDN_WALK_UNROLL=1 TT=60 gtest cuda_gdn_chunked_test "" _unroll
date +%T
gdn_bench "a b" "default:HYPIC_CUDA_GDN_OVERLAP=1 unroll:HYPIC_CUDA_GDN_WALK_UNROLL=1" --tokens 8192,32768 --iters 20
gdn_bench "a" "seqs_default:HYPIC_CUDA_GDN_OVERLAP=1 seqs_auto:HYPIC_CUDA_GDN_WALK_PAIR=auto seqs_auto_unroll:HYPIC_CUDA_GDN_WALK_PAIR=auto,HYPIC_CUDA_GDN_WALK_UNROLL=1" --tokens 8192,32768 --gdn-seqs 1,4,16 --iters 20
date +%T
fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
date +%T
gtest cuda_backend_ops_test "" ""
gtest cuda_stitch_ops_test "" ""
gtest cuda_model_test "" ""
TT=240 gtest engine_model_test '*cuda*' ""
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
