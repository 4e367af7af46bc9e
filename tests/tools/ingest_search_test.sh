#!/usr/bin/env bash
# hypic ingest + search over the sample documents: stable chunk ids across re-ingest, BM25 order.
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
D="$HYPIC_SOURCE_DIR/examples/templates/docs"
"$HYPIC" ingest --db "$tmp/r.db" --dir "$D" --chunk-tokens 40 > "$tmp/ingest1.json"
"$HYPIC" search --db "$tmp/r.db" --query "chain key prefix" --k 2 > "$tmp/s1.json"
"$HYPIC" ingest --db "$tmp/r.db" --dir "$D" --chunk-tokens 40 > "$tmp/ingest2.json"
"$HYPIC" search --db "$tmp/r.db" --query "chain key prefix" --k 2 > "$tmp/s2.json"
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
i1, i2 = json.load(open(f"{t}/ingest1.json")), json.load(open(f"{t}/ingest2.json"))
assert i1["documents_added"] == 3 and i1["chunks_added"] > 3, i1
assert i2["documents_added"] == 0 and i2["documents_unchanged"] == 3, i2
s1, s2 = json.load(open(f"{t}/s1.json")), json.load(open(f"{t}/s2.json"))
assert len(s1["chunks"]) == 2 and s1 == s2
top = s1["chunks"][0]
assert top["path"] == "segment_cache.txt" and "chain key" in top["text"], top
assert s1["chunks"][0]["score"] >= s1["chunks"][1]["score"]
PY
set +e
err=$("$HYPIC" search --db "$tmp/missing.db" --query x 2>&1); rc=$?
set -e
[ "$rc" = 1 ] && [ ! -e "$tmp/missing.db" ] || { echo "search created or opened a missing db: $err"; exit 1; }
echo "plain text" > "$tmp/notes.txt"
set +e
err=$("$HYPIC" ingest --db "$tmp/notes.txt" --dir "$D" 2>&1); rc=$?
set -e
[ "$rc" = 1 ] && echo "$err" | grep -q "$tmp/notes.txt" && [ "$(cat "$tmp/notes.txt")" = "plain text" ] || { echo "non-db file not refused cleanly: $err"; exit 1; }
echo PASS
