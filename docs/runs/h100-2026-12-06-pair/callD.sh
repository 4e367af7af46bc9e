#!/bin/bash
# Session 40, call D (minimal): the GDN op test under the two-warpgroup walk, the GDN bench default / pair, fla.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
HYPIC_CUDA_GDN_WALK_PAIR=1 timeout 45 $B/cuda_gdn_chunked_test > $O/gdn_test_pair.txt 2>&1; echo "test pair: exit $? $(grep -cE '^\[       OK' $O/gdn_test_pair.txt) ok"
grep -E "Failure$" -A3 $O/gdn_test_pair.txt | head -6
for k in a b c; do for f in default:HYPIC_CUDA_GDN_OVERLAP=1 pair:HYPIC_CUDA_GDN_WALK_PAIR=1; do
  n=${f%%:*}
  env ${f#*:} timeout 30 $B/hypic_bench_kernels --only gdn --tokens 8192,32768 --iters 20 > $O/bench_${n}_$k.json 2>&1
  echo "$n $k: $(grep -oE '"tokens": [0-9]+, "variant": "[a-z+]+", "ms": [0-9.]+' $O/bench_${n}_$k.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //' | tr '\n' ' ')"
done; done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .deps/whl/*.whl > /dev/null 2>&1
PYTHONPATH=/tmp/site timeout 100 python3 tools/bench/bench_peers.py --ops gdn --tokens 8192,32768 --iters 20 > $O/bench_peers_gdn.json 2>&1
grep -E '"ms"|variant|error' $O/bench_peers_gdn.json | paste - - | head -10
HYPIC_CUDA_GDN_WALK_PAIR=all timeout 45 $B/cuda_gdn_chunked_test > $O/gdn_test_pair_all.txt 2>&1; echo "test pair_all: exit $? $(grep -cE '^\[       OK' $O/gdn_test_pair_all.txt) ok"
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
