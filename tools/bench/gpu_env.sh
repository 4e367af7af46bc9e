# Sourced by a device call's script, from the repository root on the device machine: unpacks the carried Debian
# packages (.deps/debs) and prebuilt binaries (.gpubin/gpubin.tar.xz, from pack_gpu_binaries.sh), links the source
# path the tests were built in to this tree (they find their fixtures there), and sets B (the binaries), O (the
# output folder, /tmp/o) and LD_LIBRARY_PATH. NCCL_NVLS_ENABLE=0 as on every device call.
export NCCL_NVLS_ENABLE=0
R=$PWD/.deps/root
mkdir -p "$R" && for f in .deps/debs/*.deb; do dpkg -x "$f" "$R"; done
rm -rf /tmp/gpubin && tar xJf .gpubin/gpubin.tar.xz -C /tmp
src=$(cat /tmp/gpubin/source_dir)
mkdir -p "$(dirname "$src")" && { [ -e "$src" ] || ln -s "$PWD" "$src"; }
export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:/tmp/gpubin
B=/tmp/gpubin
O=/tmp/o
mkdir -p "$O"

# gtest NAME FILTER TAG: runs test program NAME (gtest filter FILTER, empty for all) into $O/NAME$TAG.txt under a
# timeout of ${TT:-120} s, and prints its exit code, OK count, failed count and first failures.
gtest() {
  local n=$1 f=$2 tag=$3
  timeout "${TT:-120}" "$B/$n" ${f:+--gtest_filter=$f} > "$O/$n$tag.txt" 2>&1
  echo "$n$tag: exit $? $(grep -cE '^\[       OK' "$O/$n$tag.txt") ok $(grep -E '^\[  FAILED  \] [0-9]' "$O/$n$tag.txt")"
  grep -E "Failure$" -A3 "$O/$n$tag.txt" | head -6
}
# gdn_bench "a b" "name:VAR=VALUE[,VAR=VALUE] ..." ARGS...: hypic_bench_kernels --only gdn ARGS under each form, each round
# (into $O/bench_<name>_<round>.json), printing tokens, variant and ms of each case.
gdn_bench() {
  local rounds=$1 forms=$2 k f n; shift 2
  for k in $rounds; do for f in $forms; do
    n=${f%%:*}
    env $(tr , " " <<< "${f#*:}") timeout 60 "$B/hypic_bench_kernels" --only gdn "$@" > "$O/bench_${n}_$k.json" 2>&1
    echo "$n $k:"
    grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' "$O/bench_${n}_$k.json" |
      sed -E 's/"tokens": //; s/"variant": //; s/"ms": //'
  done; done
}
# fla_gdn ARGS...: fla's chunk_gated_delta_rule (the carried wheel) by tools/bench/bench_peers.py --ops gdn ARGS,
# into $O/bench_peers_gdn.json.
fla_gdn() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .deps/whl/*.whl > /dev/null 2>&1
  PYTHONPATH=/tmp/site timeout "${FT:-150}" python3 tools/bench/bench_peers.py --ops gdn "$@" > "$O/bench_peers_gdn.json" 2>&1
  grep -E '"ms"|variant|error' "$O/bench_peers_gdn.json" | paste - - | sed -E 's/ +/ /g' | head -40
}
# dec NAME VAR=VALUE[,VAR=VALUE] ARGS...: hypic_bench_model at the 35B-A3B shape (random weights, 8k prefill) with ARGS
# under those variables, into $O/decode_NAME.json (stderr .err), printing the copy rate and each decode figure.
dec() {
  local n=$1 e=$2; shift 2
  env $(tr , " " <<< "$e") timeout "${DT:-100}" "$B/hypic_bench_model" --config tools/bench/configs/qwen3_5_35b_a3b.json \
    --random-weights --prefill 8192 "$@" > "$O/decode_$n.json" 2> "$O/decode_$n.err"
  echo "$n: $(grep -oE '"copy_tb_per_s": [0-9.]+' "$O/decode_$n.json") $(grep -oE '"(decode|graph_drawn)": \{[^}]*' "$O/decode_$n.json" |
    grep -oE '"(decode|graph_drawn)"|"(ms_per_token|ms_per_step|tokens_per_s|fraction_of_copy)": [0-9.]+' | tr '\n' ' ')"
  tail -1 "$O/decode_$n.err"
}
