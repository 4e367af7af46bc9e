#!/bin/bash
# Session 41, call I: the new defaults (two warpgroups a walk block where one-warpgroup blocks would be more than the
# SMs; the loop unrolled where the launch builds T): the op, backend, stitch, model and engine tests under them; the
# GDN bench default / the previous default (PAIR=0, UNROLL=0) over 1 and 16 sequences, twice; the RAG TTFT bench
# under both. Two warpgroups a block beside prep (=1), its loop rolled and unrolled (UNROLL=1 now takes those
# too). Prep before the walk (OVERLAP=0), the loop rolled and unrolled.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_WALK_PAIR=all HYPIC_CUDA_GDN_WALK_UNROLL=1 TT=60 gtest cuda_gdn_chunked_test "" _pair_all_unroll
date +%T
gdn_bench "a b" "default:HYPIC_CUDA_GDN_OVERLAP=1 previous:HYPIC_CUDA_GDN_WALK_PAIR=0,HYPIC_CUDA_GDN_WALK_UNROLL=0" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
gdn_bench "a" "seq_rolled:HYPIC_CUDA_GDN_OVERLAP=0,HYPIC_CUDA_GDN_WALK_UNROLL=0 seq_unrolled:HYPIC_CUDA_GDN_OVERLAP=0,HYPIC_CUDA_GDN_WALK_UNROLL=1" --tokens 8192,32768 --iters 20
gdn_bench "a" "pair:HYPIC_CUDA_GDN_WALK_PAIR=1 pair_unroll:HYPIC_CUDA_GDN_WALK_PAIR=1,HYPIC_CUDA_GDN_WALK_UNROLL=1" --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
date +%T
gtest cuda_backend_ops_test "" ""
gtest cuda_stitch_ops_test "" ""
gtest cuda_model_test "" ""
TT=240 gtest engine_model_test '*cuda*' ""
date +%T
for f in default: previous:HYPIC_CUDA_GDN_WALK_PAIR=0,HYPIC_CUDA_GDN_WALK_UNROLL=0; do
  env $(tr , " " <<< "${f#*:}") timeout 120 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/bench_ttft_rag_${f%%:*}.json 2>&1
  echo "ttft ${f%%:*}: exit $?"; grep -E '"p50|p50' $O/bench_ttft_rag_${f%%:*}.json | head -6
  date +%T
done
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
