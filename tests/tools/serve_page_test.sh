#!/usr/bin/env bash
# The chat page of `hypic serve` in headless Chromium: load it with a question (?q=), let the streamed
# answer arrive, and check the DOM holds the reply with its TTFT and per-block cache hits. With
# HYPIC_UPDATE_SCREENSHOT=1 it also rewrites docs/serve_page.png. Skips (exit 77, "chromium cannot start")
# where no Chromium runs; tools/check_skips.sh accepts that only where `chromium` really cannot start.
set -euo pipefail
model="$HYPIC_SOURCE_DIR/examples/models/hypic-qa-tiny"
browser=$(command -v chromium || command -v chromium-browser || true)
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run)
if [ -z "$browser" ] || ! timeout 60 "$browser" "${flags[@]}" --dump-dom about:blank >/dev/null 2>&1; then
  echo "SKIP: chromium cannot start (${browser:-no chromium on PATH})"
  exit 77
fi
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
HYPIC_THREADS=1 "$HYPIC" serve --model "$model" --device cpu --port 0 --quiet 2>"$tmp/log" &
pid=$!
for _ in $(seq 200); do
  port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/log")
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { cat "$tmp/log"; echo "FAIL: hypic serve did not start"; exit 1; }
url="http://127.0.0.1:$port/?q=What%20is%20the%20capital%20of%20France%3F"
# Virtual time runs only while nothing is loading, so the budget is spent after the streamed reply ended.
timeout 120 "$browser" "${flags[@]}" --virtual-time-budget=20000 --dump-dom "$url" >"$tmp/dom.html" 2>"$tmp/chromium.log" || {
  cat "$tmp/chromium.log"; echo "FAIL: chromium exited non-zero"; exit 1; }
grep -q 'data-replies="1"' "$tmp/dom.html" || { cat "$tmp/dom.html"; echo "FAIL: the reply did not complete"; exit 1; }
grep -q 'class="msg user">What is the capital of France?' "$tmp/dom.html" || { echo "FAIL: the question is not shown"; exit 1; }
grep -qE 'TTFT [0-9]+ ms' "$tmp/dom.html" || { cat "$tmp/dom.html"; echo "FAIL: no TTFT shown for the reply"; exit 1; }
grep -qE 'message [0-9]+ (hit|miss)' "$tmp/dom.html" || { echo "FAIL: no per-block cache report"; exit 1; }
if [ -n "${HYPIC_UPDATE_SCREENSHOT:-}" ]; then
  timeout 120 "$browser" "${flags[@]}" --virtual-time-budget=20000 --window-size=900,520 \
    --screenshot="$HYPIC_SOURCE_DIR/docs/serve_page.png" "$url" >/dev/null 2>&1
fi
echo "ok - the page streamed a reply and showed its TTFT and block hits"
