#!/usr/bin/env bash
# Builds the GPU tests, benches and the CLI here (nvcc compiles for sm_90a without a GPU) and packs them,
# stripped, into .gpubin/gpubin.tar.xz (ignored by git) with the libyaml-cpp, libtbb and libxxhash they link against, so a
# device call only unpacks and runs (tools/bench/gpu_full_check.sh) instead of compiling there.
# Usage: tools/bench/pack_gpu_binaries.sh [BUILD_DIR]   (configured from this checkout with CUDA on)
#        TARGETS="a b ..." tools/bench/pack_gpu_binaries.sh [BUILD_DIR]   (only those, for a smaller archive)
set -euo pipefail
B=${1:-build}
if [ -n "${TARGETS:-}" ]; then targets=$TARGETS; else
targets="hypic cuda_backend_ops_test cuda_attention_prefill_test cuda_model_test engine_model_test
         sdk_multi_turn_model_test hypic_bench_kernels hypic_bench_model hypic_bench_ttft cuda_stitch_ops_test"
cmake -S . -B "$B" > /dev/null  # new targets appear in the help only after a configure
help=$(cmake --build "$B" --target help)
for t in hypic_bench_serve engine_batch_model_test sdk_session_model_test; do
  grep -q "\.\.\. $t\$" <<< "$help" && targets="$targets $t"
done
targets="$targets cuda_family_glue_test cuda_lightning_test cuda_kda_test cuda_gdn_chunked_test cuda_packed_expand_test cuda_entry_promotion_test hypic_bench_entry_codec cold_scatter_model_test tensor_parallel_model_test hypic_bench_tp cuda_decode_ops_test cuda_gemm_skinny_test cuda_sequence_state_test"
fi
cmake --build "$B" -j"$(nproc)" --target $targets
stage=$(mktemp -d)/gpubin
mkdir -p "$stage"
for t in $targets; do
  f=$(find "$B" -name "$t" -type f -perm -u+x | head -1)
  strip -o "$stage/$t" "$f"
done
pwd > "$stage/source_dir"  # the tests' HYPIC_SOURCE_DIR: the device links it to its checkout
cp -L "$(ldconfig -p | awk '/libyaml-cpp.so.0.7 /{print $NF; exit}')" "$stage/libyaml-cpp.so.0.7"
cp -L "$(ldconfig -p | awk '/libtbb.so.12 /{print $NF; exit}')" "$stage/libtbb.so.12"
cp -L "$(ldconfig -p | awk '/libxxhash.so.0 /{print $NF; exit}')" "$stage/libxxhash.so.0"  # record checksums
mkdir -p .gpubin
# xz -9's 64 MiB window spans several binaries, which share most of their kernels: the full set packs to about a
# sixth of the default level's size, and the device takes 64 MiB of tree and carried files in all.
XZ_OPT=${XZ_OPT:--9} tar cJf .gpubin/gpubin.tar.xz -C "$(dirname "$stage")" gpubin
ls -la .gpubin/gpubin.tar.xz
# The CUPTI trace library (device timelines: gpu_full_check.sh skinny, kernel_gaps.py) and the libcupti it
# links, in .gpubin/trace.tar.xz, where the build has that target.
if grep -q '\.\.\. hypic_kernel_trace$' <<< "$(cmake --build "$B" --target help)"; then  # not a pipe: grep -q would break it
  cmake --build "$B" --target hypic_kernel_trace > /dev/null
  tr=$(mktemp -d)
  cp "$(find "$B" -name libhypic_kernel_trace.so | head -1)" "$tr/"
  cupti=$(find /usr/local/cuda/ -name 'libcupti.so.*' -type f 2>/dev/null | head -1)
  [ -n "$cupti" ] && cp "$cupti" "$tr/$(basename "$cupti" | sed -E 's/(\.so\.[0-9]+).*/\1/')"
  tar cJf .gpubin/trace.tar.xz -C "$tr" .
  ls -la .gpubin/trace.tar.xz
fi
# The fuzz targets of a clang -DHYPIC_FUZZ=ON build (FUZZ_BUILD_DIR), for the long runs of `final`.
if [ -n "${FUZZ_BUILD_DIR:-}" ]; then
  fz=$(mktemp -d)
  for f in "$FUZZ_BUILD_DIR"/tests/fuzz/*_fuzz; do strip -o "$fz/$(basename "$f")" "$f"; done
  sed -n 's/^HYPIC_QWEN3_TOKENIZER_DIR:PATH=//p' "$FUZZ_BUILD_DIR/CMakeCache.txt" > "$fz/tokenizer_dir"
  tar cJf .gpubin/fuzz.tar.xz -C "$fz" .
  ls -la .gpubin/fuzz.tar.xz
fi
