#!/bin/bash
# Nsight Compute on the stitch chain's row steps: the token-by-token chain kernel (row spans only), the same steps from
# span operators, and the span operators' kernel; details and the top stalls by SASS line.
. tools/bench/gpu_env.sh
T0=$(date +%s); left() { echo $(( ${1} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for spec in tok:state_chain_wg:20 wy:state_chain_wg:36 ops:span_operators:4; do
  [ $(left 230) -gt 40 ] || break
  IFS=: read n k skip <<< "$spec"
  timeout 70 $NCU --set full --import-source yes -k regex:$k --launch-skip $skip --launch-count 1 \
    -o $O/ncu_$n $B/hypic_bench_kernels --only chain --iters 1 > $O/ncu_${n}_run.txt 2>&1
  timeout 30 $NCU -i $O/ncu_$n.ncu-rep --page details > $O/ncu_${n}_details.txt 2>&1
  timeout 30 $NCU -i $O/ncu_$n.ncu-rep --page source --csv --print-source sass > $O/ncu_${n}_sass.csv 2>&1
  echo "ncu $n:"; grep -E "  Duration|Issued Ipc|Executed Instructions  |Warp Cycles Per Issued|Registers Per|Grid Size|Block Size|L2 Hit|Achieved Occ" $O/ncu_${n}_details.txt | head -10
  python3 tools/bench/ncu_top_stalls.py $O/ncu_${n}_sass.csv --top 14 2>&1 | head -16
  rm -f $O/ncu_$n.ncu-rep
done
tar czf $OUT/logs.tgz -C /tmp o
