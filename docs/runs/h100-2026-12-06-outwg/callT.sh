#!/bin/bash
# gdn_prep_sm90 scaling L and Aqk by split decays (Ef: one product an entry instead of an exponential): op tests, the
# bench against the previous commit's binary (hypic_bench_kernels_old) interleaved, the walk unrolled beside prep and
# a lead with the outputs' warpgroup, fla in the same call, model and engine CUDA tests. On an H200 also RAG TTFT and
# decode.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $O/device.txt
TT=90 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_OVERLAP=0 TT=90 gtest cuda_gdn_chunked_test "" _seq
for r in a b; do for f in old new; do
  bin=$B/hypic_bench_kernels; [ $f = old ] && bin=$B/hypic_bench_kernels_old
  timeout 90 $bin --only gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 > $O/bench_${f}_$r.json 2>&1
  echo "$f $r:"; grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' $O/bench_${f}_$r.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //'
done; done
gdn_bench "a" "unroll:HYPIC_CUDA_GDN_WALK_UNROLL=1 lead5:HYPIC_CUDA_GDN_OVERLAP_LEAD=5 lead15:HYPIC_CUDA_GDN_OVERLAP_LEAD=15" --tokens 8192,32768 --gdn-seqs 1 --iters 20
FT=120 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
TT=200 gtest cuda_model_test "" ""
TT=240 gtest engine_model_test "*cuda*" ""
if grep -q H200 $O/device.txt; then
  timeout 200 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/bench_ttft_rag.json 2>&1
  echo "ttft exit $?"; grep -E '"p50|ratio' $O/bench_ttft_rag.json | head
  timeout 150 $B/hypic_bench_model --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 --decode 64 --batch 1,8,32 --batch-steps 24 > $O/bench_model_decode.json 2>&1
  echo "model exit $?"; grep -E 'ms_per|fraction' $O/bench_model_decode.json | head
fi
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
