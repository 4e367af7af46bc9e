#!/bin/bash
# Issue 12 goal 5: the stitch chain's row steps from span operators (HYPIC_CUDA_CHAIN_SPANS=wy) against token by token:
# the op test (every form, both passes), the chain bench twice, the engine tests under wy, and on an H200 the RAG TTFT
# under both; then (H200) the decode status of callI.
# Pack: TARGETS="cuda_stitch_ops_test hypic_bench_kernels hypic_bench_model hypic_bench_ttft cuda_model_test engine_model_test cuda_decode_ops_test engine_batch_model_test" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
H200=0; grep -q H200 $O/device.txt && H200=1
TT=150 gtest cuda_stitch_ops_test "" ""
for r in 1 2; do
  timeout 60 $B/hypic_bench_kernels --only chain --iters 20 > $O/chain_$r.json 2>&1
  grep -oE '"variant": "[^"]+", "steps": [0-9]+, "rows": [0-9]+, "ms": [0-9.]+' $O/chain_$r.json
done
date +%T
( export HYPIC_CUDA_CHAIN_SPANS=wy; TT=200 gtest engine_model_test "" _wy; TT=120 gtest cuda_model_test "" _wy )
date +%T
if [ $H200 = 1 ]; then
  for f in tokens:X=1 wy:HYPIC_CUDA_CHAIN_SPANS=wy; do
    [ $(left 560) -gt 100 ] || break
    env ${f#*:} timeout 100 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/ttft_${f%%:*}.json 2>$O/ttft_${f%%:*}.err
    echo "ttft ${f%%:*}:"; grep -E '"mode"|p50|p90' $O/ttft_${f%%:*}.json | head -20; grep hypic $O/ttft_${f%%:*}.err | tail -8
  done
  for f in default:X=1 late:HYPIC_CUDA_QK_PRE_ANGLES=0; do
    [ $(left 560) -gt 60 ] || break
    DT=100 dec b_${f%%:*} ${f#*:} --decode 0 --batch 1,8,32 --batch-steps 24
  done
fi
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
