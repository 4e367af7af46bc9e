#!/usr/bin/env bash
# The whole GPU check of docs/benchmarks.md on one H200 machine, in stages that each fit one device call:
#   tools/bench/gpu_full_check.sh test   # unpack .deps, configure, build, op harness + model + engine tests, CLI check
#   tools/bench/gpu_full_check.sh bench  # kernel benches, peers (fla, SDPA), whole-model and TTFT benches
# Run from the repository root with .deps (and .whl for the peers) carried; results also go to $OUT when set.
set -uo pipefail
stage=${1:?usage: gpu_full_check.sh test|bench}
export NCCL_NVLS_ENABLE=0
B=build-gpu
O=${OUT:-/tmp/hypic-gpu-out}
mkdir -p "$O"
D=$PWD/.deps R=$PWD/.deps/root
L=$R/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
step() { echo "== $* ($(date +%T))"; }

if [ ! -f $B/CMakeCache.txt ]; then
  step unpack and configure
  mkdir -p "$R" && for f in "$D"/debs/*.deb; do dpkg -x "$f" "$R"; done
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/usr/bin/pkgconf "$@"\n' "$L" "$R" > "$D/pkg-config" && chmod +x "$D/pkg-config"
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$R/usr -DPKG_CONFIG_EXECUTABLE=$D/pkg-config \
    "-DCMAKE_CXX_FLAGS=-isystem $R/usr/include" > "$O/configure.log" || { tail -20 "$O/configure.log"; exit 1; }
fi
targets="hypic cuda_backend_ops_test cuda_model_test hypic_bench_kernels hypic_bench_model"
for t in cuda_engine_test cuda_attention_prefill_test cuda_gdn_chunked_test hypic_bench_ttft; do
  grep -rqs "$t" --include=CMakeLists.txt tests tools && targets="$targets $t"
done
step build $targets
cmake --build $B -j16 --target $targets > "$O/build.log" 2>&1 || { grep -E "error|Error" "$O/build.log" | head -30; exit 1; }

run_test() {  # name, binary: runs a gtest binary if it was built, brief summary to stdout
  local bin; bin=$(find $B -name "$1" -type f -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "$1: not built"; return; }
  step "$1"
  "$bin" > "$O/$1.txt" 2>&1; echo "$1: exit $?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|error:" "$O/$1.txt" | head -20
}

if [ "$stage" = test ]; then
  for t in cuda_backend_ops_test cuda_attention_prefill_test cuda_gdn_chunked_test cuda_model_test cuda_engine_test; do
    run_test $t
  done
  step CLI check
  tools/bench/gpu_cli_check.sh $B 2>&1 | tee "$O/cli_check.txt" | tail -8
elif [ "$stage" = bench ]; then
  step kernels
  $B/tools/bench/hypic_bench_kernels --tokens 8192,32768 --iters 20 | tee "$O/bench_kernels.json"
  if ls .whl/*.whl > /dev/null 2>&1; then
    step peers
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
    PYTHONPATH=/tmp/site python3 tools/bench/bench_peers.py --tokens 8192,32768 --iters 20 | tee "$O/bench_peers.json"
  fi
  step model
  $B/tools/bench/hypic_bench_model --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights \
    --prefill 8192 --decode 64 | tee "$O/bench_model.json"
  if [ -x $B/tools/bench/hypic_bench_ttft ]; then
    step ttft
    $B/tools/bench/hypic_bench_ttft --config tools/bench/configs/qwen3_5_35b_a3b.json --requests 8 | tee "$O/bench_ttft.json"
  fi
else
  echo "unknown stage $stage"; exit 2
fi
step done
