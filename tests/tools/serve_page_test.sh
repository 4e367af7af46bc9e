#!/usr/bin/env bash
# The chat page of `hypic serve` in headless Chromium, driven over the DevTools protocol
# (serve_page_client.py): load it with a question (?q=), wait until the streamed answer has finished,
# and check the page shows the reply with its TTFT and per-block cache hits. With
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
pid= cpid=
cleanup() {
  for p in $pid $cpid; do kill "$p" 2>/dev/null || true; done
  # Chromium's helper processes outlive its main one for a moment and still write into the profile.
  pkill -f -- "user-data-dir=$tmp/profile" 2>/dev/null || true
  wait 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do rm -rf "$tmp" 2>/dev/null && break; sleep 0.5; done
  true
}
trap cleanup EXIT
# The log exists before the server starts: the background job opens it only when it gets scheduled, and
# a read before that would end the script (set -e).
: > "$tmp/log"
HYPIC_THREADS=1 "$HYPIC" serve --model "$model" --device cpu --port 0 --quiet 2>"$tmp/log" &
pid=$!
for _ in $(seq 200); do
  port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/log")
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { cat "$tmp/log"; echo "FAIL: hypic serve did not start"; exit 1; }
url="http://127.0.0.1:$port/?q=What%20is%20the%20capital%20of%20France%3F"
# Chromium with the DevTools protocol on a free port (it writes the port to DevToolsActivePort).
"$browser" "${flags[@]}" --remote-debugging-port=0 --user-data-dir="$tmp/profile" about:blank 2>"$tmp/chromium.log" &
cpid=$!
for _ in $(seq 400); do
  [ -s "$tmp/profile/DevToolsActivePort" ] && break
  kill -0 "$cpid" 2>/dev/null || { cat "$tmp/chromium.log"; echo "SKIP: chromium cannot start (exited)"; exit 77; }
  sleep 0.05
done
devtools=$(head -1 "$tmp/profile/DevToolsActivePort" 2>/dev/null || true)
[ -n "$devtools" ] || { echo "FAIL: chromium did not open its DevTools port"; exit 1; }
shot=()
[ -n "${HYPIC_UPDATE_SCREENSHOT:-}" ] && shot=("$HYPIC_SOURCE_DIR/docs/serve_page.png")
python3 "$HYPIC_SOURCE_DIR/tests/tools/serve_page_client.py" "$devtools" "$url" "${shot[@]}"
