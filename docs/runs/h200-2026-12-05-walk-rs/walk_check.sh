#!/bin/bash
# temporary device script (not committed)
export NCCL_NVLS_ENABLE=0
R=$PWD/.deps/root; mkdir -p $R; for f in .deps/debs/*.deb; do dpkg -x $f $R; done
rm -rf /tmp/gpubin; tar xJf .gpubin/gpubin.tar.xz -C /tmp
src=$(cat /tmp/gpubin/source_dir); mkdir -p $(dirname $src); [ -e $src ] || ln -s $PWD $src
export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:/tmp/gpubin; B=/tmp/gpubin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
t() { local n=$1 lim=$2; shift 2; timeout $lim $B/$n "$@" > $OUT/$n.txt 2>&1; echo "$n: exit $?"; grep -E "^\[  PASSED|^\[  FAILED|Failure$" $OUT/$n.txt | head -8; }
t cuda_gdn_chunked_test 120
t cuda_backend_ops_test 200
t cuda_stitch_ops_test 120
t cuda_model_test 300
for rs in 1 0 1 0; do HYPIC_CUDA_GDN_RS=$rs timeout 60 $B/hypic_bench_kernels --only gdn --tokens 8192,32768 --iters 20 > $OUT/bench_gdn_rs${rs}_$((i++)).json 2>&1; echo "RS=$rs"; grep -oE '"tokens": [0-9]+, "variant": "[a-z+]+", "ms": [0-9.]+' $OUT/bench_gdn_rs${rs}_$((i-1)).json; done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .deps/whl/*.whl > /dev/null 2>&1
PYTHONPATH=/tmp/site timeout 200 python3 tools/bench/bench_peers.py --ops gdn --tokens 8192,32768 --iters 20 > $OUT/peers.json 2>&1
grep -E '"ms"|variant|error|device' $OUT/peers.json | paste - - | head -10
for rs in 1 0; do HYPIC_CUDA_GDN_RS=$rs timeout 150 $B/hypic_bench_model --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 --decode 0 --prefill-repeats 4 > $OUT/prefill_rs$rs.json 2>$OUT/prefill_rs$rs.txt; echo "prefill RS=$rs exit $?"; grep -A2 "\"prefill\"" $OUT/prefill_rs$rs.json | head -3; done
t engine_model_test 420 --gtest_filter='*cuda*'
