#!/bin/bash
# What bounds the stitch chain's product step: the chain bench (with the products over one shared operator and over
# one column tile a head), twice; Nsight Compute on the products-only chain kernel.
# Pack: TARGETS="hypic_bench_kernels" tools/bench/pack_gpu_binaries.sh build
. tools/bench/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
for r in 1 2; do
  timeout 60 $B/hypic_bench_kernels --only chain --iters 20 > $O/chain_$r.json 2>&1
  grep -oE '"variant": "[^"]+", "steps": [0-9]+, "rows": [0-9]+, "ms": [0-9.]+' $O/chain_$r.json
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout 70 $NCU --set full --import-source yes -k regex:state_chain_wg --launch-skip 12 --launch-count 1 \
  -o $O/ncu_prod $B/hypic_bench_kernels --only chain --iters 1 > $O/ncu_prod_run.txt 2>&1
timeout 30 $NCU -i $O/ncu_prod.ncu-rep --page details > $O/ncu_prod_details.txt 2>&1
timeout 30 $NCU -i $O/ncu_prod.ncu-rep --page source --csv --print-source sass > $O/ncu_prod_sass.csv 2>&1
grep -E "  Duration|Issued Ipc|Executed Instructions  |Warp Cycles Per Issued|L2 Hit|Mem Busy|Max Bandwidth|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Issue Slots Busy" $O/ncu_prod_details.txt | head -14
python3 tools/bench/ncu_top_stalls.py $O/ncu_prod_sass.csv --top 16 2>&1 | head -18
rm -f $O/ncu_prod.ncu-rep; tar czf $OUT/logs.tgz -C /tmp o
