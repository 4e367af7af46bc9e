#!/bin/bash
# Session 38, call 1: GDN op tests under every form, then the GDN bench under each form, fla in the same call.
export NCCL_NVLS_ENABLE=0
R=$PWD/.deps/root; mkdir -p $R; for f in .deps/debs/*.deb; do dpkg -x $f $R; done
rm -rf /tmp/gpubin; tar xJf .gpubin/gpubin.tar.xz -C /tmp
src=$(cat /tmp/gpubin/source_dir); mkdir -p $(dirname $src); [ -e $src ] || ln -s $PWD $src
export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:/tmp/gpubin; B=/tmp/gpubin
O=/tmp/o; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/device.txt
W=HYPIC_CUDA_GDN_PREP_SM90=1; TWO=HYPIC_CUDA_GDN_OVERLAP_STAGES=2; UW=HYPIC_CUDA_GDN_U_IN_WALK=1; SEQ=HYPIC_CUDA_GDN_OVERLAP=0
forms="default:HYPIC_CUDA_GDN_OVERLAP=1 prep_wg:$W two:$TWO prep_wg_two:$W+$TWO u_walk:$UW sequential:$SEQ prep_wg_seq:$W+$SEQ u_walk_seq:$UW+$SEQ"
vars() { echo "${1#*:}" | tr + ' '; }
for f in $forms; do
  n=${f%%:*}
  env $(vars $f) timeout ${TT:-90} $B/cuda_gdn_chunked_test > $O/gdn_test_$n.txt 2>&1; echo "test $n: exit $? $(grep -cE '^\[       OK' $O/gdn_test_$n.txt) ok $(grep -E '^\[  FAILED  \] [0-9]' $O/gdn_test_$n.txt)"
  grep -E "Failure$" -A3 $O/gdn_test_$n.txt | head -6
done
tar czf $OUT/logs.tgz -C /tmp o
for k in ${REPS:-a b}; do for f in $forms; do
  n=${f%%:*}
  env $(vars $f) timeout 60 $B/hypic_bench_kernels --only gdn --tokens 8192,32768 --iters 20 > $O/bench_${n}_$k.json 2>&1
  echo "$n $k: $(grep -oE '"tokens": [0-9]+, "variant": "[a-z+]+", "ms": [0-9.]+' $O/bench_${n}_$k.json | sed -E 's/"tokens": //; s/"variant": //; s/"ms": //' | tr '\n' ' ')"
done; tar czf $OUT/logs.tgz -C /tmp o; done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .deps/whl/*.whl > /dev/null 2>&1
PYTHONPATH=/tmp/site timeout 150 python3 tools/bench/bench_peers.py --ops gdn --tokens 8192,32768 --iters 20 > $O/bench_peers_gdn.json 2>&1
grep -E '"ms"|variant|error' $O/bench_peers_gdn.json | paste - - | head -10
tar czf $OUT/logs.tgz -C /tmp o
