#!/usr/bin/env bash
# The disk tier through the CLI, across real process restarts (the shipped QA model on the CPU):
#  - `hypic run --cache-dir D` in a second process hits what the first cached: its block hits and
#    computed tokens equal those of a warm second run inside the first process;
#  - `hypic cache ls|stats|verify|clear` list, count, check and empty the directory; a damaged entry
#    file is found by verify (exit 1, named), and a run meeting one drops it with a log line and
#    recomputes the block;
#  - --verify-hits recomputes a request with hits in full mode and reports the first-token agreement;
#  - `hypic cache size` gives the record bytes per chunk at a model's shape.
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
M="$HYPIC_SOURCE_DIR/examples/models/hypic-qa-tiny"
T="$HYPIC_SOURCE_DIR/examples/templates/qa_docs.yaml"
python3 - "$HYPIC_SOURCE_DIR/examples/templates/qa_docs.vars.json" "$tmp" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))[0]
json.dump([v, v], open(sys.argv[2] + "/twice.json", "w"))
json.dump(v, open(sys.argv[2] + "/once.json", "w"))
PY
run() { "$HYPIC" run "$T" --model "$M" --device cpu --brief --quiet --cache-dir "$tmp/cache" "$@" 2>>"$tmp/log" | sed 's/TTFT.*//'; }

run --vars "$tmp/twice.json" >"$tmp/first"
[ "$(wc -l <"$tmp/first")" = 2 ] || fail "two runs expected: $(cat "$tmp/first")"
warm=$(sed -n 2p "$tmp/first")
grep -q " 0/" <(sed -n 1p "$tmp/first") || fail "the first run should be cold: $(cat "$tmp/first")"
restarted=$(run --vars "$tmp/once.json")
[ "$restarted" = "$warm" ] || fail "after a restart: [$restarted], warm in-process: [$warm]"
echo "restart: $restarted"
# --verify-hits 1: the request with hits is recomputed in full mode and compared; the first token agrees.
"$HYPIC" run "$T" --model "$M" --device cpu --brief --quiet --cache-dir "$tmp/cache" --vars "$tmp/once.json" \
  --verify-hits 1 >"$tmp/verified" 2>>"$tmp/log"
grep -qE 'verify: KL [0-9.e+-]+, top-1 agrees' "$tmp/verified" || fail "no verification reported: $(cat "$tmp/verified")"

"$HYPIC" cache stats --cache-dir "$tmp/cache" >"$tmp/stats"
grep -qE '^entries [1-9]' "$tmp/stats" || fail "stats: $(cat "$tmp/stats")"
"$HYPIC" cache ls --cache-dir "$tmp/cache" >"$tmp/ls"
n=$(grep -cE '^[cp][0-9a-f]{32} ' "$tmp/ls")
grep -qE "^entries $n " "$tmp/stats" || fail "ls lists $n entries, stats says $(head -1 "$tmp/stats")"
"$HYPIC" cache verify --cache-dir "$tmp/cache" | grep -q "$n intact, 0 dropped" || fail "verify of a sound cache"

# Damage one content entry: verify names it and exits 1; it is gone afterwards.
victim=$(grep -oE '^c[0-9a-f]{32}' "$tmp/ls" | head -1)
printf 'XXXX' | dd of="$tmp/cache/entries/$victim.ent" bs=1 seek=200 conv=notrunc status=none
set +e; "$HYPIC" cache verify --cache-dir "$tmp/cache" >"$tmp/verify"; rc=$?; set -e
[ "$rc" = 1 ] && grep -q "dropped $victim" "$tmp/verify" || fail "verify of a damaged entry: rc $rc, $(cat "$tmp/verify")"
# A run meeting a damaged file drops it, says so, and recomputes: the chain entry (the exact state
# after the documents) is damaged, so the blocks come from their content entries and the seams are
# recomputed.
victim=$(grep -oE '^p[0-9a-f]{32}' "$tmp/ls" | head -1)
[ -n "$victim" ] || fail "no chain entry listed: $(cat "$tmp/ls")"
printf 'XXXX' | dd of="$tmp/cache/entries/$victim.ent" bs=1 seek=200 conv=notrunc status=none
: >"$tmp/log"
again=$(run --vars "$tmp/once.json")
grep -q "cache entry $victim .*dropped, it will be recomputed" "$tmp/log" || fail "no log line for the damaged entry: $(cat "$tmp/log")"
[ "$again" != "$warm" ] || fail "a damaged entry was served as a hit"

"$HYPIC" cache clear --cache-dir "$tmp/cache" | grep -qE '^removed [1-9][0-9]* entries' || fail "clear"
"$HYPIC" cache stats --cache-dir "$tmp/cache" | grep -q '^entries 0 ' || fail "entries left after clear"
set +e; "$HYPIC" cache ls --cache-dir "$tmp/nowhere" 2>"$tmp/err"; rc=$?; set -e
[ "$rc" = 1 ] && grep -q "no cache directory" "$tmp/err" || fail "ls of a missing directory: rc $rc $(cat "$tmp/err")"
# Entry sizes at the 35B-A3B shape (docs/cache_tiers.md): compact records fit the 80 MB goal per 512-token chunk.
"$HYPIC" cache size --config "$HYPIC_SOURCE_DIR/tools/bench/configs/qwen3_5_35b_a3b.json" >"$tmp/size"
awk '$1 == "fp32" && $3 > 190 {a=1} $1 == "bf16" && $3 < 110 {b=1} $1 == "compact" && $3 <= 80 {c=1} END {exit !(a && b && c)}' \
  "$tmp/size" || fail "entry sizes: $(cat "$tmp/size")"
echo PASS
