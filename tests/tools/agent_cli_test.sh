#!/usr/bin/env bash
# hypic run / hypic chat on a fixture model: per-block cache hits across runs in one process, clear
# errors, and a chat session that survives a SIGKILL between turns and resumes from SQLite.
set -euo pipefail
M="$HYPIC_SOURCE_DIR/tests/fixtures/models/qwen3_5_dense"
T="$HYPIC_SOURCE_DIR/examples/templates"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Two runs in one process share the segment store: the second hits every block but the question.
python3 - "$T/rag_qa.vars.json" "$tmp/vars2.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
w = dict(v, question="And what is a chain key?")
json.dump([v, w], open(sys.argv[2], "w"))
PY
"$HYPIC" run "$T/rag_qa.yaml" --vars "$tmp/vars2.json" --model "$M" --max-steps 1 --json > "$tmp/run.json"
python3 - "$tmp/run.json" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1]))
assert not any(x["hit"] for x in a["blocks"]), a["blocks"]
assert all(x["hit"] for x in b["blocks"][:-1]) and not b["blocks"][-1]["hit"], b["blocks"]
assert b["computed_tokens"] < a["computed_tokens"] / 4, (a["computed_tokens"], b["computed_tokens"])
PY

# Sampling flags override the template's agent settings: a hot temperature changes the reply with the seed,
# top-k 1 brings back the greedy one, --max-tokens caps it, and an out-of-range value is refused.
q=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$T/rag_qa.vars.json")
echo "$q" > "$tmp/vars1.json"
answer() { "$HYPIC" run "$T/rag_qa.yaml" --vars "$tmp/vars1.json" --model "$M" --max-steps 1 --json --quiet "$@" |
  python3 -c 'import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r, list) else r; print(json.dumps([r["answer"], r.get("completion_tokens")]))'; }
greedy=$(answer --temperature 0 --max-tokens 12)
hot=$(for s in 1 2 3 4; do answer --temperature 1.5 --seed $s --max-tokens 12; done | sort -u | wc -l)
[ "$hot" -gt 1 ] || { echo "FAIL: --temperature 1.5 with four seeds gave one reply"; exit 1; }
[ "$(answer --temperature 1.5 --seed 3 --top-k 1 --max-tokens 12)" = "$greedy" ] || {
  echo "FAIL: --top-k 1 is not greedy"; exit 1; }
[ "$(answer --temperature 0 --max-tokens 12 --repetition-penalty 1)" = "$greedy" ] || {
  echo "FAIL: --repetition-penalty 1 changed the greedy reply"; exit 1; }
if "$HYPIC" run "$T/rag_qa.yaml" --vars "$tmp/vars1.json" --model "$M" --top-p 0 2> "$tmp/err"; then exit 1; fi
grep -q -- "--top-p" "$tmp/err"

# Bad input: a clear message naming the file, exit status 1, no crash.
if "$HYPIC" run "$tmp/missing.yaml" --vars "$T/rag_qa.vars.json" --model "$M" 2> "$tmp/err"; then exit 1; fi
grep -q "missing.yaml" "$tmp/err"
echo '{"question": 3}' > "$tmp/badvars.json"
if "$HYPIC" run "$T/rag_qa.yaml" --vars "$tmp/badvars.json" --model "$M" 2> "$tmp/err"; then exit 1; fi
grep -q "question" "$tmp/err"

# Chat: answer one line, get killed, resume the session from the database.
db="$tmp/chat.sqlite"
mkfifo "$tmp/in"
"$HYPIC" chat --model "$M" --db "$db" --session s1 < "$tmp/in" > "$tmp/out1" 2> "$tmp/err1" &
pid=$!
exec 3> "$tmp/in"
echo "Hello there" >&3
# The turn's report "[H/N blocks hit, ...]" marks its end.
for _ in $(seq 1 300); do grep -q "blocks hit" "$tmp/err1" && break; sleep 0.1; done
grep -q "blocks hit" "$tmp/err1"
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
exec 3>&-
printf 'Second question\nThird question\n/exit\n' | "$HYPIC" chat --model "$M" --db "$db" --session s1 > "$tmp/out2" 2> "$tmp/err2"
grep -q "resuming session 's1': 2 earlier messages" "$tmp/err2"
# Hits and blocks of every turn: the resumed turn has the two earlier messages as history blocks (a new
# process: nothing cached yet); the turn after it hits every block of the resumed turn's prompt.
reports() { sed -n 's/.*\[\([0-9]*\)\/\([0-9]*\) blocks hit.*/\1 \2/p' "$1"; }
read -r h1 n1 < <(reports "$tmp/err1")
{ read -r h2 n2; read -r h3 n3; } < <(reports "$tmp/err2")
echo "turn 1: $h1/$n1 blocks hit; resumed: $h2/$n2; next: $h3/$n3"
[ "$h1" = 0 ] && [ "$n2" = $((n1 + 2)) ] && [ "$h3" -ge "$n2" ] && [ "$n3" = $((n2 + 2)) ] ||
  { echo "unexpected block hits"; cat "$tmp/err1" "$tmp/err2"; exit 1; }

# End to end on the shipped trained model: template -> plan -> cached segments -> agent -> answers.
Q="$HYPIC_SOURCE_DIR/examples/models/hypic-qa-tiny"
"$HYPIC" run "$T/qa_docs.yaml" --vars "$T/qa_docs.vars.json" --model "$Q" --json > "$tmp/qa.json"
python3 - "$tmp/qa.json" "$T/qa_docs.vars.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1])); given = json.load(open(sys.argv[2]))
answers = [r["answer"] for r in runs]
assert answers == [v["expected"] for v in given], answers
assert sum(any(b["hit"] for b in r["blocks"][2:-1]) for r in runs[1:]) >= 4, "documents should recur as hits"
PY
