#!/bin/bash
# Branch gdn-wu-ux (prepared in the forty-fourth session, run in the forty-fifth): U back in the state's X group
# (HYPIC_CUDA_GDN_WU_UX=1: U^T = V^T (A diag(beta))^T at the head of the state's X group, -W alone on the second
# warpgroup): the op test under it wherever W and U are formed in the walk; the bench of the default, of it where the
# default forms W and U in the walk, and of it everywhere, interleaved, twice; fla in the same call.
# Pack: TARGETS="cuda_gdn_chunked_test hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
HYPIC_CUDA_GDN_WU_IN_WALK=1 HYPIC_CUDA_GDN_WU_UX=1 TT=60 gtest cuda_gdn_chunked_test "" _ux
if grep -q "PASSED  \] 7 tests" $O/cuda_gdn_chunked_test_ux.txt; then
  gdn_bench "a b" "default:X=0 ux:HYPIC_CUDA_GDN_WU_UX=1 ux_all:HYPIC_CUDA_GDN_WU_IN_WALK=1,HYPIC_CUDA_GDN_WU_UX=1" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
fi
FT=150 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
