#!/bin/bash
# Prepared in the forty-third session, not run (no device time left). A lead of 5% of the chunks prepared before the
# walk measured 2-3% faster at 8k for one sequence without T (callT, callU); before making a rule of it: the op test
# under it, and the bench over the lengths where it would apply, twice, against no lead. On an H200 also the GDN table
# with fla, RAG TTFT and decode (the figures issue 12 asks for on that card, none since the thirty-seventh session).
# Pack: TARGETS="cuda_gdn_chunked_test cuda_model_test hypic_bench_kernels hypic_bench_ttft hypic_bench_model" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
HYPIC_CUDA_GDN_OVERLAP_LEAD=5 TT=60 gtest cuda_gdn_chunked_test "" _lead5
gdn_bench "a b" "lead0:X=0 lead3:HYPIC_CUDA_GDN_OVERLAP_LEAD=3 lead5:HYPIC_CUDA_GDN_OVERLAP_LEAD=5 lead8:HYPIC_CUDA_GDN_OVERLAP_LEAD=8" --tokens 4096,8192,16384,32768 --gdn-seqs 1 --iters 20
if grep -q H200 $O/device.txt; then
  TT=60 gtest cuda_gdn_chunked_test "" ""
  TT=200 gtest cuda_model_test "" ""
  timeout 90 $B/hypic_bench_kernels --only gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 > $O/bench_h200.json 2>&1
  FT=150 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
  timeout 200 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/bench_ttft_rag.json 2>&1
  echo "ttft exit $?"
  timeout 150 $B/hypic_bench_model --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 --decode 64 --batch 1,8,32 --batch-steps 24 > $O/bench_model_decode.json 2>&1
  echo "model exit $?"
fi
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
