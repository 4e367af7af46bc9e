#!/usr/bin/env bash
# tools/check_skips.sh on made-up ctest JUnit reports: a skip for a reason the machine has passes; a skip
# whose fixture is present, or with any other reason, fails the run.
set -euo pipefail
: "${HYPIC_SOURCE_DIR:?repository root}"
CHECK="$HYPIC_SOURCE_DIR/tools/check_skips.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tok" && echo '{}' > "$tmp/tok/tokenizer.json"

report() {  # report FILE SKIP_MESSAGE: one test that ran, one that skipped with the message
  cat > "$1" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="(empty)" tests="2" failures="0" disabled="0" skipped="1">
	<testcase name="A.Runs" classname="A.Runs" time="0.1" status="run">
		<system-out>[  PASSED  ] 1 test.
</system-out>
	</testcase>
	<testcase name="B.Skips" classname="B.Skips" time="0.0" status="notrun">
		<skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>
		<system-out>[ RUN      ] B.Skips
x_test.cc:12: Skipped
$2
[  SKIPPED ] B.Skips (0 ms)
</system-out>
	</testcase>
</testsuite>
EOF
}
expect() {  # expect RC MESSAGE
  report "$tmp/r.xml" "$2"
  set +e
  out=$(PATH="$tmp/bin:$PATH" bash "$CHECK" "$tmp/r.xml" 2>&1)
  rc=$?
  set -e
  [ "$rc" = "$1" ] || { echo "for '$2': expected exit $1, got $rc: $out"; exit 1; }
}

# No GPU here (a stand-in nvidia-smi that finds none): CUDA skips are expected.
mkdir -p "$tmp/bin" && printf '#!/bin/sh\nexit 9\n' > "$tmp/bin/nvidia-smi" && chmod +x "$tmp/bin/nvidia-smi"
expect 0 "no CUDA backend or device"
expect 0 "the Qwen3 tokenizer is not at $tmp/missing (configure with -DHYPIC_QWEN3_TOKENIZER_DIR=...)"
expect 1 "the Qwen3 tokenizer is not at $tmp/tok (configure with -DHYPIC_QWEN3_TOKENIZER_DIR=...)"
expect 1 "some other reason"
# The chat page test: its skip passes only where chromium cannot start (stand-ins first on PATH).
printf '#!/bin/sh\nexit 1\n' > "$tmp/bin/chromium" && chmod +x "$tmp/bin/chromium"
expect 0 "SKIP: chromium cannot start (/usr/bin/chromium)"
printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/chromium"
expect 1 "SKIP: chromium cannot start (/usr/bin/chromium)"
rm "$tmp/bin/chromium"
# A GPU answers: CUDA tests must run.
printf '#!/bin/sh\necho "GPU 0: NVIDIA H200"\n' > "$tmp/bin/nvidia-smi"
expect 1 "no CUDA device"
# A report where nothing skipped.
sed -i 's/status="notrun"/status="run"/' "$tmp/r.xml"
bash "$CHECK" "$tmp/r.xml" > /dev/null
echo PASS
