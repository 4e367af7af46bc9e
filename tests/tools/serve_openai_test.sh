#!/usr/bin/env bash
# `hypic serve` end to end with the real `openai` Python package (tests/tools/serve_openai_client.py):
# chat and completions, streamed and not, tools on both chat formats, cancellation, errors, API keys,
# tenant isolation, a full queue, server-side templates (--templates). Two servers on loopback with the
# trained tiny model on the CPU.
# The package comes from the venv tools/setup.sh makes under the build directory (serve-venv); without
# it the test skips saying so (tools/check_skips.sh does not accept that skip: CI always has the venv).
set -euo pipefail
model="$HYPIC_SOURCE_DIR/examples/models/hypic-qa-tiny"
py="$HYPIC_BUILD_DIR/serve-venv/bin/python"
if ! "$py" -c "import openai" 2>/dev/null; then
  echo "SKIP: the openai package is not installed at $HYPIC_BUILD_DIR/serve-venv (tools/setup.sh test installs it)"
  exit 77
fi
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# start NAME ARGS...: a server on a free port; sets $url.
start() {
  local name=$1; shift
  : > "$tmp/$name.log"  # before the job: it opens the log only when it gets scheduled
  HYPIC_THREADS=1 "$HYPIC" serve --model "$model" --device cpu --port 0 --quiet "$@" 2>"$tmp/$name.log" &
  pids+=($!)
  for _ in $(seq 200); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/$name.log")
    [ -n "$port" ] && break
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$tmp/$name.log"; echo "FAIL: hypic serve $name exited"; exit 1; }
    sleep 0.05
  done
  [ -n "$port" ] || { cat "$tmp/$name.log"; echo "FAIL: hypic serve $name did not start"; exit 1; }
  url="http://127.0.0.1:$port"
}
# A broken template stops the server at start-up, naming the file and line.
mkdir "$tmp/templates"
printf 'name: bad\nblocks:\n  - id: q\n    role: user\n    txet: hi\n' > "$tmp/templates/bad.yaml"
if "$HYPIC" serve --model "$model" --device cpu --port 0 --templates "$tmp/templates" 2>"$tmp/bad.log"; then
  echo "FAIL: hypic serve started with a broken template"; exit 1
fi
grep -q "bad.yaml:5:" "$tmp/bad.log" || { cat "$tmp/bad.log"; echo "FAIL: the start-up error does not name bad.yaml:5"; exit 1; }
rm "$tmp/bad.log"

templates="$HYPIC_SOURCE_DIR/examples/templates"
start qwen3 --api-key k1 --api-key k2 --max-sessions 1 --max-queue 0 --templates "$templates"
url3=$url
start qwen35 --chat-template "$HYPIC_SOURCE_DIR/tests/fixtures/chat/qwen3.5_chat_template.jinja"
url35=$url
"$py" "$HYPIC_SOURCE_DIR/tests/tools/serve_openai_client.py" "$url3" "$url35" "$templates" || {
  echo "--- server logs"; cat "$tmp"/*.log; exit 1; }
