#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for hypic (system packages via apt-get), builds it, and then
#   tools/setup.sh demo   runs the demo
#   tools/setup.sh test   runs the whole test suite (what CI runs) in two stages: the slow, CLI and GPU
#                         tests in the plain build, every other test under ASan + UBSan (one clang build
#                         in build-hardening/) with a short run of every fuzz target (docs/reliability.md)
#   tools/setup.sh build  only builds
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-build}

pkgs="build-essential cmake pkg-config git ca-certificates libyaml-cpp-dev nlohmann-json3-dev libsqlite3-dev
      libxxhash-dev libssl-dev libgtest-dev libgmock-dev libpcre2-dev libicu-dev libboost-dev libtbb-dev libcli11-dev python3 python3-venv
      clang-14 libclang-rt-14-dev lld"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

jobs=$(nproc 2>/dev/null || echo 2)
# The test run has two stages, split by test program. The plain build (gcc, CUDA where nvcc is) builds the
# command line, benches, examples, GPU tests and the test programs below, which hold the tests that take
# minutes (the trained-model sweeps, the engine suite over every family and mode, multi-turn, the
# cache-record accuracy sweep, the I/O-bound cache crash test, the real Qwen3 tokenizer over long and
# varied texts, prompts run in steps of down to one token and the server's chunked admission), and runs
# every test it registers, with the
# CLI and example tests (cli_demo_test among them: tools/demo.sh, what `demo` below runs, with its answers
# checked). The sanitizer build (clang, ASan + UBSan) builds every other test program and runs them, and a
# short run of every fuzz target.
slow_programs='engine_model_test;trained_qa_model_test;sdk_multi_turn_model_test;entry_codec_model_test;sdk_cache_dir_model_test;regex_test;tokenizer_variants_test;engine_prompt_job_model_test;serve_scheduler_test'
only=""
[ "$what" = test ] && only="$slow_programs"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "-DHYPIC_ONLY_TESTS=$only" >/dev/null
cmake --build build -j "$jobs"

case "$what" in
  build) ;;
  test)
    # Goldens are rewritten by hand and reviewed, never by the run that checks them.
    if [ -n "${HYPIC_UPDATE_GOLDENS:-}" ]; then echo "setup: HYPIC_UPDATE_GOLDENS is refused in a test run" >&2; exit 2; fi
    # The `openai` client package for the end-to-end test of `hypic serve` (tests/tools/serve_openai_test.sh),
    # pinned, in a venv of its own; nothing that builds or runs hypic uses it.
    if ! build/serve-venv/bin/python -c "import openai" 2>/dev/null; then
      python3 -m venv build/serve-venv
      build/serve-venv/bin/pip install -q "openai==3.57.0"
    fi
    # Plain stage: the slow programs' tests, the CLI and examples, and the GPU tests (they skip without a GPU).
    ctest --test-dir build --output-on-failure -j "$jobs" -L 'fast|model' --output-junit ctest-junit.xml
    ctest --test-dir build --output-on-failure -j "$jobs" -L gpu --output-junit ctest-gpu-junit.xml
    # A test that skipped without a reason this machine has is a failure too.
    tools/check_skips.sh build/ctest-junit.xml
    tools/check_skips.sh build/ctest-gpu-junit.xml
    # Sanitizer stage: every other test under ASan + UBSan, and a short run of every fuzz target.
    CC=clang-14 CXX=clang++-14 cmake -S . -B build-hardening -DCMAKE_BUILD_TYPE=Release -DHYPIC_FUZZ=ON \
      -DHYPIC_CUDA=OFF -DHYPIC_FUZZ_SECONDS=10 -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld \
      "-DHYPIC_SKIP_TESTS=$slow_programs" >/dev/null
    cmake --build build-hardening -j "$jobs" --target hypic_test_programs
    ctest --test-dir build-hardening --output-on-failure -j "$jobs" -L 'fast|model|fuzz' -E '^(cli_|example_)' \
      --output-junit ctest-junit.xml
    tools/check_skips.sh build-hardening/ctest-junit.xml
    ;;
  demo) exec tools/demo.sh ;;
  *) echo "usage: tools/setup.sh [build|test|demo]" >&2; exit 2 ;;
esac
