#!/bin/bash
# Session 40, call F: the two-warpgroup walk running free (no block barrier a chunk): its op tests, the GDN bench
# default / pair and fla in the same call; then the default form's op, backend, stitch, model and engine tests.
. tools/bench/gpu_env.sh
( while sleep 10; do tar czf $OUT/logs.tgz -C /tmp o 2>/dev/null; done ) & TP=$!
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
t() { local n=$1 f=$2 tag=$3; shift 3; timeout ${TT:-120} $B/$n ${f:+--gtest_filter=$f} "$@" > $O/$n$tag.txt 2>&1; echo "$n$tag: exit $? $(grep -cE '^\[       OK' $O/$n$tag.txt) ok $(grep -E '^\[  FAILED  \] [0-9]' $O/$n$tag.txt)"; grep -E "Failure$" -A3 $O/$n$tag.txt | head -6; }
HYPIC_CUDA_GDN_WALK_PAIR=1 TT=45 t cuda_gdn_chunked_test "" _pair
HYPIC_CUDA_GDN_WALK_PAIR=all TT=45 t cuda_gdn_chunked_test "" _pair_all
for k in a b; do for f in default:HYPIC_CUDA_GDN_OVERLAP=1 pair:HYPIC_CUDA_GDN_WALK_PAIR=1 pair_all:HYPIC_CUDA_GDN_WALK_PAIR=all; do
  n=${f%%:*}
  env ${f#*:} timeout 30 $B/hypic_bench_kernels --only gdn --tokens 8192,32768 --iters 20 > $O/bench_${n}_$k.json 2>&1
  echo "$n $k: $(grep -oE '"tokens": [0-9]+, "variant": "[a-z+]+", "ms": [0-9.]+' $O/bench_${n}_$k.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //' | tr '\n' ' ')"
done; done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .deps/whl/*.whl > /dev/null 2>&1
PYTHONPATH=/tmp/site timeout 100 python3 tools/bench/bench_peers.py --ops gdn --tokens 8192,32768 --iters 20 > $O/bench_peers_gdn.json 2>&1
grep -E '"ms"|variant|error' $O/bench_peers_gdn.json | paste - - | head -10
t cuda_gdn_chunked_test "" ""
t cuda_backend_ops_test "" ""
t cuda_stitch_ops_test "" ""
t cuda_model_test "" ""
TT=300 t engine_model_test '*cuda*' ""
kill $TP; tar czf $OUT/logs.tgz -C /tmp o
