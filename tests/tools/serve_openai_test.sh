#!/usr/bin/env bash
# `hypic serve` end to end with the real `openai` Python package (tests/tools/serve_openai_client.py):
# chat and completions, streamed and not, tools on both chat formats, cancellation, errors, API keys,
# tenant isolation, a full queue, server-side templates (--templates), token logprobs and logit bias, the
# model's generation_config.json defaults. Servers on loopback with the trained tiny model on the CPU.
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

# The model's generation_config.json gives the defaults of what a request leaves out (--generation-config
# auto, the default); a broken one stops the server at start-up, naming the file and the field.
gmodel="$tmp/gmodel"
mkdir "$gmodel"
for f in "$model"/*; do ln -s "$f" "$gmodel/"; done
echo '{"temperature": "hot"}' > "$gmodel/generation_config.json"
if "$HYPIC" serve --model "$gmodel" --device cpu --port 0 2>"$tmp/gbad.log"; then
  echo "FAIL: hypic serve started with a broken generation_config.json"; exit 1
fi
grep -q "generation_config.json: 'temperature' must be a number" "$tmp/gbad.log" || {
  cat "$tmp/gbad.log"; echo "FAIL: the start-up error does not name the file and field"; exit 1; }
rm "$tmp/gbad.log"
echo '{"temperature": 0.0, "max_new_tokens": 3, "eos_token_id": 2}' > "$gmodel/generation_config.json"
model=$gmodel start gcfg
grep -q "generation_config.json: temperature 0, max_tokens 3" "$tmp/gcfg.log" || {
  cat "$tmp/gcfg.log"; echo "FAIL: the server does not say which defaults it took"; exit 1; }
"$py" - "$url" <<'PY' || { echo "--- server logs"; cat "$tmp"/gcfg.log; exit 1; }
import json, sys, urllib.request
def ask(extra):
    body = dict({"messages": [{"role": "user", "content": "Tell a long story."}], "ignore_eos": True}, **extra)
    req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req))
a, b = ask({"seed": 1}), ask({"seed": 2})
assert a["usage"]["completion_tokens"] == 3, a["usage"]
assert a["choices"][0]["message"] == b["choices"][0]["message"], "the file's temperature 0: greedy whatever the seed"
c = ask({"max_tokens": 6, "temperature": 1.0, "seed": 3})
assert c["usage"]["completion_tokens"] == 6, "what a request sets wins: %s" % c["usage"]
print("generation_config defaults: ok")
PY
