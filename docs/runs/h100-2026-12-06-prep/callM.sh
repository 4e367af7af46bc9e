#!/bin/bash
# Session 42, call M: gdn_prep on Hopper with L and Aqk in one pass, g/beta requested before the tile copies, the
# diagonal inverse's next row read under this row's sums, and W/U's two halves issued together. Op test (default,
# prep before the walk, the mma.sync prep); the GDN bench, the previous commit's binary (old) against this one (new),
# interleaved, twice; fla; Nsight Compute on the new prep; the model and engine tests.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
TT=60 gtest cuda_gdn_chunked_test "" ""
HYPIC_CUDA_GDN_OVERLAP=0 TT=60 gtest cuda_gdn_chunked_test "" _seq
HYPIC_CUDA_GDN_PREP_SM90=0 TT=60 gtest cuda_gdn_chunked_test "" _mma
date +%T
for k in a b; do for f in old new; do
  bin=$B/hypic_bench_kernels; [ $f = old ] && bin=$B/hypic_bench_kernels_old
  timeout 60 $bin --only gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 > $O/bench_${f}_$k.json 2>&1
  echo "$f $k:"; grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' $O/bench_${f}_$k.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //'
done; done
for f in old new; do
  bin=$B/hypic_bench_kernels; [ $f = old ] && bin=$B/hypic_bench_kernels_old
  HYPIC_CUDA_GDN_OVERLAP=0 timeout 60 $bin --only gdn --tokens 8192,32768 --iters 20 > $O/bench_${f}_seq.json 2>&1
  echo "$f prep then walk:"; grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' $O/bench_${f}_seq.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //'
done
date +%T
FT=100 fla_gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20
date +%T
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
HYPIC_CUDA_GDN_OVERLAP=0 timeout 100 $NCU --set full --import-source no -k regex:gdn_prep --launch-skip 2 --launch-count 1 \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' -o $O/ncu_prep \
  $B/hypic_bench_kernels --only gdn --tokens 8192 --iters 1 > $O/ncu_prep_run.txt 2>&1
timeout 60 $NCU -i $O/ncu_prep.ncu-rep --page details > $O/ncu_prep_details.txt 2>&1
timeout 60 $NCU -i $O/ncu_prep.ncu-rep --page source --csv --print-source sass > $O/ncu_prep_sass.csv 2>&1
grep -E "  Duration|Issued Ipc|Executed Instructions  |Warp Cycles Per Issued|DRAM Throughput" $O/ncu_prep_details.txt | head -6
date +%T
gtest cuda_model_test "" ""
TT=200 gtest engine_model_test '*cuda*' ""
date +%T
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
