#!/usr/bin/env bash
# The whole GPU check of docs/benchmarks.md on one H200 machine:
#   tools/bench/gpu_full_check.sh test   # op harness, attention, model and engine tests, CLI check
#   tools/bench/gpu_full_check.sh bench  # kernel benches, peers (fla, SDPA), whole-model and TTFT benches
#   tools/bench/gpu_full_check.sh ttft   # only the TTFT bench (cold, RAG, agent)
#   tools/bench/gpu_full_check.sh all    # both
#   tools/bench/gpu_full_check.sh tiers  # cache-record promotion tests, record codec timings, tiers TTFT
#   tools/bench/gpu_full_check.sh batch  # batched decode: kernel and model checks, throughput at N = 1..32
#   tools/bench/gpu_full_check.sh decode # the one-row decode path: its op tests, the model / engine tests over
#                                        # it, the products against cuBLAS, decode with the fusion on and off
#   tools/bench/gpu_full_check.sh moe    # the routed experts: op tests, every MoE path's timing by row count,
#                                        # model tests, decode at batch 1/8/32, RAG TTFT with the expert-major
#                                        # path on and off (HYPIC_CUDA_MOE_DEVICE_ROWS=0) and its step profile
#   tools/bench/gpu_full_check.sh chain  # the same after the stitch's ops and engine tests instead of the MoE ones
#   tools/bench/gpu_full_check.sh stitch # the all-hit stitch: op tests, the chain's bench, RAG TTFT, every
#                                        # kernel of one all-hit request (ncu), the host's time per step and
#                                        # the cuBLASLt queries, model and engine tests, decode at batch 1/8/32
#   tools/bench/gpu_full_check.sh probe  # the decode MoE (cuda::moe_decode): its op test, model tests, decode at
#                                        # batch 1/8/32, each kernel of a launched decode step (ncu); and the
#                                        # segment chain bench's three variants under Nsight Compute's full set
#                                        # (PROBE_CHAIN_NCU=0 / PROBE_TESTS=0: without that ncu / the tests)
#   tools/bench/gpu_full_check.sh attention  # the Hopper attention prefill: its op tests under each schedule, the
#                                            # kernel bench, torch SDPA (default / cuDNN / FA2) in the same call,
#                                            # the stitch, backend-op, model and engine tests, 8k prefill and RAG
#                                            # TTFT with HYPIC_CUDA_ATTN_SM90=1 and 0
#   tools/bench/gpu_full_check.sh prefill  # the long prefill: MoE op tests, model tests, every MoE path's timing, the 8k
#                                          # prefill (and its kernels under ncu) for each of PREFILL_ENVS, RAG TTFT
#   tools/bench/gpu_full_check.sh fusion # RAG TTFT (hypic mode) and decode with the fused kernels on and off
#                                        # (HYPIC_CUDA_DECODE_FUSION=1/0), each kernel of one all-hit request (ncu)
#   tools/bench/gpu_full_check.sh verify # the CUDA op, model, engine and SDK tests of the decode and MoE paths, decode
#                                        # at batch 1/8/32, RAG TTFT (ENGINE_FILTER: the engine tests' gtest filter)
#   tools/bench/gpu_full_check.sh final  # the engine tests, the cache tiers, `hypic serve` on the RAG trace,
#                                        # with the fuzz targets (.gpubin/fuzz.tar.xz) on the spare CPU cores
#                                        # (ONLY_SERVE=1: only the server bench and the fuzz targets)
#   tools/bench/gpu_full_check.sh admission  # `hypic serve`'s decode stalls by --prefill-chunk (serve_admission.sh)
#   tools/bench/gpu_full_check.sh skinny # the products of <= 256 rows (cuda::gemm_skinny): its op test, its bench
#                                        # against cuBLAS, the model and engine tests and decode at batch 1/8/32
#                                        # and RAG TTFT with it on and off (HYPIC_CUDA_SKINNY=1/0), an all-hit
#                                        # request's device timeline (.gpubin/trace.tar.xz: the trace library)
#   tools/bench/gpu_full_check.sh chainwg  # the stitch's chain forms (HYPIC_CUDA_CHAIN_TC=1 / wg): the stitch op and
#                                          # sequence-state tests, the chain bench and the warpgroup form's
#                                          # products under ncu, RAG TTFT under both forms, an all-hit request's
#                                          # timeline; the tensor-parallel test that failed on 2026-12-05 with the
#                                          # few-row products and the programmatic launches each on and off
#   tools/bench/gpu_full_check.sh spans  # the chain's row steps token by token and chunked (HYPIC_CUDA_CHAIN_SPANS),
#                                        # its warpgroup products in one group or two (HYPIC_CUDA_CHAIN_WG_GROUPS):
#                                        # the stitch op tests under every form, the tensor-parallel test, the chain
#                                        # bench and its row spans under ncu, RAG TTFT under both, an all-hit
#                                        # timeline; then the op, model and engine tests of every kernel whose
#                                        # shared-memory opt-in moved to cuda::raise_smem_limit
#   tools/bench/gpu_full_check.sh linear # lightning and KDA kernels: harness tests, hypic's and fla's benches
#   tools/bench/gpu_full_check.sh gdn    # the GDN chunked prefill: its op tests (every launch form) under each form
#                                        # (GDN_FORMS; default: the default, the two-warpgroup walk beside prep,
#                                        # everywhere and never, the walk unrolled by its stages everywhere (also
#                                        # with prep before it) and never, gdn_prep.cu's
#                                        # mma.sync form, the two-stage walk, U formed in the walk, three of them
#                                        # with prep before the walk, the shared-memory walk), the
#                                        # backend, stitch, model and engine tests (GDN_ENGINE=0: no engine), the
#                                        # GDN bench
#                                        # under each form twice, fla (the wheel in .whl or .deps/whl) in the same
#                                        # call, both gdn_preps under ncu (GDN_NCU=0: not), the 8k whole-model
#                                        # prefill under two of them (GDN_PREFILL_FORMS; set empty: none)
#   tools/bench/gpu_full_check.sh families  # Ring, MiniMax, Kimi, Ring-2.5 on CUDA: glue ops, model and engine
#                                           # tests, whole-model and RAG TTFT benches at their production shapes
#   tools/bench/gpu_full_check.sh multigpu  # every GPU of the machine (issue 20): tensor-parallel tests (NCCL
#                                           # between GPUs 0 and 1), TP prefill/decode/RAG at 1, 2, 4, 8 ranks,
#                                           # the cold scatter over 1..N GPUs, LPT and round robin
#                                           # (TP_CONFIG: a config that splits; default the 35B-A3B shape)
# Run from the repository root with .deps carried (and .whl for the peers). Binaries come from
# .gpubin/gpubin.tar.xz when it was carried (tools/bench/pack_gpu_binaries.sh built them elsewhere),
# otherwise they are built here into build-gpu. Results also go to $OUT when set; with ARCHIVE=1 they go
# to one archive, $OUT/logs.tgz, instead (the device tool brings back only a few files per call).
set -uo pipefail
stage=${1:?usage: gpu_full_check.sh test|bench|ttft|all}
export NCCL_NVLS_ENABLE=0
if [ "${ARCHIVE:-0}" = 1 ] && [ -n "${OUT:-}" ]; then O=/tmp/hypic-gpu-out; else O=${OUT:-/tmp/hypic-gpu-out}; fi
mkdir -p "$O"
D=$PWD/.deps R=$PWD/.deps/root
L=$R/usr/lib/x86_64-linux-gnu
step() { echo "== $* ($(date +%T))"; }
mkdir -p "$R" && for f in "$D"/debs/*.deb; do dpkg -x "$f" "$R"; done
export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

[ -f .gpubin/fixtures.tar.xz ] && mkdir -p /tmp/fixtures && tar xJf .gpubin/fixtures.tar.xz -C /tmp/fixtures
if [ -f .gpubin/gpubin.tar.xz ]; then
  step unpack prebuilt binaries
  tar xJf .gpubin/gpubin.tar.xz -C /tmp
  BIN=/tmp/gpubin
  export LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH
  # The tests find their fixtures under the source path they were built in.
  src=$(cat $BIN/source_dir)
  if [ -n "$src" ] && [ "$src" != "$PWD" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
  bin() { echo "$BIN/$1"; }
else
  B=build-gpu
  if [ ! -f $B/CMakeCache.txt ]; then
    step configure
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/usr/bin/pkgconf "$@"\n' "$L" "$R" > "$D/pkg-config" && chmod +x "$D/pkg-config"
    cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$R/usr -DPKG_CONFIG_EXECUTABLE=$D/pkg-config \
      "-DCMAKE_CXX_FLAGS=-isystem $R/usr/include" > "$O/configure.log" || { tail -20 "$O/configure.log"; exit 1; }
  fi
  targets="hypic cuda_backend_ops_test cuda_attention_prefill_test cuda_model_test engine_model_test
           sdk_multi_turn_model_test hypic_bench_kernels hypic_bench_model hypic_bench_ttft cuda_stitch_ops_test"
  grep -rqs cuda_gdn_chunked_test --include=CMakeLists.txt tests && targets="$targets cuda_gdn_chunked_test"
  grep -rqs cuda_entry_promotion_test --include=CMakeLists.txt tests &&
    targets="$targets cuda_packed_expand_test cuda_entry_promotion_test hypic_bench_entry_codec"
  step build
  cmake --build $B -j16 --target $targets > "$O/build.log" 2>&1 || { grep -E "error" "$O/build.log" | head -30; exit 1; }
  bin() { find $B -name "$1" -type f -perm -u+x | head -1; }
fi

run_test() {  # runs a gtest binary if there is one (optional gtest filter); summary to stdout, log to $O
  local b; b=$(bin "$1")
  [ -n "$b" ] && [ -x "$b" ] || { echo "$1: not built"; return; }
  step "$1"
  timeout "${TEST_TIMEOUT:-900}" "$b" ${2:+--gtest_filter=$2} > "$O/$1.txt" 2>&1; echo "$1: exit $?"
  grep -E "^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]|Failure$" "$O/$1.txt" | head -20
}

# Whether run_test's log of gtest binary $1 shows tests passed and none failed.
test_passed() {
  grep -q "^\[  PASSED  \] [1-9]" "$O/$1.txt" && ! grep -q "^\[  FAILED  \]" "$O/$1.txt"
}

# Request 8's device timeline in the RAG bench (the CUPTI library of .gpubin/trace.tar.xz; the caller's
# environment applies): req8_gaps.txt and the trace.
request8_timeline() {
  [ -f .gpubin/trace.tar.xz ] || { echo "no .gpubin/trace.tar.xz: no timeline"; return; }
  mkdir -p /tmp/trace && tar xJf .gpubin/trace.tar.xz -C /tmp/trace
  step "request 8's timeline"
  CUDA_INJECTION64_PATH=/tmp/trace/libhypic_kernel_trace.so LD_LIBRARY_PATH=/tmp/trace:$LD_LIBRARY_PATH \
    HYPIC_TRACE_OUT="$O/req8.trace" "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
    --case rag --mode hypic --warmup 8 --requests 1 --profile-request 8 > /dev/null 2>&1
  python3 tools/bench/kernel_gaps.py "$O/req8.trace" > "$O/req8_gaps.txt" 2>&1; head -50 "$O/req8_gaps.txt"
  gzip -f "$O/req8.trace"
}

ttft_bench() {
  step ttft
  "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case all --requests 8 \
    --turns 8 | tee "$O/bench_ttft.json"
}

# RAG TTFT once per value of an environment variable: rag_ttft_under VAR TAG VALUE... (outputs ttft_TAG<VALUE>.*);
# the first value in every mode, the others in hypic mode alone with RAG_LATER_HYPIC_ONLY=1.
rag_ttft_under() {
  local var=$1 tag=$2 v mode=(); shift 2
  for v in "$@"; do
    step "RAG TTFT, $var=$v ${mode[*]}"
    env "$var=$v" "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag \
      --requests 8 "${mode[@]}" > "$O/ttft_$tag$v.json" 2> "$O/ttft_$tag$v.txt"
    [ "${RAG_LATER_HYPIC_ONLY:-0}" = 1 ] && mode=(--mode hypic)
    grep -oE '"mode": "[a-z]+", "ttft_ms": \{[^}]*\}' "$O/ttft_$tag$v.json"; grep 'measured request' "$O/ttft_$tag$v.txt" | grep hypic
  done
}

# Nsight Compute's full set on one launch of the chain bench (--iters 1: 8 launches a variant, 3 warm-up + 5, in
# the order whole, products only, row spans only): chain_ncu VAR=VALUE LAUNCH_SKIP OUTPUT
chain_ncu() {
  local ncu; ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "no ncu"; return; }
  step "ncu full set: the chain bench's launch $(($2 + 1)), $1"
  env "$1" timeout 120 "$ncu" --set full --import-source no -k regex:state_chain --launch-skip "$2" --launch-count 1 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$(bin hypic_bench_kernels)" --only chain --iters 1 > "$O/$3" 2>&1
  grep -E "Duration|Issued Ipc|Executed Instructions  |Warp Cycles Per Issued|Local Memory Spilling Req" "$O/$3" | head
}

# Most important first: a call cut short by its time limit still returns what $O holds by then.
if [ "$stage" = test ] || [ "$stage" = all ]; then
  # The engine and multi-turn tests are typed over devices: their CUDA cases (the CPU ones run in CI).
  run_test engine_model_test '*cuda*'
  run_test sdk_multi_turn_model_test '*cuda*'
  for t in cuda_stitch_ops_test cuda_backend_ops_test cuda_attention_prefill_test cuda_gdn_chunked_test cuda_model_test; do
    run_test $t
  done
fi
if [ "$stage" = bench ] || [ "$stage" = all ]; then
  step kernels
  "$(bin hypic_bench_kernels)" --tokens 8192,32768 --iters 20 | tee "$O/bench_kernels.json"
  step model
  "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights \
    --prefill 8192 --decode 64 | tee "$O/bench_model.json"
  ttft_bench
fi
[ "$stage" = ttft ] && ttft_bench
if [ "$stage" = tiers ]; then
  # Promotion of lower-tier hits (docs/cache_tiers.md): device expansion vs the reference decode, where the
  # time of one record goes, then TTFT per tier.
  run_test cuda_packed_expand_test
  run_test cuda_entry_promotion_test
  step entry codec
  "$(bin hypic_bench_entry_codec)" --device cuda --config tools/bench/configs/qwen3_5_35b_a3b.json | tee "$O/bench_entry_codec.json"
  for f in ${TIER_FORMATS:-compact fp32}; do
    step "tiers $f"
    "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case tiers --requests 4 \
      --tier-format $f > "$O/bench_tiers_$f.json" 2> "$O/bench_tiers_$f.err"; echo "tiers $f: exit $?"
    grep -o '"tier": "[a-z]*", "ttft_ms": {[^}]*}' "$O/bench_tiers_$f.json"
  done
fi
# The fuzz targets (.gpubin/fuzz.tar.xz) on the spare CPU cores while the GPU work runs: stage final, or
# any stage with FUZZ_SECONDS set. FUZZ_RESUME: a folder of earlier corpora (tests/fuzz/run_long.sh).
fuzz_pid=
if [ -f .gpubin/fuzz.tar.xz ] && { [ "$stage" = final ] || [ -n "${FUZZ_SECONDS:-}" ]; }; then
  step fuzz targets in the background
  mkdir -p /tmp/fuzzbin && tar xJf .gpubin/fuzz.tar.xz -C /tmp/fuzzbin
  # The tokenizer target reads the real Qwen3 tokenizer at the path it was built with.
  tdir=$(cat /tmp/fuzzbin/tokenizer_dir 2>/dev/null || true)
  if [ -n "$tdir" ] && [ ! -e "$tdir" ]; then mkdir -p "$tdir" && cp /tmp/fixtures/qwen3-tokenizer/* "$tdir/"; fi
  # Corpora of earlier runs of the campaign (.gpubin/fuzz_resume.tar.xz: a corpus/<target>/ tree).
  if [ -f .gpubin/fuzz_resume.tar.xz ]; then
    mkdir -p /tmp/fuzz-resume && tar xJf .gpubin/fuzz_resume.tar.xz -C /tmp/fuzz-resume
    export FUZZ_RESUME=/tmp/fuzz-resume/corpus
  fi
  rm -rf /tmp/fuzz-out
  tests/fuzz/run_long.sh /tmp/fuzzbin "${FUZZ_SECONDS:-420}" /tmp/fuzz-out ${FUZZ_WORKERS:-template_fuzz=2 \
    safetensors_fuzz=2 tokenizer_fuzz=2 config_fuzz=1 eval_prompts_fuzz=1 text_template_fuzz=1 \
    tool_call_parser_fuzz=1} > "$O/fuzz_long.txt" 2>&1 &
  fuzz_pid=$!
fi
wait_fuzz() {
  [ -n "$fuzz_pid" ] || return 0
  step waiting for the fuzz targets
  wait $fuzz_pid
  cat "$O/fuzz_long.txt"
  tar cJf "$O/fuzz_corpus.tar.xz" -C /tmp/fuzz-out corpus
  for d in /tmp/fuzz-out/*_fuzz/w*; do ls "$d"/crash-* "$d"/timeout-* "$d"/oom-* "$d"/leak-* 2>/dev/null; done |
    head -20 > "$O/fuzz_findings.txt"
  tar cJf "$O/fuzz_logs.tar.xz" -C /tmp/fuzz-out --exclude=corpus .
  fuzz_pid=
}
if [ "$stage" = batch ]; then
  # Continuous batching: the batched decode kernels against the CPU, the batched model step against each
  # sequence alone, then batched decode throughput at the 35B-A3B shape.
  run_test cuda_backend_ops_test
  run_test cuda_model_test
  run_test engine_batch_model_test
  run_test sdk_session_model_test
  step batched decode bench
  "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights \
    --prefill ${BATCH_CONTEXT:-4096} --decode 8 --batch ${BATCH_SIZES:-1,4,8,16,32} --batch-steps 24 | tee "$O/bench_batch.json"
fi
if [ "$stage" = decode ]; then
  # The one-row decode step (cuda::gemv, qk_norm_rope: docs/cuda_kernels.md): the ops against the CPU
  # reference, the model and engine tests whose decode steps take it, then the products against cuBLAS
  # and the decode rate with the fusion on and off (HYPIC_CUDA_DECODE_FUSION=0), same binaries.
  run_test cuda_decode_ops_test
  run_test cuda_backend_ops_test
  run_test cuda_attention_prefill_test
  run_test cuda_stitch_ops_test
  run_test cuda_model_test
  run_test engine_batch_model_test
  step products
  "$(bin hypic_bench_kernels)" --only gemv --iters 20 | tee "$O/bench_gemv.json"
  for f in 1 0; do
    step "decode, fusion $f"
    HYPIC_CUDA_DECODE_FUSION=$f "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
      --random-weights --prefill 8192 --decode 64 --batch ${BATCH_SIZES:-1,8,32} --batch-steps 24 \
      | tee "$O/bench_decode_fusion$f.json"
  done
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ]; then
    step "kernel durations of a launched decode step (ncu)"
    HYPIC_CUDA_GRAPHS=0 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      --log-file "$O/ncu_decode.csv" "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
      --random-weights --prefill 8192 --decode 3 > "$O/ncu_bench.txt" 2>&1
    python3 tools/bench/ncu_step.py "$O/ncu_decode.csv" 2>&1 | tee "$O/ncu_step.txt" | head -40
  fi
  step "decode profile (launched steps)"
  HYPIC_CUDA_GRAPHS=0 HYPIC_PROFILE_DECODE=1 "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
    --random-weights --prefill 4096 --decode 8 --batch 1 --batch-steps 12 > "$O/bench_decode_profile.json" 2>&1
  step rag ttft
  "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 \
    | tee "$O/bench_ttft_rag.json"
  [ "${DECODE_ENGINE_TESTS:-1}" = 1 ] && run_test engine_model_test '*cuda*'
fi
if [ "$stage" = moe ] || [ "$stage" = chain ]; then
  if [ "$stage" = chain ]; then  # the segment chain's row steps (cuda::state_chain): op test, model and engine tests
    run_test cuda_stitch_ops_test
    run_test engine_model_test '*cuda*'
  else
    run_test cuda_backend_ops_test
    run_test cuda_decode_ops_test
    step moe paths
    "$(bin hypic_bench_kernels)" --only moe --iters 20 | tee "$O/bench_moe.json"
  fi
  run_test cuda_model_test
  run_test engine_batch_model_test
  for rows in default 0; do
    step "rag ttft, device MoE rows $rows"
    ( [ $rows = default ] || export HYPIC_CUDA_MOE_DEVICE_ROWS=$rows
      "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 ) \
      | tee "$O/bench_ttft_rag_moe_$rows.json"
  done
  step "stitch profile"
  HYPIC_PROFILE=1 "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag \
    --requests 4 > "$O/stitch_profile.json" 2> "$O/stitch_profile.txt"; tail -40 "$O/stitch_profile.txt"
  step decode
  "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 \
    --decode 64 --batch ${BATCH_SIZES:-1,8,32} --batch-steps 24 | tee "$O/bench_decode.json"
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ]; then
    step "kernel durations of the linear layers' segment chains and the experts in a stitch (ncu)"
    timeout 240 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      -k 'regex:embed|state_chain|gdn|conv1d|split|identity|moe|grouped' --log-file "$O/ncu_stitch.csv" \
      "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --mode hypic \
      --warmup 8 --requests 2 > "$O/ncu_stitch_bench.txt" 2>&1
    python3 tools/bench/ncu_step.py "$O/ncu_stitch.csv" 2>&1 | tee "$O/ncu_stitch.txt" | tail -30
  fi
fi
if [ "$stage" = stitch ]; then  # QUICK=1: without the other op tests, ncu and the decode bench
  run_test cuda_stitch_ops_test
  if [ -z "${QUICK:-}" ]; then
    run_test cuda_backend_ops_test
    run_test cuda_attention_prefill_test
    run_test cuda_decode_ops_test
  fi
  step "segment chain bench"
  "$(bin hypic_bench_kernels)" --only chain --iters 20 | tee "$O/bench_chain.json"
  step "rag ttft"
  "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 \
    | tee "$O/bench_ttft_rag.json"
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ] && [ -z "${QUICK:-}" ]; then
    step "every kernel of one all-hit request (ncu)"
    timeout 360 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      --log-file "$O/ncu_request.csv" "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
      --case rag --mode hypic --warmup 8 --requests 1 > "$O/ncu_request_bench.txt" 2>&1
    python3 tools/bench/ncu_step.py "$O/ncu_request.csv" --last 2>&1 | tee "$O/ncu_request.txt" | head -50
    rm -f "$O/ncu_request.csv"
  fi
  step "host time to issue each step of a request (HYPIC_PROFILE=host), cuBLASLt heuristic queries"
  HYPIC_PROFILE=host HYPIC_BLAS_TRACE=1 "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
    --case rag --mode hypic --requests 8 > "$O/host_profile.json" 2> "$O/host_profile.txt"
  grep -E "profile host|measured" "$O/host_profile.txt" | tail -8
  echo "heuristic queries: $(grep -c '^\[blas\]' "$O/host_profile.txt")"; grep '^\[blas\]' "$O/host_profile.txt" | tail -5
  run_test cuda_model_test
  run_test engine_model_test "${ENGINE_FILTER:-*cuda*}"
  run_test engine_batch_model_test
  [ -n "${QUICK:-}" ] || step decode
  [ -n "${QUICK:-}" ] || "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 \
    --decode 64 --batch ${BATCH_SIZES:-1,8,32} --batch-steps 24 | tee "$O/bench_decode.json" | grep -E "ms_per|tokens_per" | head -12
fi
if [ "$stage" = probe ]; then
  run_test cuda_decode_ops_test
  step decode
  "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 \
    --decode 64 --batch ${BATCH_SIZES:-1,8,32} --batch-steps 24 | tee "$O/bench_decode.json" | grep -E "ms_per|tokens_per" | head -12
  step "segment chain bench"
  "$(bin hypic_bench_kernels)" --only chain --iters 20 | tee "$O/bench_chain.json"
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ] && [ "${PROBE_CHAIN_NCU:-1}" = 1 ]; then
    # --iters 1: each variant is 3 warm-up launches and 5 timed ones; the 6th of each is profiled.
    for v in 5:all 13:products 21:spans; do
      step "ncu full set: state_chain, ${v#*:}"
      timeout 120 "$NCU" --set full --import-source no -k regex:state_chain --launch-skip ${v%%:*} --launch-count 1 \
        --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        "$(bin hypic_bench_kernels)" --only chain --iters 1 > "$O/ncu_chain_${v#*:}.txt" 2>&1
      grep -E "Duration|Throughput|Issued Ipc|Warp Cycles Per Issued|Achieved Occupancy" "$O/ncu_chain_${v#*:}.txt" | head -12
    done
  fi
  if [ -n "$NCU" ]; then
    step "kernel durations of a launched decode step (ncu)"
    HYPIC_CUDA_GRAPHS=0 timeout 200 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --csv --log-file "$O/ncu_decode.csv" "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
      --random-weights --prefill 8192 --decode 3 > "$O/ncu_bench.txt" 2>&1
    python3 tools/bench/ncu_step.py "$O/ncu_decode.csv" 2>&1 | tee "$O/ncu_step.txt" | head -30
    rm -f "$O/ncu_decode.csv"
  fi
  if [ "${PROBE_TESTS:-1}" = 1 ]; then
    run_test cuda_model_test
    run_test cuda_backend_ops_test
    run_test engine_batch_model_test
  fi
fi
if [ "$stage" = prefill ]; then  # where the 8k-token prefill's device time goes; PREFILL_ENVS: variants (VAR=value)
  [ "${PREFILL_TESTS:-1}" = 1 ] && { run_test cuda_backend_ops_test '*Moe*'; run_test cuda_model_test; }
  [ -n "${ENGINE_FILTER:-}" ] && run_test engine_model_test "$ENGINE_FILTER"
  [ "${PREFILL_MOE_BENCH:-1}" = 1 ] && { step "MoE kernels"; "$(bin hypic_bench_kernels)" --only moe --iters 20 |
    tee "$O/bench_moe.json" | grep -E '"tokens": (2048|4096|8192),'; }
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for v in default ${PREFILL_ENVS:-}; do
    step "prefill bench, $v"
    ( [ "$v" = default ] || export "$v"
      "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 \
        --decode 0 ) | tee "$O/bench_prefill_$v.json" | grep -A3 '"prefill"'
    if [ -n "$NCU" ] && [ "${PREFILL_NCU:-1}" = 1 ]; then
      step "kernel durations of the 8k prefill (ncu), $v"
      ( [ "$v" = default ] || export "$v"
        timeout 300 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
          --log-file "$O/ncu_prefill.csv" "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
          --random-weights --prefill 8192 --decode 0 > "$O/ncu_prefill_bench_$v.txt" 2>&1 )
      python3 tools/bench/ncu_step.py "$O/ncu_prefill.csv" --last 2>&1 | tee "$O/ncu_prefill_$v.txt" | head -36
      rm -f "$O/ncu_prefill.csv"
    fi
  done
  if [ "${PREFILL_TTFT:-1}" = 1 ]; then
    step "RAG TTFT"
    "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 |
      tee "$O/bench_ttft_rag.json" | grep -oE "\"mode\": \"[a-z]+\", \"ttft_ms\": \{[^}]*\}"
  fi
fi
if [ "$stage" = attention ]; then  # the Hopper attention prefill (issue 12 goal 1) against SDPA, in one call
  for v in 1_0 0_0 2_0 1_1 0_1 2_1; do  # its op tests under each consumer schedule, without and with block pairs
    step "attention op tests, schedule and cluster $v"
    HYPIC_CUDA_ATTN_SM90_SCHEDULE=${v%_*} HYPIC_CUDA_ATTN_SM90_CLUSTER=${v#*_} timeout 120 \
      "$(bin cuda_attention_prefill_test)" > "$O/cuda_attention_prefill_test_$v.txt" 2>&1
    echo "$v: exit $?"; grep -E "^\[  PASSED  \]|^\[  FAILED  \]|Failure$" "$O/cuda_attention_prefill_test_$v.txt" | head -5
  done
  step "attention kernels"
  timeout 300 "$(bin hypic_bench_kernels)" --only attention --tokens 8192,32768 --iters 20 | tee "$O/bench_attention.json" |
    grep -oE '"tokens": [0-9]+, "variant": "[^"]*", "ms": [0-9.]+, "tflops": [0-9.]+'
  step "peers (torch SDPA default / cuDNN / FA2)"
  python3 tools/bench/bench_peers.py --tokens 8192,32768 --iters 20 > "$O/bench_peers.json" 2>&1
  grep -A4 '"torch_sdpa' "$O/bench_peers.json" | grep -E "op|tokens|variant|\"ms\"" | paste - - - - | tr -s ' \t' ' '
  for t in cuda_stitch_ops_test cuda_backend_ops_test cuda_model_test; do run_test $t; done
  run_test engine_model_test "${ENGINE_FILTER:-*cuda*}"
  for f in ${ATTN_VARIANTS:-1 0 cluster}; do  # the Hopper form, the mma.sync form, the Hopper form in block pairs
    step "prefill 8k and RAG TTFT, $f"
    ( if [ $f = cluster ]; then export HYPIC_CUDA_ATTN_SM90_CLUSTER=1; else export HYPIC_CUDA_ATTN_SM90=$f; fi
      "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights \
        --prefill 8192 --decode 0 | tee "$O/bench_prefill_sm90_$f.json" | grep -A3 '"prefill"'
      "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 \
        > "$O/bench_ttft_rag_sm90_$f.json" 2> "$O/bench_ttft_rag_sm90_$f.err"
      grep -oE "\"mode\": \"[a-z]+\", \"ttft_ms\": \{[^}]*\}" "$O/bench_ttft_rag_sm90_$f.json" )
  done
  step "model and engine tests with block pairs"
  ( export HYPIC_CUDA_ATTN_SM90_CLUSTER=1
    for t in cuda_stitch_ops_test cuda_model_test; do
      timeout 300 "$(bin $t)" > "$O/${t}_cluster.txt" 2>&1; echo "$t (pairs): exit $?"
      grep -E "^\[  PASSED  \]|^\[  FAILED  \]|Failure$" "$O/${t}_cluster.txt" | head -5
    done
    timeout 300 "$(bin engine_model_test)" --gtest_filter="${ENGINE_FILTER:-*cuda*}" > "$O/engine_model_test_cluster.txt" 2>&1
    echo "engine_model_test (pairs): exit $?"; grep -E "^\[  PASSED  \]|^\[  FAILED  \]|Failure$" "$O/engine_model_test_cluster.txt" | head -5 )
fi
if [ "$stage" = fusion ]; then
  for f in 1 0 1 0; do
    step "rag ttft, hypic, fusion $f"
    HYPIC_CUDA_DECODE_FUSION=$f "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag \
      --mode hypic --requests 8 2>&1 | tee -a "$O/bench_ttft_fusion$f.txt" | grep -E "request 8:|p50"
  done
  for f in 1 0; do
    step "decode, fusion $f"
    HYPIC_CUDA_DECODE_FUSION=$f "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json \
      --random-weights --prefill 8192 --decode 64 --batch 1 --batch-steps 24 > "$O/bench_decode_fusion$f.json"
    grep -E "graph_drawn" "$O/bench_decode_fusion$f.json" | head -2
  done
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ]; then
    for f in ${FUSION_NCU:-1}; do  # the embedding (where ncu_step.py starts a forward) and the MoE's kernels
      step "the MoE kernels of one all-hit request (ncu), fusion $f"
      HYPIC_CUDA_DECODE_FUSION=$f timeout 200 "$NCU" --clock-control none --cache-control none \
        -k 'regex:embed|route|plan|count|scan|place|expert|gather|combine|residual' \
        --metrics gpu__time_duration.sum --csv --log-file "$O/ncu_request$f.csv" "$(bin hypic_bench_ttft)" \
        --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --mode hypic --warmup 8 --requests 1 \
        > "$O/ncu_request_bench$f.txt" 2>&1
      python3 tools/bench/ncu_step.py "$O/ncu_request$f.csv" --last 2>&1 | tee "$O/ncu_request$f.txt" | head -36
      rm -f "$O/ncu_request$f.csv"
    done
  fi
  run_test engine_model_test "${ENGINE_FILTER:-*cuda*}"
fi
if [ "$stage" = verify ]; then
  for t in cuda_decode_ops_test cuda_backend_ops_test cuda_stitch_ops_test cuda_model_test engine_batch_model_test \
           sdk_session_model_test sdk_multi_turn_model_test; do run_test $t; done
  run_test engine_model_test "${ENGINE_FILTER:-*cuda*}"
  step decode
  "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights --prefill 8192 \
    --decode 64 --batch ${BATCH_SIZES:-1,8,32} --batch-steps 24 | tee "$O/bench_decode.json" | grep -E "graph_drawn"
  step "rag ttft"
  "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag --requests 8 \
    | tee "$O/bench_ttft_rag.json" | grep -E '"p50"' | cut -c1-120
fi
if [ "$stage" = final ]; then
  if [ -z "${ONLY_SERVE:-}" ]; then
  run_test engine_model_test '*cuda*'
  run_test engine_batch_model_test
  run_test sdk_multi_turn_model_test '*cuda*'
  run_test cuda_gdn_chunked_test
  step eval-pic on the long-memory model
  "$(bin hypic)" eval-pic --device cuda --model examples/models/hypic-qa-long --modes full,prefix,hypic,naive,noseam \
    --prompts tests/fixtures/eval/long_eval_seed1.jsonl --decode-tokens 6 --quiet > "$O/evalpic_long_cuda.json"
  echo "eval-pic: exit $?"
  step tiers
  for f in ${TIER_FORMATS:-fp32 bf16 compact}; do
    "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case tiers --requests 4 \
      --tier-format $f > "$O/bench_tiers_$f.json" 2> "$O/bench_tiers_$f.err"; echo "tiers $f: exit $?"
  done
  fi
  step serve
  mkdir -p /tmp/sb/tools/hypic && ln -sf "$(bin hypic)" /tmp/sb/tools/hypic/hypic && \
    ln -sf "$(bin hypic_bench_serve)" /tmp/sb/tools/hypic_bench_serve
  REQUESTS=${SERVE_REQUESTS:-24} tools/bench/serve_trace.sh /tmp/sb /tmp/fixtures/qwen3-tokenizer \
    /tmp/fixtures/qwen3.5-chat/chat_template.jinja "$O/serve" ${SERVE_RATES:-1 2 4 8} 2>&1 | tee "$O/serve_summary.txt"
fi
if [ "$stage" = gdn ]; then
  # The forms, VAR=VALUE[+VAR=VALUE]: the default (gdn_prep on Hopper products beside the register-state walk, two
  # warpgroups a walk block where one-warpgroup blocks would be more than the SMs or beside prep for a long sequence
  # with T, the one-warpgroup loop unrolled by its stages where the walk does not run beside prep); the walk of two
  # warpgroups a block beside prep, in every walk, and never; the loop unrolled in every walk (also with prep before
  # it), and never;
  # gdn_prep.cu's mma.sync form (HYPIC_CUDA_GDN_PREP_SM90=0); the two-stage walk beside prep
  # (HYPIC_CUDA_GDN_OVERLAP_STAGES=2); U formed in the walk (HYPIC_CUDA_GDN_U_IN_WALK=1); each of the first, second
  # and fourth with prep before the walk; the shared-memory walk.
  mma=HYPIC_CUDA_GDN_PREP_SM90=0 two=HYPIC_CUDA_GDN_OVERLAP_STAGES=2 uw=HYPIC_CUDA_GDN_U_IN_WALK=1 seq=HYPIC_CUDA_GDN_OVERLAP=0
  forms=${GDN_FORMS:-"default:HYPIC_CUDA_GDN_OVERLAP=1 pair:HYPIC_CUDA_GDN_WALK_PAIR=1 pair_all:HYPIC_CUDA_GDN_WALK_PAIR=all pair_never:HYPIC_CUDA_GDN_WALK_PAIR=0 unroll:HYPIC_CUDA_GDN_WALK_UNROLL=1 unroll_seq:HYPIC_CUDA_GDN_WALK_UNROLL=1+$seq rolled:HYPIC_CUDA_GDN_WALK_UNROLL=0 mma_prep:$mma two:$two u_walk:$uw sequential:$seq mma_prep_seq:$mma+$seq u_walk_seq:$uw+$seq smem_walk:HYPIC_CUDA_GDN_RS=0"}
  vars() { echo "${1#*:}" | tr + ' '; }
  for f in $forms; do
    (export $(vars "$f"); run_test cuda_gdn_chunked_test)
    cp "$O/cuda_gdn_chunked_test.txt" "$O/cuda_gdn_chunked_test_${f%%:*}.txt"
  done
  run_test cuda_backend_ops_test
  run_test cuda_stitch_ops_test
  run_test cuda_model_test
  # The engine's CUDA cases under the default form (the default GDN path's code changed without a device on
  # 2026-12-05: gdn_prep.cu's shared pieces, the three-stage walk's flag schedule); GDN_ENGINE=0: not.
  [ "${GDN_ENGINE:-1}" = 1 ] && run_test engine_model_test '*cuda*'
  for k in a b; do
    for f in $forms; do
      step "bench gdn, $(vars "$f") ($k)"
      env $(vars "$f") "$(bin hypic_bench_kernels)" --only gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 > "$O/bench_gdn_${f%%:*}_$k.json"
      grep -oE '"tokens": [0-9]+, "variant": "[^"]+", "ms": [0-9.]+' "$O/bench_gdn_${f%%:*}_$k.json"
    done
  done
  whl=$(ls .whl/*.whl .deps/whl/*.whl 2> /dev/null | head -1)
  if [ -n "$whl" ]; then
    step fla
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$whl" > /dev/null 2>&1
    PYTHONPATH=/tmp/site python3 tools/bench/bench_peers.py --ops gdn --tokens 8192,32768 --gdn-seqs 1,16 --iters 20 \
      | tee "$O/bench_peers_gdn.json" | grep -E '"ms"|variant|error' | paste - - | head -16
  fi
  # One 8k gdn_prep launch of each kind on the whole GPU (prep then walk), Nsight Compute's full set and stalls.
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ] && [ "${GDN_NCU:-1}" = 1 ]; then
    for p in 0 1; do
      step "ncu gdn_prep, HYPIC_CUDA_GDN_PREP_SM90=$p"
      HYPIC_CUDA_GDN_PREP_SM90=$p HYPIC_CUDA_GDN_OVERLAP=0 timeout 120 "$NCU" --set full --import-source no \
        -k regex:gdn_prep --launch-skip 2 --launch-count 1 \
        --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        "$(bin hypic_bench_kernels)" --only gdn --tokens 8192 --iters 1 > "$O/ncu_prep_sm90_$p.txt" 2>&1
      grep -E "  Duration|Issued Ipc|Executed Instructions  |Warp Cycles Per Issued|DRAM Throughput|Registers Per" \
        "$O/ncu_prep_sm90_$p.txt" | head -8
    done
  fi
  for f in ${GDN_PREFILL_FORMS-"default:HYPIC_CUDA_GDN_OVERLAP=1 mma_prep:$mma"}; do
    step "8k prefill, $(vars "$f")"
    env $(vars "$f") "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights \
      --prefill 8192 --decode 0 --prefill-repeats 4 > "$O/prefill_${f%%:*}.json" 2> "$O/prefill_${f%%:*}.txt"
    grep -A2 '"prefill"' "$O/prefill_${f%%:*}.json" | head -3
  done
fi
if [ "$stage" = linear ]; then
  # The Ring (lightning) and Kimi (KDA) recurrences: the op harness against the CPU reference, then
  # hypic's kernels and flash-linear-attention's (carried as .whl) on the same shapes.
  run_test cuda_lightning_test
  run_test cuda_kda_test
  for op in lightning kda; do
    step "bench $op"
    "$(bin hypic_bench_kernels)" --only $op --tokens 8192,32768 --iters 20 | tee "$O/bench_$op.json"
  done
  if ls .whl/*.whl > /dev/null 2>&1; then
    step linear peers
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
    PYTHONPATH=/tmp/site python3 tools/bench/bench_linear_peers.py --tokens 8192,32768 --iters 20 \
      | tee "$O/bench_linear_peers.json"
  fi
fi
if [ "$stage" = families ]; then
  run_test cuda_family_glue_test
  run_test cuda_model_test
  run_test engine_model_test '*Lightning*cuda*:*Kda*cuda*:*CudaBackendFamilies*'
  run_test cuda_attention_prefill_test
  for cfg in ${FAMILY_CONFIGS-ring_mini_linear_2_0 minimax_text_01_8_layers kimi_linear_48b_a3b bailing_hybrid_48b_shape}; do
    step "model $cfg"
    "$(bin hypic_bench_model)" --config tools/bench/configs/$cfg.json --random-weights --prefill 8192 --decode 32 \
      > "$O/bench_model_$cfg.json" 2> "$O/bench_model_$cfg.err"; echo "model $cfg: exit $?"
    grep -E '"tokens_per_s"|"ms_per_token"' "$O/bench_model_$cfg.json" | head -3
    step "ttft $cfg"
    "$(bin hypic_bench_ttft)" --config tools/bench/configs/$cfg.json --case rag --requests ${FAMILY_REQUESTS:-6} --quiet \
      > "$O/bench_ttft_$cfg.json" 2> "$O/bench_ttft_$cfg.err"; echo "ttft $cfg: exit $?"
  done
  if [ -n "${FAMILY_CONFIGS-x}" ]; then  # FAMILY_CONFIGS= (empty): the tests only
    step "bench attention"
    "$(bin hypic_bench_kernels)" --only attention --tokens 8192,32768 --iters 20 > "$O/bench_attention.json" 2>&1
    echo "bench attention: exit $?"
  fi
fi
if [ "$stage" = multigpu ]; then
  ngpu=$(nvidia-smi -L | wc -l)
  echo "GPUs: $ngpu"
  run_test tensor_parallel_model_test
  run_test cold_scatter_model_test '*cuda*'
  cfg=${TP_CONFIG:-tools/bench/configs/qwen3_5_35b_a3b.json}
  for tp in 1 2 4 8; do
    [ "$tp" -le "$ngpu" ] || continue
    step "tp $tp"
    "$(bin hypic_bench_tp)" --config "$cfg" --tp $tp --prefill 8192 --decode 32 --requests 8 --warmup 4 \
      > "$O/bench_tp$tp.json" 2> "$O/bench_tp$tp.err"; echo "tp $tp: exit $?"
    grep -E '"tokens_per_s"|"p50"' "$O/bench_tp$tp.json" | head -6
  done
  devs=$(seq -s, 0 $((ngpu - 1)))
  ws=1; for w in 2 4 8; do [ "$w" -le "$ngpu" ] && ws="$ws,$w"; done
  step "scatter over GPUs $devs (workers $ws)"
  "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case scatter --scatter-tokens 32768 \
    --workers $ws --scatter-devices $devs --repeats 3 > "$O/bench_scatter_gpus.json" 2> "$O/bench_scatter_gpus.err"
  echo "scatter: exit $?"; grep "\[scatter\]" "$O/bench_scatter_gpus.err"
fi
if [ "$stage" = skinny ]; then
  # A kernel that hangs would otherwise hold the call for the default 900 s; a wrong one makes the rest moot.
  TEST_TIMEOUT=120 run_test cuda_gemm_skinny_test
  grep -E "metrics" "$O/cuda_gemm_skinny_test.txt" | head -40
  if ! test_passed cuda_gemm_skinny_test; then
    echo "skinny: the op test did not pass; the benches and model runs are left out"
    stage=skinny-failed
  fi
fi
if [ "$stage" = skinny ]; then
  step skinny bench
  timeout 300 "$(bin hypic_bench_kernels)" --only skinny --iters 20 > "$O/bench_skinny.json"; echo "bench: exit $?"
  python3 - "$O/bench_skinny.json" <<'PY'
import json, sys
rows, groups = {}, {}
for r in json.load(open(sys.argv[1]))["results"]:
    into = rows if r["op"] == "skinny_product" else groups
    into.setdefault((r["shape"], r["rows"]), {})[r["variant"]] = (r["ms"], r["gb_per_s"])
for (shape, m), v in groups.items():
    print(f"{shape:34s} {m:4d} rows: " + ", ".join(f"{k} {t[0] * 1e3:.1f} us" for k, t in v.items()))
for (shape, m), v in rows.items():
    a, b = v["hypic skinny"], v["cublas"]
    best = min((t for t in v.items() if t[0].startswith("hypic")), key=lambda t: t[1][0])
    print(f"{shape:34s} {m:4d} rows: skinny {a[0] * 1e3:7.1f} us {a[1]:5.0f} GB/s, cuBLAS {b[0] * 1e3:7.1f} us "
          f"{b[1]:5.0f} GB/s ({b[0] / a[0]:.2f}x); best plan {best[0][len('hypic skinny'):] or ' (chosen)'} "
          f"{best[1][0] * 1e3:.1f} us")
PY
  for t in cuda_backend_ops_test cuda_stitch_ops_test cuda_decode_ops_test cuda_model_test; do
    HYPIC_CUDA_SKINNY=1 run_test $t
  done
  HYPIC_CUDA_SKINNY=1 run_test engine_model_test '*cuda*'
  HYPIC_CUDA_SKINNY=1 run_test engine_batch_model_test
  for v in 1 0; do
    step "decode, HYPIC_CUDA_SKINNY=$v"
    HYPIC_CUDA_SKINNY=$v "$(bin hypic_bench_model)" --config tools/bench/configs/qwen3_5_35b_a3b.json --random-weights \
      --prefill 8192 --decode 64 --batch 1,8,32 --batch-steps 24 > "$O/decode_skinny$v.json"
    grep -o '"batch": [0-9]*\|"graph_drawn": {"ms_per_step": [0-9.]*' "$O/decode_skinny$v.json" | tr '\n' ' '; echo
    step "RAG TTFT, HYPIC_CUDA_SKINNY=$v"
    HYPIC_CUDA_SKINNY=$v "$(bin hypic_bench_ttft)" --config tools/bench/configs/qwen3_5_35b_a3b.json --case rag \
      --requests 8 > "$O/ttft_skinny$v.json" 2> "$O/ttft_skinny$v.txt"
    grep -oE '"mode": "[a-z]+", "ttft_ms": \{[^}]*\}' "$O/ttft_skinny$v.json"; grep 'measured request' "$O/ttft_skinny$v.txt" | grep hypic
  done
  HYPIC_CUDA_SKINNY=1 request8_timeline
fi
if [ "$stage" = chainwg ]; then
  TEST_TIMEOUT=120 run_test cuda_stitch_ops_test
  TEST_TIMEOUT=120 run_test cuda_sequence_state_test
  # Which of the later kernel changes moved CudaRanksMatchOneCudaRank/qwen3_5_moe out of its bound in hypic mode.
  for v in "" HYPIC_CUDA_SKINNY=0 HYPIC_CUDA_PDL_CHAIN=0 "HYPIC_CUDA_SKINNY=0 HYPIC_CUDA_PDL_CHAIN=0"; do
    step "tensor parallel on one GPU, ${v:-defaults}"
    env $v "$(bin tensor_parallel_model_test)" --gtest_filter='*CudaRanks*' > "$O/tp_${v// /_}.txt" 2>&1
    grep -E "metrics.*(qwen3_5_moe|qwen3_next_moe) cuda staged hypic|^\[  (PASSED|FAILED)" "$O/tp_${v// /_}.txt"
  done
  for f in 1 wg; do
    step "chain bench, HYPIC_CUDA_CHAIN_TC=$f"
    HYPIC_CUDA_CHAIN_TC=$f "$(bin hypic_bench_kernels)" --only chain --iters 20 > "$O/chain_$f.json"
    grep -o '"variant": "[^"]*", "steps": [0-9]*, "rows": [0-9]*, "ms": [0-9.]*' "$O/chain_$f.json"
  done
  chain_ncu HYPIC_CUDA_CHAIN_TC=wg 13 ncu_chain_products.txt  # the 6th launch of the products-only variant
  rag_ttft_under HYPIC_CUDA_CHAIN_TC chain 1 wg
  request8_timeline
  run_test cuda_model_test
  run_test engine_model_test '*cuda*:*Cuda*:*CUDA*'
fi
if [ "$stage" = spans ]; then
  TEST_TIMEOUT=120 run_test cuda_stitch_ops_test
  step "tensor parallel on one GPU (the prompt's row and 47 teacher-forced steps)"
  "$(bin tensor_parallel_model_test)" --gtest_filter='*CudaRanks*' > "$O/tp.txt" 2>&1
  grep -E "metrics|^\[  (PASSED|FAILED)" "$O/tp.txt"
  for g in 1 2; do
    for f in tokens chunked; do
      step "chain bench, HYPIC_CUDA_CHAIN_SPANS=$f HYPIC_CUDA_CHAIN_WG_GROUPS=$g"
      HYPIC_CUDA_CHAIN_SPANS=$f HYPIC_CUDA_CHAIN_WG_GROUPS=$g "$(bin hypic_bench_kernels)" --only chain --iters 20 \
        > "$O/chain_${f}_g$g.json"
      grep -o '"variant": "[^"]*", "steps": [0-9]*, "rows": [0-9]*, "ms": [0-9.]*' "$O/chain_${f}_g$g.json"
    done
  done
  RAG_LATER_HYPIC_ONLY=1 rag_ttft_under HYPIC_CUDA_CHAIN_SPANS spans_ tokens chunked
  for t in cuda_backend_ops_test cuda_gdn_chunked_test cuda_attention_prefill_test cuda_lightning_test cuda_kda_test \
           cuda_decode_ops_test cuda_gemm_skinny_test cuda_family_glue_test cuda_model_test; do
    TEST_TIMEOUT=300 run_test $t
  done
  for f in tokens chunked; do
    HYPIC_CUDA_CHAIN_SPANS=$f run_test engine_model_test '*cuda*:*Cuda*:*CUDA*'
    mv "$O/engine_model_test.txt" "$O/engine_model_test_$f.txt" 2>/dev/null
  done
  # Diagnostics last: a call cut short keeps the measurements and the checks.
  for f in tokens chunked; do chain_ncu HYPIC_CUDA_CHAIN_SPANS=$f 21 ncu_spans_$f.txt; done  # the spans' 6th launch
  request8_timeline
fi
if [ "$stage" = admission ]; then
  # Decode stalls while prompts are admitted, by --prefill-chunk (docs/serving.md); MODES, CHUNKS, REQUESTS
  # and ADMISSION_RATE pass through.
  step admission
  mkdir -p /tmp/sb/tools/hypic && ln -sf "$(bin hypic)" /tmp/sb/tools/hypic/hypic && \
    ln -sf "$(bin hypic_bench_serve)" /tmp/sb/tools/hypic_bench_serve
  tools/bench/serve_admission.sh /tmp/sb /tmp/fixtures/qwen3-tokenizer /tmp/fixtures/qwen3.5-chat/chat_template.jinja \
    "$O/serve-admission" ${ADMISSION_RATE:-2} 2>&1 | tee "$O/admission_summary.txt"
fi
if [ "$stage" = test ] || [ "$stage" = all ]; then
  step CLI check
  HYPIC=$(bin hypic) tools/bench/gpu_cli_check.sh 2>&1 | tee "$O/cli_check.txt" | tail -12
fi
if { [ "$stage" = bench ] || [ "$stage" = all ]; } && ls .whl/*.whl > /dev/null 2>&1; then
  step peers
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
  PYTHONPATH=/tmp/site python3 tools/bench/bench_peers.py --tokens 8192,32768 --iters 20 | tee "$O/bench_peers.json"
fi
wait_fuzz
step done
if [ "${ARCHIVE:-0}" = 1 ] && [ -n "${OUT:-}" ]; then tar czf "$OUT/logs.tgz" -C "$O" .; fi
