#!/usr/bin/env bash
# Progress lines: drawn on stderr when it is a terminal (here a pseudo-terminal from `script`), never
# with --quiet or when stderr is a pipe; stdout (the JSON result) is the same either way.
set -euo pipefail
M="$HYPIC_SOURCE_DIR/examples/models/hypic-qa-tiny"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$tmp/docs"
for i in 1 2 3; do echo "document $i about caching segments" > "$tmp/docs/d$i.txt"; done
on_tty() { script -qec "$*" /dev/null; }

out=$(on_tty "$HYPIC" ingest --db "$tmp/a.sqlite" --dir "$tmp/docs")
grep -q "ingesting documents: 3/3 (100%)" <<<"$out" || fail "no ingest progress on a terminal: $out"
out=$(on_tty "$HYPIC" ingest --db "$tmp/b.sqlite" --dir "$tmp/docs" --quiet)
! grep -q "ingesting" <<<"$out" || fail "progress despite --quiet: $out"
"$HYPIC" ingest --db "$tmp/c.sqlite" --dir "$tmp/docs" 2>"$tmp/err" >/dev/null
[ ! -s "$tmp/err" ] || fail "stderr not empty on a pipe: $(cat "$tmp/err")"

head -n 2 "$HYPIC_SOURCE_DIR/tests/fixtures/eval/qa_eval_seed1.jsonl" > "$tmp/p.jsonl"
out=$(on_tty "$HYPIC" eval-pic --model "$M" --prompts "$tmp/p.jsonl" --modes hypic --decode-tokens 1)
grep -qE "reading weights: 13.3 MB of 13.3 MB, [0-9.]+ [kMG]?B/s \\(100%\\)" <<<"$out" || fail "no weight-reading progress: $out"
grep -q "eval-pic prompts: 2/2 (100%)" <<<"$out" || fail "no eval-pic progress: $out"
"$HYPIC" eval-pic --model "$M" --prompts "$tmp/p.jsonl" --modes hypic --decode-tokens 1 2>"$tmp/err" >/dev/null
[ ! -s "$tmp/err" ] || fail "eval-pic stderr not empty on a pipe: $(cat "$tmp/err")"
echo PASS
