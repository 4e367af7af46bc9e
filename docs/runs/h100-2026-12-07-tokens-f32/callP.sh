#!/bin/bash
# Issue 12 goals 5 and 3. Everywhere: the stitch chain's token-by-token row steps with q and k in fp32 and each token's
# q.k and e^g formed once a stage (this tree) against main's form (the bench binary of 91cb4dc, carried xz'd in the
# call folder): the op test (every chain form against the CPU rule) and the chain bench alternating old and new.
# On an H200 then callN's status (batch 1/8/32, the four opt-in forms of the batch-1 step, the RAG TTFT); elsewhere
# Nsight Compute on the new row-spans-only chain kernel and the model and engine tests.
# Pack: TARGETS="cuda_stitch_ops_test hypic_bench_kernels cuda_model_test engine_model_test cuda_decode_ops_test hypic_bench_model engine_batch_model_test hypic_bench_ttft" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
( while sleep 5; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $O/device.txt
H200=0; grep -q H200 $O/device.txt && H200=1
D=$(dirname "$0")
xz -dc $D/hypic_bench_kernels_old.xz > $B/hypic_bench_kernels_old && chmod +x $B/hypic_bench_kernels_old
TT=150 gtest cuda_stitch_ops_test "" ""
for r in 1 2 3; do for v in old new; do
  b=$B/hypic_bench_kernels; [ $v = old ] && b=$B/hypic_bench_kernels_old
  timeout 60 $b --only chain --iters 20 > $O/chain_${v}_$r.json 2>&1
  echo "$v $r: $(grep -oE '"variant": "[^"]+", "steps": [0-9]+, "rows": [0-9]+, "ms": [0-9.]+' $O/chain_${v}_$r.json |
    sed -E 's/"variant": //; s/, "steps": [0-9]+, "rows": [0-9]+, "ms"//' | tr '\n' ' ')"
done; done
date +%T
if [ $H200 = 1 ]; then
  DT=120 dec batches_default X=1 --decode 0 --batch 1,8,32 --batch-steps 24; date +%T
  for f in d:X=1 fold:HYPIC_CUDA_DECODE_ATTN_FOLD=1 trip:HYPIC_CUDA_COMBINE_ONE_TRIP=1 recf:HYPIC_CUDA_GDN_REC_TRIGGER_FIRST=1 one:HYPIC_CUDA_MOE_ONE_LAUNCH=1 d2:X=1; do
    [ $(left 560) -gt 150 ] || break
    DT=45 dec one_${f%%:*} ${f#*:} --decode 0 --batch 1 --batch-steps 24
  done; date +%T
  if [ $(left 560) -gt 60 ]; then
    timeout $(left 555) $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/ttft.json 2>$O/ttft.err
    grep -E '"mode"|p50|p90' $O/ttft.json | head -20
  fi
else
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  timeout 70 $NCU --set full --import-source yes -k regex:state_chain_wg --launch-skip 20 --launch-count 1 \
    -o $O/ncu_f32 $B/hypic_bench_kernels --only chain --iters 1 > $O/ncu_f32_run.txt 2>&1
  timeout 30 $NCU -i $O/ncu_f32.ncu-rep --page details > $O/ncu_f32_details.txt 2>&1
  timeout 30 $NCU -i $O/ncu_f32.ncu-rep --page source --csv --print-source sass > $O/ncu_f32_sass.csv 2>&1
  grep -E "  Duration|Issued Ipc|Executed Instructions  |Registers Per|Issue Slots Busy" $O/ncu_f32_details.txt | head -8
  python3 tools/bench/ncu_top_stalls.py $O/ncu_f32_sass.csv --top 10 2>&1 | head -12
  rm -f $O/ncu_f32.ncu-rep; date +%T
  TT=200 gtest engine_model_test "" ""; TT=120 gtest cuda_model_test "" ""
fi
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
