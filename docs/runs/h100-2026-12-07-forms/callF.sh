#!/bin/bash
# Issue 12 goal 3: the norm kernel's angles before its wait as the default. Its op test (both forms), the model and
# engine tests; batch 1 and 8 (H200: and 32) under the default and HYPIC_CUDA_QK_PRE_ANGLES=0, interleaved; on an
# H200 the RAG TTFT.
# Pack: TARGETS="cuda_decode_ops_test hypic_bench_model engine_batch_model_test cuda_model_test engine_model_test hypic_bench_ttft" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
H200=0; BS=1,8; grep -q H200 $O/device.txt && H200=1 && BS=1,8,32
TT=150 gtest cuda_decode_ops_test "" ""
TT=90 gtest engine_batch_model_test "" ""
for r in 1 2; do
  [ $(left 400) -gt 60 ] || break
  for f in default:X=1 late:HYPIC_CUDA_QK_PRE_ANGLES=0; do DT=120 dec b_${f%%:*}_$r ${f#*:} --decode 0 --batch $BS --batch-steps 24; done; date +%T
done
if [ $H200 = 1 ] && [ $(left 400) -gt 100 ]; then
  timeout 90 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/h200_ttft.json 2>$O/h200_ttft.err
  grep -E '"mode"|p50|p90' $O/h200_ttft.json | head -20
fi
[ $(left 400) -gt 120 ] && TT=120 gtest cuda_model_test "" ""
[ $(left 400) -gt 150 ] && TT=150 gtest engine_model_test "" ""
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
