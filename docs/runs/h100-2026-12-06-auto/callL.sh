#!/bin/bash
# Session 42, call L: the long-sequence rule as the default (two warpgroups beside prep, unrolled, from 16k tokens
# with T). The op test under the default (its check that a 16k-token, 32-head launch with T overlaps) and under
# PAIR=0; the GDN bench at 8k..32k, default against PAIR=0; fla; Nsight Compute on gdn_prep_sm90 and the walk (8k,
# prep then walk: per-instruction stall samples); on an H200 also RAG TTFT and decode at the 35B-A3B shape; the
# model and engine tests. Pack cuda_gdn_chunked_test hypic_bench_kernels cuda_model_test engine_model_test
# hypic_bench_ttft hypic_bench_model.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_WALK_PAIR=0 TT=60 gtest cuda_gdn_chunked_test "" _pair0
date +%T
gdn_bench "a b" "default:HYPIC_CUDA_GDN_OVERLAP=1 pair0:HYPIC_CUDA_GDN_WALK_PAIR=0" --tokens 8192,16384,32768 --gdn-seqs 1,16 --iters 20
date +%T
FT=120 fla_gdn --tokens 8192,16384,32768 --gdn-seqs 1,16 --iters 20
date +%T
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for k in prep walk; do
  HYPIC_CUDA_GDN_OVERLAP=0 timeout 100 $NCU --set full --import-source no -k regex:gdn_${k} --launch-skip 2 --launch-count 1 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' -o $O/ncu_$k \
    $B/hypic_bench_kernels --only gdn --tokens 8192 --iters 1 > $O/ncu_${k}_run.txt 2>&1
  echo "ncu $k exit $?"
  timeout 60 $NCU -i $O/ncu_$k.ncu-rep --page details > $O/ncu_${k}_details.txt 2>&1
  timeout 60 $NCU -i $O/ncu_$k.ncu-rep --page source --csv --print-source sass > $O/ncu_${k}_sass.csv 2>&1
  grep -E "  Duration|Issued Ipc|Executed Instructions  |Warp Cycles Per Issued|DRAM Throughput|Achieved Occupancy" $O/ncu_${k}_details.txt | head -8
  wc -c $O/ncu_${k}_sass.csv
done
date +%T
if grep -q H200 $O/device.txt; then
  timeout 200 $B/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 > $O/bench_ttft_rag.json 2>&1
  echo "ttft exit $?"; grep -E '"mode"|p50|p90' $O/bench_ttft_rag.json | head -20
  date +%T
  timeout 150 $B/hypic_bench_model --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 --decode 64 --batch 1,8,32 --batch-steps 24 > $O/bench_model_decode.json 2>&1
  echo "model exit $?"; tail -c 1500 $O/bench_model_decode.json
  date +%T
fi
gtest cuda_model_test "" ""
TT=200 gtest engine_model_test '*cuda*' ""
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
