#!/bin/bash
# Issue 12 goal 2 on the H200 (same warm machine as callA, main's GDN kernels): the op test, hypic's GDN chunked
# prefill twice, fla 0.6.0 in the same call, and prep then walk once.
. tools/bench/gpu_env.sh; nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt; TT=120 gtest cuda_gdn_chunked_test "" ""; gdn_bench "1 2" "base:X=0" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20; FT=150 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20; HYPIC_CUDA_GDN_OVERLAP=0 gdn_bench "1" "seq:X=0" --tokens 8192,32768 --iters 20; tar czf $OUT/logs.tgz -C /tmp o
