#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for hypic (system packages via apt-get), builds it, and then
#   tools/setup.sh demo   runs the demo
#   tools/setup.sh test   runs the whole test suite (what CI runs), then the hardening checks: the fast
#                         and model tests again under ASan + UBSan and a short run of every fuzz target
#                         (one clang build in build-hardening/, docs/reliability.md)
#   tools/setup.sh build  only builds
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-build}

pkgs="build-essential cmake pkg-config git ca-certificates libyaml-cpp-dev nlohmann-json3-dev libsqlite3-dev
      libgtest-dev libgmock-dev libpcre2-dev libicu-dev libboost-dev libtbb-dev libcli11-dev python3 python3-venv
      clang-14 libclang-rt-14-dev"
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
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
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
    ctest --test-dir build --output-on-failure -j "$jobs" --output-junit ctest-junit.xml
    # A test that skipped without a reason this machine has is a failure too.
    tools/check_skips.sh build/ctest-junit.xml
    # ASan + UBSan (clang) over the test programs and a short run of every fuzz target. The command line,
    # benches and examples are not rebuilt here (the plain run above tests them), and tests that run the
    # trained model over many prompts (three sweeps, multi-turn) take minutes under ASan: left to the plain run.
    CC=clang-14 CXX=clang++-14 cmake -S . -B build-hardening -DCMAKE_BUILD_TYPE=Release -DHYPIC_FUZZ=ON \
      -DHYPIC_CUDA=OFF -DHYPIC_FUZZ_SECONDS=10 >/dev/null
    targets=$(cmake --build build-hardening --target help | sed -n 's/^\.\.\. \([A-Za-z0-9_]*_\(test\|fuzz\)\)$/\1/p')
    cmake --build build-hardening -j "$jobs" --target $targets
    ctest --test-dir build-hardening --output-on-failure -j "$jobs" -L 'fast|model|fuzz' \
      -E 'QualityTest|TrainedModel(OnDevice|Modes)|TrainedQaModel\.(Greedy|Engine)|MultiTurnTest|cli_|example_'
    ;;
  demo) exec tools/demo.sh ;;
  *) echo "usage: tools/setup.sh [build|test|demo]" >&2; exit 2 ;;
esac
