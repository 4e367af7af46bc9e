#!/usr/bin/env bash
# The demo behind the README's first command (run by tools/setup.sh demo after the build).
# The shipped model (examples/models/hypic-qa-tiny, trained by tools/train/) answers questions over
# documents; every document is its own cached segment and recurs across questions in new orders.
# Where the models of tools/train's long_memory and tool_agent recipes are installed
# (examples/models/hypic-qa-long, examples/models/hypic-agent-tiny), the cache modes are compared on
# the long-memory model (multi-hop and update questions whose answers depend on the order of the
# documents: hypic answers them as full recompute does, naive composition loses more than half of them,
# docs/quality.md) and a tool loop runs; without them the demo shows the QA model only.
# It takes about a minute on two cores; tests/tools/demo_test.sh runs it as it is and checks every answer
# against the expected ones it prints (HYPIC, when set, is the hypic binary to use).
set -euo pipefail
cd "$(dirname "$0")/.."
HYPIC=${HYPIC:-build/tools/hypic/hypic}
MODEL=examples/models/hypic-qa-tiny
LONG=examples/models/hypic-qa-long
AGENT=examples/models/hypic-agent-tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== 1. Questions over documents, through the agent SDK (hypic run, examples/templates/qa_docs.yaml)"
echo "   8 questions in one process; documents recur, so later questions reuse their cached segments."
echo "   Expected answers: $(grep -o '"expected": "[^"]*"' examples/templates/qa_docs.vars.json | cut -d'"' -f4 | paste -sd'|' | sed 's/|/ | /g')"
$HYPIC run examples/templates/qa_docs.yaml --vars examples/templates/qa_docs.vars.json --model "$MODEL" --brief

echo
if [ -f "$LONG/model.safetensors" ]; then
  # The long-memory model's ordered questions: two or three documents move the meeting to another
  # place and the later one counts (update), or the question asks for the gate of that place, stated
  # in yet another document (multi-hop). A few of each keep the demo short; docs/quality.md has all 200
  # of each type in every mode.
  echo "== 2. Cache modes side by side on 6 multi-hop and 6 update questions (hypic eval-pic)"
  echo "   full: no cache | hypic: position-independent reuse + seams | naive: composed without the transfer operator"
  for type in multihop update; do
    grep -m 6 "\"type\": \"$type\"" tests/fixtures/eval/long_eval_seed1.jsonl > "$tmp/$type.jsonl"
    echo "-- $type questions, $LONG"
    $HYPIC eval-pic --model "$LONG" --prompts "$tmp/$type.jsonl" --modes full,hypic,naive --decode-tokens 14 --show 1
  done
else
  echo "== 2. Every cache mode side by side on 12 evaluation prompts (hypic eval-pic)"
  echo "   full: no cache | prefix: exact prefix reuse | hypic: position-independent reuse + seams | naive, noseam: ablations"
  head -n 12 tests/fixtures/eval/qa_eval_seed1.jsonl > "$tmp/prompts.jsonl"
  $HYPIC eval-pic --model "$MODEL" --prompts "$tmp/prompts.jsonl" --decode-tokens 6 --show 2
fi

if [ -f "$AGENT/model.safetensors" ]; then
  echo
  echo "== 3. A tool loop (hypic run examples/templates/tool_agent.yaml): calculator, search_docs over a small collection"
  mkdir -p "$tmp/docs"
  echo "The code of Kelmora is 5831. The old bridge was quiet at night. Pelu lives in Drast." > "$tmp/docs/harbor.txt"
  echo "The pin of Brathis is 4417. A few children played near the water." > "$tmp/docs/garden.txt"
  $HYPIC ingest --db "$tmp/docs.db" --dir "$tmp/docs" --tokenizer "$AGENT/tokenizer.json" --quiet > /dev/null
  cat > "$tmp/questions.json" <<'EOF'
[{"question": "What is 347 * 29?"}, {"question": "What is the code of Kelmora?"},
 {"question": "What is the pin of Brathis plus 250?"}, {"question": "Say hello to Pelu."}]
EOF
  echo "   Expected answers: 10063 | 5831 | 4667 | Hello, Pelu!"
  $HYPIC run examples/templates/tool_agent.yaml --vars "$tmp/questions.json" --model "$AGENT" --docs-db "$tmp/docs.db"
fi
